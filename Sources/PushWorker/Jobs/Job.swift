import APNSCore
import APNSHTTP2Core
import Crypto
import Foundation

/// One job from `apn.requests`, validated (see `docs/jobs.md` and `docs/schemas/job.schema.json`).
///
/// Each (job, token) pair is one notification.
public struct Job: Sendable, Hashable {
    /// The idempotency key.
    public var id: String
    /// The configured app the job is for.
    public var app: String
    /// `production` or `sandbox`; `nil` means the app's default environment.
    public var environment: String?
    /// The job's tokens in order, without repeats. A token that is not valid hex keeps its
    /// text and the reason; it gets a `malformedToken` result and is not sent.
    public var tokens: [JobToken]
    /// What to send.
    public var notification: APNSNotification
    /// When the device last registered its token (UNIX seconds).
    public var registeredAt: Int64?
    /// How long after it was produced the job may still be sent when the gateway is
    /// unreachable; past that its notifications are reported `expired` (521) instead.
    /// `nil`: they wait for the gateway however long it takes.
    public var staleAfter: Duration?
    /// Set when the notification is valid JSON but cannot be sent (for example the payload does
    /// not fit even after trimming): every token gets this error instead of being sent.
    public var payloadError: String?
    /// The validated payload (after any trimming), built once for all tokens.
    public var payload: [UInt8] = []
    /// The job's `metadata` object as compact JSON (keys sorted), serialized once: every result
    /// of the job carries these bytes as they are.
    public var metadata: [UInt8]? = nil
    /// HTTP/2 apps: the `apns-id` the job asked for, as a canonical lower-case UUID. A job with
    /// one token sends it as it is; with several, each token gets ``JobAPNSID/derived(from:token:)``.
    public var apnsId: String? = nil
    /// HTTP/2 apps: the bundle ID to send to instead of the app's `bundleId`; one of the app's
    /// `topics` (checked against the configuration when the job is taken in).
    public var topic: String? = nil
    /// Everything but the write to Apple: results of type `dryRun` instead.
    public var dryRun = false
    /// Whether a `jobSummary` result is written once every token has its result.
    public var summary = false
    /// A Live Activity's ActivityKit notification (HTTP/2 apps), when the job has `liveActivity`.
    public var liveActivity: LiveActivity? = nil
    /// A broadcast (§7.3): ``tokens`` are channel IDs (each `.valid` carries the ID's bytes and
    /// its base64 text), from `channel` or `channels`.
    public var broadcast = false
    /// A channel job (`channelAction`): it creates or deletes a channel instead of sending (§7.2).
    /// ``tokens`` holds the channel to delete, or one empty entry for a create.
    public var channelAction: ChannelAction? = nil
}

/// Parses and validates job messages (`docs/jobs.md`).
public struct JobParser: Sendable {
    /// Largest accepted message, in bytes.
    public var maxMessageBytes = 1 << 20
    /// Most tokens in one job.
    public var maxTokens = 10_000
    /// The most bytes a job's `metadata` may take, serialized compactly.
    public static let maxMetadataBytes = 4096
    /// The payload limit the notification must fit, after trimming the alert body (§1.3).
    public var payloadLimit = APNSNotification.binaryPayloadLimit
    /// Apps delivered over HTTP/2: their payloads may be 4096 bytes (5120 for VoIP) and use
    /// priority 1 (§1.3, §3.3).
    public var http2Apps: Set<String> = []
    /// The expiry of a job without `expiry`, by app (`apps.<name>.defaultExpiry`); an app not
    /// listed keeps 0, do not store.
    public var defaultExpiry: [String: APNSExpiry] = [:]
    /// The `staleAfter` of a job without one, by app (`apps.<name>.staleAfter`).
    public var defaultStaleAfter: [String: Duration] = [:]

    public init() {}

