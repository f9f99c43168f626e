import APNSCore
import APNSHTTP2Core
import NIOCore
import NIOHPACK

@testable import APNSBinary
@testable import APNSHTTP2

/// What must hold for anything APNs (or whatever answers in its place) sends back: an HTTP/2
/// answer (status, headers, body) settled by the HTTP/2 pool, and binary error responses and
/// feedback tuples decoded and applied by the binary pool. Shared by the seeded tests and the
/// libFuzzer target `answer-fuzzer` (`scripts/fuzz`).
public enum AnswerInvariants {
    /// Feeds fuzzer bytes to both protocols: the first byte picks the status of an HTTP/2
    /// answer (from a list of APNs' and a few others) and its low bit whether a header block
    /// follows (`name\0value\0` pairs up to a `\n`); the rest is its body. The same bytes are
    /// then read as binary error responses and as feedback tuples.
    public static func violations(ofInput bytes: [UInt8]) -> [String] {
        violations(ofHTTP2Answer: bytes) + violations(ofBinaryAnswer: bytes)
    }

    static let statuses = [200, 400, 403, 404, 405, 410, 413, 429, 500, 503, 0, 999, -1, Int.max, Int.min, 301]

    /// An HTTP/2 answer from fuzzer bytes, settled by a pool with one request in flight.
    public static func violations(ofHTTP2Answer bytes: [UInt8]) -> [String] {
        let first = bytes.first ?? 0
        let status = statuses[Int(first >> 4)]
        var rest = bytes.dropFirst()
        var headers = HPACKHeaders([(":status", "\(status)")])
        if first & 1 == 1, let end = rest.firstIndex(of: UInt8(ascii: "\n")) {
            let fields = rest[..<end].split(separator: 0, omittingEmptySubsequences: false)
            // Names in ASCII, as HPACKHeaders requires of what it is given (its decoder, which
            // the client reads answers with, takes any bytes).
            for pair in stride(from: 0, to: fields.count - 1, by: 2) where fields[pair].allSatisfy({ $0 < 0x80 }) {
                headers.add(
                    name: String(decoding: fields[pair], as: UTF8.self).lowercased(),
                    value: String(decoding: fields[pair + 1], as: UTF8.self)
                )
            }
            rest = rest[(end + 1)...]
        }
        let body = Array(rest)
        var problems: [String] = []
        let response = APNSHTTP2Response(
            status: status,
            headers: headers.map { APNSHTTP2Header($0.name, $0.value) },
            body: body
        )
        if let timestamp = response.errorBody?.timestamp, timestamp.unixMilliseconds == nil {
            problems.append("a 410 timestamp out of range was kept: \(timestamp.timeIntervalSince1970)")
        }
        _ = response.outcome
        var configuration = HTTP2PoolStateMachine.Configuration()
        configuration.server = "gateway:443"
        configuration.jitter = { $0 }
        var machine = HTTP2PoolStateMachine(configuration: configuration)
        let request = QueuedRequest(
            tag: 1,
            token: try! DeviceToken(bytes: [UInt8](repeating: 1, count: 32)),
            path: "/3/device/01",
            body: Array(#"{"aps":{}}"#.utf8),
            pushType: .alert,
            topic: "com.example.app",
            priority: 10,
            expiration: 0,
            collapseID: nil,
            apnsID: "id-1",
            retryLimit: 1,
            staleAt: nil
        )
        guard case .connect(let id)? = machine.enqueue([request], rejected: []).first else {
            return problems + ["the pool opened no connection for a request"]
        }
        _ = machine.channelAttached(id: id)
        _ = machine.connectionReady(id: id, initialLimit: 10)
        let work = machine.takeWork(id: id, free: true).first?.work ?? HTTP2PoolStateMachine.Work()
        let written = work.requests.map { request in
            var request = request
            request.attempts += 1
            request.writes += 1
            return request
        }
        _ = machine.streamsFinished(
            id: id,
            results: written.map { StreamResult.answered($0, status: status, headers: headers, body: body) },
            free: true
        )
        for outcome in machine.events.compactMap(\.outcome) {
            if let at = outcome.unregisteredAt, !UnixTime.isPlausible(milliseconds: at) {
                problems.append("an outcome says the token was unregistered at \(at)")
            }
        }
        return problems
    }

    /// Fuzzer bytes as the binary gateway's error responses, applied to a pool with a
    /// connection that sent ten notifications, and as the feedback service's tuples.
    public static func violations(ofBinaryAnswer bytes: [UInt8]) -> [String] {
        var problems: [String] = []
        var configuration = BinaryPoolStateMachine.Configuration()
        configuration.confirmationWindow = .seconds(1)
        configuration.jitter = { $0 }
        var machine = BinaryPoolStateMachine(configuration: configuration)
        let notifications = (0..<10).map { tag in
            PendingNotification(
                tag: UInt64(tag),
                token: try! DeviceToken(bytes: [UInt8](repeating: UInt8(tag), count: 32)),
                payload: Array(#"{"aps":{"alert":"a"}}"#.utf8),
                expiry: 0,
                priority: 10,
                retryLimit: nil
            )
        }
        let now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        let connect = machine.enqueue(notifications).first { if case .connect = $0 { true } else { false } }
        guard case .connect(let id, _)? = connect else { return ["the pool opened no connection"] }
        _ = machine.connectionEstablished(id: id)
        let batch = machine.takeBatch(id: id).compactMap(\.frames).first ?? []
        if let last = batch.last { _ = machine.written(id: id, through: last.identifier, now: now) }
        var errors = ErrorResponseDecoder()
        var buffer = ByteBuffer(bytes: bytes)
        while let response = try? errors.decode(buffer: &buffer) {
            _ = machine.errorResponse(id: id, response, now: now)
        }
        let outcomes = machine.events.compactMap(\.outcome)
        if Set(outcomes.map(\.tag)).count != outcomes.count {
            problems.append("a notification has two outcomes after error responses")
        }
        var feedback = FeedbackTupleDecoder()
        buffer = ByteBuffer(bytes: bytes)
        while let tuple = try? feedback.decode(buffer: &buffer) {
            if tuple.token.bytes.isEmpty { problems.append("a feedback tuple has an empty token") }
        }
        return problems
    }
}
