import APNSCore
import APNSHTTP2Core
import NIOCore
import NIOHPACK
import Testing

@testable import APNSHTTP2

/// The client's HPACK encoder, checked by NIOHPACK's decoder (an implementation the project
/// did not write) block after block, so the two dynamic tables must stay in step.
@Suite struct HPACKRequestEncoderTests {
    static func request(
        topic: String = "com.example.app",
        expiration: UInt32 = 0,
        collapseID: String? = nil,
        n: Int = 0
    ) -> QueuedRequest {
        let token = try! DeviceToken(hex: padded(n, 64))
        return QueuedRequest(
            tag: UInt64(n),
            token: token,
            path: "/3/device/\(token.hex)",
            body: [],
            pushType: .alert,
            topic: topic,
            priority: 10,
            expiration: expiration,
            collapseID: collapseID,
            apnsID: "00000000-0000-4000-8000-\(padded(n, 12))",
            retryLimit: 0
        )
    }

    static func padded(_ n: Int, _ width: Int) -> String {
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: width - hex.count) + hex
    }

    static func expected(_ r: QueuedRequest, authority: String, authorization: String?) -> [String] {
        var list = [
            ":method: POST", ":scheme: https", ":authority: \(authority)", ":path: \(r.path)", "apns-id: \(r.apnsID)",
            "apns-push-type: alert", "apns-topic: \(r.topic)", "apns-priority: 10", "apns-expiration: \(r.expiration)",
        ]
        if let c = r.collapseID { list.append("apns-collapse-id: \(c)") }
        if let authorization { list.append("authorization: \(authorization)") }
        return list
    }

    static func decode(_ buffer: inout ByteBuffer, with decoder: inout HPACKDecoder) throws -> [String] {
        try decoder.decodeHeaders(from: &buffer).map { "\($0.name): \($0.value)" }
    }

    @Test func repeatedHeadersBecomeIndexesAndTheDecoderAgrees() throws {
        var encoder = HPACKRequestEncoder()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        let authorization = "bearer " + String(repeating: "j", count: 180)
        var sizes: [Int] = []
        for n in 0..<5 {
            let r = Self.request(n: n)
            var buffer = ByteBuffer()
            encoder.writeRequest(r, authority: "api.push.apple.com", authorization: authorization, into: &buffer)
            sizes.append(buffer.readableBytes)
            #expect(
                try Self.decode(&buffer, with: &decoder)
                    == Self.expected(r, authority: "api.push.apple.com", authorization: authorization)
            )
        }
        // The first block carries the authorization and the other stable values; later blocks
        // refer to them with one byte each and carry only what changes.
        #expect(sizes[0] > 300)
        #expect(sizes[1] < 160, "\(sizes)")
        #expect(Set(sizes.dropFirst()).count == 1, "\(sizes)")
    }

    @Test func manyTopicsEvictOldEntriesInStepWithTheDecoder() throws {
        var encoder = HPACKRequestEncoder()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        for n in 0..<400 {
            // Topics, expirations and collapse ids that keep changing fill and churn the table.
            let r = Self.request(
                topic: "com.example.app\(n % 37)",
                expiration: n % 3 == 0 ? 0 : UInt32(1_800_000_000 + n),
                collapseID: n % 5 == 0 ? "c\(n)" : nil,
                n: n
            )
            var buffer = ByteBuffer()
            encoder.writeRequest(
                r,
                authority: n % 7 == 0 ? "other.example" : "api.push.apple.com",
                authorization: "bearer t\(n / 50)",
                into: &buffer
            )
            #expect(
                try Self.decode(&buffer, with: &decoder)
                    == Self.expected(
                        r,
                        authority: n % 7 == 0 ? "other.example" : "api.push.apple.com",
                        authorization: "bearer t\(n / 50)"
                    )
            )
            #expect(encoder.tableSize <= 4096)
        }
    }

    @Test func aSmallerTableIsSignalledAndRespected() throws {
        var encoder = HPACKRequestEncoder()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        let authorization = "bearer " + String(repeating: "k", count: 180)
        var buffer = ByteBuffer()
        encoder.writeRequest(Self.request(n: 1), authority: "a.example", authorization: authorization, into: &buffer)
        _ = try Self.decode(&buffer, with: &decoder)

        // The server's SETTINGS_HEADER_TABLE_SIZE drops to 0 and then rises to 100: the next
        // block starts with both updates (RFC 7541 §4.2), and nothing larger than 100 is indexed.
        encoder.setMaxTableSize(0)
        encoder.setMaxTableSize(100)
        decoder.maxDynamicTableLength = 100
        #expect(encoder.tableSize == 0)
        for n in 2..<6 {
            let r = Self.request(n: n)
            buffer.clear()
            encoder.writeRequest(r, authority: "a.example", authorization: authorization, into: &buffer)
            if n == 2 { #expect(buffer.getInteger(at: 0, as: UInt8.self) == 0x20, "a size update to 0 comes first") }
            #expect(
                try Self.decode(&buffer, with: &decoder)
                    == Self.expected(r, authority: "a.example", authorization: authorization)
            )
            #expect(encoder.tableSize <= 100)
        }

        // No dynamic table at all.
        encoder.setMaxTableSize(0)
        decoder.maxDynamicTableLength = 0
        for n in 6..<8 {
            let r = Self.request(n: n)
            buffer.clear()
            encoder.writeRequest(r, authority: "a.example", authorization: authorization, into: &buffer)
            #expect(
                try Self.decode(&buffer, with: &decoder)
                    == Self.expected(r, authority: "a.example", authorization: authorization)
            )
            #expect(encoder.tableSize == 0)
        }
    }

    @Test func anyHeaderListEncodesWithTheSameTable() throws {
        var encoder = HPACKRequestEncoder()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        var headers = HPACKHeaders()
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: "a.example")
        headers.add(name: ":path", value: "/3/device/00", indexing: .nonIndexable)
        headers.add(name: "apns-topic", value: "com.example.app")
        headers.add(name: "authorization", value: "bearer secret", indexing: .neverIndexed)
        headers.add(name: "x-custom", value: "1")
        for _ in 0..<3 {
            var buffer = ByteBuffer()
            encoder.writeHeaders(headers, into: &buffer)
            let decoded = try decoder.decodeHeaders(from: &buffer)
            #expect(decoded.map { "\($0.name): \($0.value)" } == headers.map { "\($0.name): \($0.value)" })
            #expect(decoded.first { $0.name == "authorization" }?.indexable == .neverIndexed)
        }
    }

    @Test func responsesUseTheStaticTableForStatusAndContentType() throws {
        var encoder = HPACKRequestEncoder()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        for status in ["200", "400", "410", "429"] {
            var headers = HPACKHeaders()
            headers.add(name: ":status", value: status)
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "apns-id", value: "01234567-89ab-4def-8000-000000000000", indexing: .nonIndexable)
            var buffer = ByteBuffer()
            encoder.writeHeaders(headers, into: &buffer)
            let first = buffer.getInteger(at: 0, as: UInt8.self)
            // 200 and 400 are static entries 8 and 12; 410 and 429 are literals naming entry 8.
            #expect(first == (status == "200" ? 0x88 : status == "400" ? 0x8C : 0x08), "\(status)")
            let decoded = try decoder.decodeHeaders(from: &buffer)
            #expect(decoded.map { "\($0.name): \($0.value)" } == headers.map { "\($0.name): \($0.value)" })
        }
    }
}
