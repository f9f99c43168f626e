import APNSCore
import Crypto

/// One message for `apn.results` (see `docs/results.md` and `docs/schemas/result.schema.json`).
public struct WorkerResult: Sendable, Hashable {
    public enum Kind: String, Sendable {
        case transmitted
        case transmissionError
        case feedback
        case invalidJob
        /// A notification of a dry run: everything but the write to Apple was done.
        case dryRun
    }

    public var kind: Kind
    public var resultId: String
    public var jobId: String?
    public var app: String?
    public var environment: String?
    public var token: String?
    public var status: APNSStatus?
    public var reason: String?
    public var attempts: Int?
    public var possibleDuplicate: Bool?
    /// Feedback: the UNIX time Apple gave.
    public var timestamp: Int64?
    /// invalidJob: where the message was.
    public var topic: String?
    public var partition: Int32?
    public var offset: Int64?
    /// HTTP/2: the `apns-id` the notification was sent with, and the `apns-unique-id` APNs
    /// answered with (development environment only).
    public var apnsId: String?
    public var apnsUniqueId: String?
    /// dryRun: the size of the payload that would have been sent.
    public var payloadBytes: Int?
    /// The job's `metadata` as compact JSON, written into the result as it is.
    public var metadata: [UInt8]?
    public var worker: String
    /// UNIX milliseconds when the result was made.
    public var at: Int64

    /// The most bytes of a job's own text (`jobId`, `app`, `env`, `token`) a result repeats; longer
    /// text is cut and marked (`String.abbreviated(toBytes:)`). A valid token is at most 200 hex
    /// digits and an id at most 256 bytes, so only bad input is ever cut.
    public static let maxEchoBytes = 256
    /// The most bytes of `reason` a result carries.
    public static let maxReasonBytes = 1024

    /// The Kafka key: the token (per-device ordering), or the job id for an invalid job.
    /// The message for `apn.results`, with what the metrics count it as.
    func message(since: Int64? = nil) -> ResultMessage {
        ResultMessage(
            key: key, value: serialized(),
            metric: ResultMetric(
                kind: kind, possibleDuplicate: possibleDuplicate ?? false, environment: environment.flatMap(APNSEnvironment.init),
                status: status, app: app, since: since ?? 0))
    }

    public var key: [UInt8]? {
        if let token { return Array(token.abbreviated(toBytes: Self.maxEchoBytes).utf8) }
        if let jobId { return Array(jobId.abbreviated(toBytes: Self.maxEchoBytes).utf8) }
        return nil
    }