    /// A job's top-level members, sorted out by name as the object is parsed: a name is matched
    /// as bytes against the fields of its length, with no `String` made of it (a dictionary of
    /// the members hashed every name, and a `switch` over `String` compared it with each field's
    /// name in turn).
    struct Fields {
        enum Name: Int, CaseIterable {
            case id, app, token, tokens, aps, alert, badge, sound, contentAvailable, mutableContent
            case category, threadId, urlArgs, mdm, payload, expiry, priority, truncateAtWordEnd, env
            case registeredAt, retryLimit, pushType, collapseId, staleAfter
            case metadata, apnsId, topic, dryRun, summary, liveActivity, channel, channels
            case channelAction, storagePolicy

            /// The JSON names, in the order of the cases, whose names they are. Spelled out: a
            /// case's name read by reflection costs microseconds, which the first job paid.
            static let spellings: [StaticString] = [
                "id", "app", "token", "tokens", "aps", "alert", "badge", "sound", "contentAvailable", "mutableContent",
                "category", "threadId", "urlArgs", "mdm", "payload", "expiry", "priority", "truncateAtWordEnd", "env",
                "registeredAt", "retryLimit", "pushType", "collapseId", "staleAfter",
                "metadata", "apnsId", "topic", "dryRun", "summary", "liveActivity", "channel", "channels",
                "channelAction", "storagePolicy",
            ]

            /// The names by their length in bytes.
            private static let byLength: [[(utf8: [UInt8], name: Name)]] = {
                var table: [[(utf8: [UInt8], name: Name)]] = []
                for name in allCases {
                    let utf8 = spellings[name.rawValue].withUTF8Buffer { Array($0) }
                    while table.count <= utf8.count { table.append([]) }
                    table[utf8.count].append((utf8, name))
                }
                return table
            }()

            init?(utf8: UnsafeBufferPointer<UInt8>) {
                guard utf8.count < Self.byLength.count else { return nil }
                for entry in Self.byLength[utf8.count] where entry.utf8.elementsEqual(utf8) {
                    self = entry.name
                    return
                }
                return nil
            }
        }

        /// By ``Name/rawValue``; inline, so that no job allocates a table of its members.
        private var values = InlineArray<34, JSONValue?>(repeating: nil)
        /// Member names that are not job fields.
        private(set) var unknown: [String] = []
        /// The unknown names as a set, once there are more than a few to compare.
        private var unknownSet: Set<String>? = nil

        subscript(_ name: Name) -> JSONValue? { values[name.rawValue] }

        /// How many fields the table has room for: one per ``Name``.
        var capacity: Int { values.count }

        /// Takes a member of the object; `false` when its name repeats an earlier one.
        mutating func add(_ utf8: UnsafeBufferPointer<UInt8>, _ value: JSONValue) -> Bool {
            if let name = Name(utf8: utf8) {
                guard values[name.rawValue] == nil else { return false }
                values[name.rawValue] = value
                return true
            }
            // Compared as `String`s, which is how repeated names of other objects are found.
            let text = String(decoding: utf8, as: UTF8.self)
            if unknownSet != nil {
                guard unknownSet!.insert(text).inserted else { return false }
            } else {
                guard !unknown.contains(text) else { return false }
                if unknown.count == 15 { unknownSet = Set(unknown + [text]) }
            }
            unknown.append(text)
            return true
        }
    }

