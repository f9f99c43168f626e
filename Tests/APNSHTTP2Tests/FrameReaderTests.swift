import APNSCore
import NIOCore
import NIOHPACK
import NIOHTTP2
import Testing

@testable import APNSHTTP2
@testable import APNSSimulator

/// The frame reader and the frame header layout both codecs share, on their own: frames are
/// cut from the bytes however they arrive, and the named types are RFC 9113's numbers.
@Suite struct FrameReaderTests {
    typealias Frame = FrameCodecTests.Frame

    static func reader(server: Bool = false) -> HTTP2FrameReader {
        HTTP2FrameReader(peer: "server", expectsPreface: server, maxDynamicTableSize: 4096, maxHeaderListSize: 16 << 10)
    }

    static func frames(_ reader: inout HTTP2FrameReader) throws -> [HTTP2InboundFrame] {
        var out: [HTTP2InboundFrame] = []
        while let frame = try reader.nextFrame() { out.append(frame) }
        return out
    }

    /// One frame of each kind, with what the reader must skip or undo in between: a header
    /// block over CONTINUATION, padding, PRIORITY, an unknown type and reserved bits.
    static func sample() throws -> (ByteBuffer, [HTTP2InboundFrame]) {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        var block = ByteBuffer()
        try encoder.encode(headers: [":status": "200", "apns-id": "01234567-89ab-4def-8000-000000000000"], to: &block)
        let bytes = block.readBytes(length: block.readableBytes)!
        let half = bytes.count / 2
        let bytesOut = FrameCodecTests.bytes([
            Frame(type: 0x1, flags: 0x0, streamID: 1, payload: Array(bytes[..<half])),
            Frame(type: 0x9, flags: 0x4, streamID: 1, payload: Array(bytes[half...])),
            Frame(type: 0x0, flags: 0x9, streamID: 1, payload: [2] + Array("abc".utf8) + [0, 0]),
            Frame(type: 0x2, flags: 0x0, streamID: 3, payload: [0, 0, 0, 1, 16]),
            Frame(type: 0xFA, flags: 0xFF, streamID: 0, payload: [1, 2, 3]),
            FrameCodecTests.settings([(3, 7)]),
            Frame(type: 0x6, flags: 0x0, streamID: 0, payload: [1, 2, 3, 4, 5, 6, 7, 8]),
            Frame(type: 0x8, flags: 0x0, streamID: 0, payload: [0x80, 0, 0, 10]),
            Frame(type: 0x7, flags: 0x0, streamID: 0, payload: [0, 0, 0, 1, 0, 0, 0, 0] + Array("bye".utf8)),
            Frame(type: 0x3, flags: 0x0, streamID: Int32(bitPattern: 0x8000_0001), payload: [0, 0, 0, 8]),
        ])
        let expected: [HTTP2InboundFrame] = [
            .headers(
                streamID: 1,
                headers: [":status": "200", "apns-id": "01234567-89ab-4def-8000-000000000000"],
                endStream: false
            ),
            .data(streamID: 1, body: ByteBuffer(string: "abc"), flowControlled: 6, endStream: true),
            .settings(ByteBuffer(bytes: [0, 3, 0, 0, 0, 7])),
            .ping(0x0102_0304_0506_0708, ack: false),
            .windowUpdate(streamID: 0, increment: 10),
            .goAway(lastStreamID: 1, code: .noError, opaqueData: ByteBuffer(string: "bye")),
            .rstStream(streamID: 1, code: .cancel),
        ]
        return (bytesOut, expected)
    }

    @Test func framesArriveTheSameWhetherTheBytesComeWholeOrOneByOne() throws {
        let (bytes, expected) = try Self.sample()
        var whole = Self.reader()
        whole.append(bytes)
        #expect(try Self.frames(&whole) == expected)
        var split = Self.reader()
        var frames: [HTTP2InboundFrame] = []
        for offset in 0..<bytes.readableBytes {
            split.append(bytes.getSlice(at: bytes.readerIndex + offset, length: 1)!)
            frames += try Self.frames(&split)
        }
        #expect(frames == expected)
    }

    @Test func aServerReadsTheClientPrefaceBeforeAnyFrame() throws {
        var reader = Self.reader(server: true)
        var bytes = ByteBuffer(string: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        bytes.writeImmutableBuffer(FrameCodecTests.bytes([FrameCodecTests.settings([])]))
        reader.append(bytes.getSlice(at: 0, length: 20)!)
        #expect(try Self.frames(&reader).isEmpty, "a preface still arriving")
        reader.append(bytes.getSlice(at: 20, length: bytes.readableBytes - 20)!)
        #expect(try Self.frames(&reader) == [.settings(ByteBuffer())])

        var other = Self.reader(server: true)
        other.append(ByteBuffer(string: "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"))
        #expect(throws: HTTP2ProtocolError.self) { try Self.frames(&other) }
    }

    @Test func afterStoppingNothingMoreIsRead() throws {
        var reader = Self.reader()
        reader.append(FrameCodecTests.bytes([Frame(type: 0x6, flags: 0x0, streamID: 0, payload: [1])]))
        let error = #expect(throws: HTTP2ProtocolError.self) { try Self.frames(&reader) }
        #expect(error?.code == .protocolError)
        reader.stop()
        reader.append(FrameCodecTests.bytes([FrameCodecTests.settings([])]))
        #expect(try Self.frames(&reader).isEmpty)
    }

    @Test func frameHeadersAreLaidOutAsRFC9113Says() {
        var buffer = ByteBuffer()
        buffer.writeHTTP2FrameHeader(
            length: 0x01_2345,
            type: .headers,
            flags: [.endHeaders, .endStream, .priority],
            streamID: -1
        )
        // Length (24), type, flags, then the stream identifier with its reserved bit unset.
        #expect(Array(buffer.readableBytesView) == [0x01, 0x23, 0x45, 0x01, 0x25, 0x7F, 0xFF, 0xFF, 0xFF])
        let types: [HTTP2FrameType] = [
            .data, .headers, .priority, .rstStream, .settings, .pushPromise, .ping, .goAway, .windowUpdate,
            .continuation,
        ]
        #expect(types.map(\.rawValue) == Array(UInt8(0)...9))
        #expect(HTTP2FrameFlags.ack == .endStream && HTTP2FrameFlags.padded.rawValue == 0x8)
        #expect(
            HTTP2SettingCode.code(of: .maxConcurrentStreams) == 3 && HTTP2SettingCode.maxConcurrentStreams.rawValue == 3
        )
        #expect(
            HTTP2SettingCode.code(of: .maxHeaderListSize) == 6 && HTTP2SettingCode.code(of: .enableConnectProtocol) == 8
        )
        #expect(HTTP2SettingCode(rawValue: 7) == nil, "an unknown setting, ignored")
    }

    @Test func aConnectionArrivingBeforeTheSimulatorExistsIsTurnedAway() throws {
        let box = SimulatorBox<Int>()
        let error = #expect(throws: APNSError.self) { try box.started() }
        #expect(error?.code == .shutDown)
        box.simulator = 7
        #expect(try box.started() == 7)
    }
}
