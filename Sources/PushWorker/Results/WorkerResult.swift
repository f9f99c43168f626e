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
        /// A channel job carried out: the channel created (its new ID) or deleted (§7.2).
        case channel
    }

    public var kind: Kind
    public var resultId: String
    public var jobId: String?
    public var app: String?
    public var environment: String?
    public var token: String?
    /// A broadcast's channel ID (base64), in place of `token` (§7.3); a channel job's channel.
    public var channel: String? = nil
    /// A channel job's `channelAction` (`create`, `delete`) and a create's storage policy.
    public var action: String? = nil
    public var storagePolicy: String? = nil
    public var status: APNSStatus?
    public var reason: String?
    public var attempts: Int?
    public var possibleDuplicate: Bool?
    /// Sent in the other environment than its job's (`environmentFallback`): `env` names the
    /// one it was sent in. `nil` otherwise (not written).
    public var redirected: Bool? = nil
    /// Feedback: the UNIX time Apple gave.
    public var timestamp: Int64?
    /// Apple's permanent verdict on the token, when this result gave it or was decided by it.
    public var tokenVerdict: TokenVerdict? = nil
    /// invalidJob: where the message was.
    public var topic: String?
    public var partition: Int32?
    public var offset: Int64?
    /// HTTP/2: the `apns-id` the notification was sent with, and the `apns-unique-id` APNs
    /// answered with (development environment only).
    public var apnsId: String?
    public var apnsUniqueId: String?
    /// superseded (522): the job whose newer update of the same Live Activity replaced this one.
    public var supersededBy: String? = nil
    /// A Live Activity job with `"priority": "auto"`: the `apns-priority` sent (10 or 5).
    public var priority: Int? = nil
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

    /// The message for `apn.results`, with what the metrics count it as.
    func message(since: Int64? = nil) -> ResultMessage {
        ResultMessage(
            key: key,
            value: serialized(),
            metric: ResultMetric(
                kind: kind,
                possibleDuplicate: possibleDuplicate ?? false,
                environment: environment.flatMap(APNSEnvironment.init),
                status: status,
                app: app,
                since: since ?? 0
            )
        )
    }

    /// `value`, a result ``serialized()`` with `"possibleDuplicate":false`, saying `true`
    /// instead; `nil` when it does not say `false` (it says `true` already, or has no such member). Every member
    /// before that one is a number or an escaped string, so its first occurrence is the result's
    /// own, never one inside the job's `metadata`, which comes after it.
    static func markingPossibleDuplicate(_ value: [UInt8]) -> [UInt8]? {
        let member = Array(#","possibleDuplicate":"#.utf8)
        let no = Array("false".utf8)
        guard value.count >= member.count + no.count else { return nil }
        var at = 0
        while at + member.count <= value.count {
            if value[at] == member[0], value[at..<(at + member.count)].elementsEqual(member) {
                let flag = at + member.count
                guard value[flag...].starts(with: no) else { return nil }
                return Array(value[..<flag]) + Array("true".utf8) + Array(value[(flag + no.count)...])
            }
            at += 1
        }
        return nil
    }

    /// The Kafka key: the token (per-device ordering) or channel, or the job id for an invalid job.
    public var key: [UInt8]? {
        if let target = token ?? channel { return Array(target.abbreviated(toBytes: Self.maxEchoBytes).utf8) }
        if let jobId { return Array(jobId.abbreviated(toBytes: Self.maxEchoBytes).utf8) }
        return nil
    }

    /// The JSON value written to Kafka, keys in a fixed order. Written straight into bytes:
    /// one result is made per notification. Text from the job is cut to ``maxEchoBytes`` and the
    /// reason to ``maxReasonBytes``, so a result stays a few kilobytes whatever the job held (a
    /// result over the producer's `message.max.bytes` could never be written).
    public func serialized() -> [UInt8] {
        var out = MemberWriter(capacity: reservation)
        out.string(#"{"type":"#, kind.rawValue)
        out.string(#","resultId":"#, resultId)
        out.string(#","jobId":"#, jobId)
        out.string(#","app":"#, app)
        out.string(#","env":"#, environment)
        out.string(#","token":"#, token)
        out.string(#","channel":"#, channel)
        out.string(#","action":"#, action)
        out.string(#","storagePolicy":"#, storagePolicy)
        if let status {
            out.integer(#","status":"#, Int64(status.rawValue))
            out.string(#","statusName":"#, status.name)
        }
        out.string(#","reason":"#, reason, max: Self.maxReasonBytes)
        out.integer(#","attempts":"#, attempts.map(Int64.init))
        if let possibleDuplicate {
            out.raw(possibleDuplicate ? #","possibleDuplicate":true"# : #","possibleDuplicate":false"#)
        }
        if redirected == true { out.raw(#","redirected":true"#) }
        out.string(#","supersededBy":"#, supersededBy)
        out.integer(#","priority":"#, priority.map(Int64.init))
        if let tokenVerdict {
            out.string(#","tokenVerdict":{"reason":"#, tokenVerdict.reason)
            out.integer(#","since":"#, tokenVerdict.since)
            out.raw("}")
        }
        out.string(#","apnsId":"#, apnsId)
        out.string(#","apnsUniqueId":"#, apnsUniqueId)
        out.integer(#","payloadBytes":"#, payloadBytes.map(Int64.init))
        out.integer(#","timestamp":"#, timestamp)
        out.string(#","topic":"#, topic)
        out.integer(#","partition":"#, partition.map(Int64.init))
        out.integer(#","offset":"#, offset)
        if let metadata {
            // Compact JSON of an object, made by the job parser: written as it is.
            out.raw(#","metadata":"#)
            out.bytes.append(contentsOf: metadata)
        }
        out.string(#","worker":"#, worker)
        out.integer(#","at":"#, at)
        out.bytes.append(UInt8(ascii: "}"))
        return out.bytes
    }

    /// Writes members: each name with its punctuation (`,"name":`) in one append (the type
    /// always comes first, so every later member starts with a comma). A struct with mutating
    /// methods rather than local functions that capture the bytes: those paid for a dynamic
    /// exclusivity check on every member.
    private struct MemberWriter {
        var bytes: [UInt8] = []

        init(capacity: Int) { bytes.reserveCapacity(capacity) }

        mutating func raw(_ text: StaticString) {
            text.withUTF8Buffer { bytes.append(contentsOf: $0) }
        }

        mutating func string(_ prefix: StaticString, _ value: String?, max: Int = WorkerResult.maxEchoBytes) {
            guard let value else { return }
            raw(prefix)
            JSONValue.string(value.abbreviated(toBytes: max)).write(into: &bytes)
        }

        mutating func integer(_ prefix: StaticString, _ value: Int64?) {
            guard let value else { return }
            raw(prefix)
            DecimalText.append(value, to: &bytes)
        }
    }

    /// Room for what ``serialized()`` writes: each present member's name, punctuation and
    /// text, numbers at their widest. A result waits, its bytes allocated, until Redis and Kafka
    /// have it (tens of thousands at full load); a fixed 400 bytes for the names of every member
    /// made a typical result of 300 bytes take a 640-byte allocation.
    var reservation: Int {
        // Text is cut to its limit (plus the marker `abbreviated` adds) and quoted; escapes that
        // make it longer let the array grow, which only bad input does.
        func text(_ value: String?, _ member: Int, max: Int = Self.maxEchoBytes) -> Int {
            value.map { member + 2 + Swift.min($0.utf8.count, max + 24) } ?? 0
        }
        func number(_ present: Bool, _ member: Int) -> Int { present ? member + 20 : 0 }
        var size = text(kind.rawValue, 8) + text(resultId, 12) + text(jobId, 9) + text(app, 7) + text(environment, 7)
        size +=
            text(token, 9) + text(channel, 11) + text(action, 10) + text(storagePolicy, 17)
            + text(reason, 10, max: Self.maxReasonBytes) + text(apnsId, 10)
            + text(apnsUniqueId, 16) + text(supersededBy, 16) + number(priority != nil, 12)
        size += tokenVerdict.map { 35 + $0.reason.utf8.count + 20 } ?? 0
        size += text(topic, 9) + text(worker, 10) + (metadata.map { 12 + $0.count } ?? 0)
        if let status { size += 10 + 6 + text(status.name, 14) }
        size +=
            number(attempts != nil, 12) + (possibleDuplicate != nil ? 26 : 0) + (redirected != nil ? 18 : 0)
            + number(payloadBytes != nil, 16)
        size +=
            number(timestamp != nil, 13) + number(partition != nil, 13) + number(offset != nil, 10) + number(true, 6)
        return size + 1
    }

    // MARK: Result identifiers (docs/results.md "resultId")

    /// `n\n<jobId>\n<token>`: the same for every copy of a notification's result.
    public static func notificationId(jobId: String, token: String) -> String {
        digest(UInt8(ascii: "n"), jobId, token)
    }

    /// `c\n<jobId>`: a channel job's one result.
    public static func channelJobId(jobId: String) -> String {
        digest("c\n\(jobId)")
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
                        DeviceToken.lowercaseHex(
                            UnsafeBufferPointer(rebasing: digest.bindMemory(to: UInt8.self)[..<16])
                        )
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