    /// The JSON value written to Kafka, keys in a fixed order. Written straight into bytes:
    /// one result is made per notification. Text from the job is cut to ``maxEchoBytes`` and the
    /// reason to ``maxReasonBytes``, so a result stays a few kilobytes whatever the job held (a
    /// result over the producer's `message.max.bytes` could never be written).
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        // Room for the member names, numbers and punctuation (under 400 bytes with every member)
        // and the text: one allocation, where a fixed 320 bytes made most results grow once.
        func length(_ value: String?) -> Int { value?.utf8.count ?? 0 }
        let text =
            resultId.utf8.count + worker.utf8.count + (metadata?.count ?? 0) + length(jobId) + length(app) + length(environment)
            + length(token) + length(reason) + length(apnsId) + length(apnsUniqueId) + length(topic)
        out.reserveCapacity(400 + text)
        // Each member's name is written with its punctuation (`,"name":`) in one append: the
        // type always comes first, so every later member starts with a comma.
        func string(_ prefix: StaticString, _ value: String?, max: Int = Self.maxEchoBytes) {
            guard let value else { return }
            prefix.withUTF8Buffer { out.append(contentsOf: $0) }
            JSONValue.string(value.abbreviated(toBytes: max)).write(into: &out)
        }
        func integer(_ prefix: StaticString, _ value: Int64?) {
            guard let value else { return }
            prefix.withUTF8Buffer { out.append(contentsOf: $0) }
            DecimalText.append(value, to: &out)
        }
        string(#"{"type":"#, kind.rawValue)
        string(#","resultId":"#, resultId)
        string(#","jobId":"#, jobId)
        string(#","app":"#, app)
        string(#","env":"#, environment)
        string(#","token":"#, token)
        if let status {
            integer(#","status":"#, Int64(status.rawValue))
            string(#","statusName":"#, status.name)
        }
        string(#","reason":"#, reason, max: Self.maxReasonBytes)
        integer(#","attempts":"#, attempts.map(Int64.init))
        if let possibleDuplicate {
            let member: StaticString = possibleDuplicate ? #","possibleDuplicate":true"# : #","possibleDuplicate":false"#
            member.withUTF8Buffer { out.append(contentsOf: $0) }
        }
        string(#","apnsId":"#, apnsId)
        string(#","apnsUniqueId":"#, apnsUniqueId)
        integer(#","payloadBytes":"#, payloadBytes.map(Int64.init))
        integer(#","timestamp":"#, timestamp)
        string(#","topic":"#, topic)
        integer(#","partition":"#, partition.map(Int64.init))
        integer(#","offset":"#, offset)
        if let metadata {
            // Compact JSON of an object, made by the job parser: written as it is.
            let member: StaticString = #","metadata":"#
            member.withUTF8Buffer { out.append(contentsOf: $0) }
            out.append(contentsOf: metadata)
        }
        string(#","worker":"#, worker)
        integer(#","at":"#, at)
        out.append(UInt8(ascii: "}"))
        return out
    }

    // MARK: Result identifiers (docs/results.md "resultId")

    /// `n\n<jobId>\n<token>`: the same for every copy of a notification's result.
    public static func notificationId(jobId: String, token: String) -> String {
        digest(UInt8(ascii: "n"), jobId, token)
    }

    /// `d\n<jobId>\n<token>`: a dry run's notification, apart from a real one of the same job id.
    public static func dryRunId(jobId: String, token: String) -> String {
        digest(UInt8(ascii: "d"), jobId, token)
    }

    /// `f\n<app>\n<env>\n<token>\n<timestamp>`.
    public static func feedbackId(app: String, environment: String, token: String, timestamp: Int64) -> String {
        digest("f\n\(app)\n\(environment)\n\(token)\n\(timestamp)")
    }

    /// `i\n<topic>\n<partition>\n<offset>`.
    public static func invalidJobId(topic: String, partition: Int32, offset: Int64) -> String {
        digest("i\n\(topic)\n\(partition)\n\(offset)")
    }

    /// `s\n<jobId>`: a job's `jobSummary`; `ds\n<jobId>` for a dry run's, so that a dry run and
    /// the real job with the same id each get theirs.
    public static func summaryId(jobId: String, dryRun: Bool = false) -> String {
        digest(dryRun ? "ds\n\(jobId)" : "s\n\(jobId)")
    }

    /// The digest of `<tag>\n<first>\n<second>`, its bytes put together on the stack: one is made
    /// per notification, and the interpolated string was an allocation of its own.
    private static func digest(_ tag: UInt8, _ first: String, _ second: String) -> String {
        var first = first
        var second = second
        return first.withUTF8 { a in
            second.withUTF8 { b in
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 3 + a.count + b.count) { text in
                    text[0] = tag
                    text[1] = UInt8(ascii: "\n")
                    _ = UnsafeMutableBufferPointer(rebasing: text[2..<2 + a.count]).initialize(from: a)
                    text[2 + a.count] = UInt8(ascii: "\n")
                    _ = UnsafeMutableBufferPointer(rebasing: text[(3 + a.count)...]).initialize(from: b)
                    let hash = SHA256.hash(data: UnsafeRawBufferPointer(text))
                    return hash.withUnsafeBytes { digest in
                        DeviceToken.lowercaseHex(UnsafeBufferPointer(rebasing: digest.bindMemory(to: UInt8.self)[..<16]))
                    }
                }
            }
        }
    }

    private static func digest(_ text: String) -> String {
        var text = text
        let hash = text.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
        return hash.withUnsafeBytes { digest in
            DeviceToken.lowercaseHex(UnsafeBufferPointer(rebasing: digest.bindMemory(to: UInt8.self)[..<16]))
        }
    }
}