    /// Parses one message; `producedAt` is its Kafka timestamp (UNIX ms), the default
    /// `timestamp` of a Live Activity (the parse time when `nil`).
    public func parse(_ bytes: [UInt8], producedAt: Int64? = nil) -> JobParseResult {
        guard bytes.count <= maxMessageBytes else {
            return .unreadable(
                jobId: nil,
                app: nil,
                reason: "the message is \(bytes.count) bytes, over the \(maxMessageBytes)-byte limit for a job",
                metadata: nil
            )
        }
        var fields = Fields()
        let isObject: Bool
        do {
            isObject = try JSONValue.parseObjectMembers(bytes) { fields.add($0, $1) }
        } catch {
            return .unreadable(
                jobId: nil,
                app: nil,
                reason: "the message is not valid JSON: \(error.message)",
                metadata: nil
            )
        }
        guard isObject else {
            return .unreadable(
                jobId: nil,
                app: nil,
                reason:
                    "the message is JSON but not an object; a job is a JSON object with id, app and token or tokens",
                metadata: nil
            )
        }
        let app = fields[.app]?.stringValue
        // Read first, so that every result of the job can carry it, the rejections included.
        var metadata: [UInt8]? = nil
        var metadataError: String? = nil
        if let value = fields[.metadata] {
            switch Self.metadata(value) {
            case .success(let bytes): metadata = bytes
            case .failure(let error): metadataError = error.message
            }
        }
        func unreadable(_ jobId: String?, _ reason: String) -> JobParseResult {
            .unreadable(jobId: jobId, app: app, reason: reason, metadata: metadata)
        }
        guard let idValue = fields[.id] else {
            return unreadable(nil, "the job has no \"id\"; every job needs a string id, its idempotency key")
        }
        guard let id = idValue.stringValue, !id.isEmpty, id.utf8.count <= 256 else {
            return unreadable(nil, "the job's \"id\" must be a string of 1 to 256 bytes")
        }
        if fields[.channelAction] != nil {
            return channelJob(fields, id: id, app: app, metadata: metadata, metadataError: metadataError)
        }
        let tokens: [JobToken]
        let broadcast: Bool
        switch targets(fields) {
        case .success(let parsed): (tokens, broadcast) = parsed
        case .failure(let error): return unreadable(id, error.message)
        }
        let parsedTokens = tokens
        func reject(_ reason: String) -> JobParseResult {
            // The tokens' text only when the job is rejected: each valid token's hex is a new string.
            .rejected(
                jobId: id,
                app: app,
                tokens: parsedTokens.map(\.text),
                reason: reason,
                metadata: metadata,
                broadcast: broadcast
            )
        }

        guard let app else {
            return reject(
                fields[.app] == nil
                    ? "the job has no \"app\"; name one of the configured apps"
                    : "\"app\" must be a string naming a configured app"
            )
        }
        if let unknown = fields.unknown.min() {
            return reject(
                "the job has an unknown field \"\(unknown.abbreviated())\"; see docs/jobs.md for the fields a job may have"
            )
        }
        if let metadataError { return reject(metadataError) }
        var job = Job(id: id, app: app, environment: nil, tokens: tokens, notification: APNSNotification())
        job.metadata = metadata
        job.broadcast = broadcast
        do throws(JobFieldError) {
            try fill(&job, from: fields, producedAt: producedAt)
        } catch {
            return reject(error.message)
        }
        if broadcast, let reason = Self.broadcastProblem(job) { return reject(reason) }
        // §7.3: a channel with No Message Stored takes only expiration 0, so a broadcast keeps
        // the update only when its job says so.
        if fields[.expiry] == nil, !broadcast, let expiry = defaultExpiry[app] { job.notification.expiry = expiry }
        if fields[.staleAfter] == nil, let staleAfter = defaultStaleAfter[app] { job.staleAfter = staleAfter }
        // §1.3: the payload must fit; trim the alert body if it does not.
        let http2 = http2Apps.contains(app)
        let limit =
            !http2
            ? payloadLimit
            : broadcast
                ? APNSPushType.broadcastPayloadLimit
                : job.notification.pushType == APNSPushType.voip.rawValue
                    ? APNSPushType.voipPayloadLimit : APNSPushType.regularPayloadLimit
        do {
            job.payload = try job.notification.validatedPayload(limit: limit, allowLowPriority: http2)
        } catch let error where error.code == .tooLarge {
            do {
                try job.notification.trim(toFit: limit)
                job.payload = try job.notification.validatedPayload(limit: limit, allowLowPriority: http2)
            } catch {
                job.payloadError = error.message
            }
        } catch {
            job.payloadError = error.message
        }
        return .job(job)
    }

    /// Whether `text`, which parsed as `token`, is its lowercase hex with nothing else.
    static func isLowercaseHex(_ text: String, of token: DeviceToken) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            guard bytes.count == token.bytes.count * 2 else { return false }
            for byte in bytes where !(byte &- UInt8(ascii: "0") < 10 || byte &- UInt8(ascii: "a") < 6) { return false }
            return true
        }
    }
}

struct JobFieldError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}
