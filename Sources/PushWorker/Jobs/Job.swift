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

    // MARK: Fields

    private func fill(_ job: inout Job, from fields: Fields, producedAt: Int64?) throws(JobFieldError) {
        var n = APNSNotification()
        if let aps = fields[.aps] {
            guard let dict = aps.objectValue else { throw JobFieldError("\"aps\" must be an object") }
            try applyAPS(dict, to: &n)
        }
        if let v = fields[.alert] { n.alert = try alert(v, "alert") }
        if let v = fields[.badge] { n.badge = try nonNegativeInt(v, "badge") }
        if let v = fields[.sound] { n.sound = try sound(v, "sound") }
        if let v = fields[.contentAvailable] { n.contentAvailable = try bool(v, "contentAvailable") }
        if let v = fields[.mutableContent] { n.mutableContent = try bool(v, "mutableContent") }
        if let v = fields[.category] { n.category = try string(v, "category") }
        if let v = fields[.threadId] { n.threadId = try string(v, "threadId") }
        if let v = fields[.urlArgs] { n.urlArgs = try strings(v, "urlArgs") }
        if let v = fields[.mdm] { n.mdm = try string(v, "mdm") }
        if let v = fields[.pushType] {
            let text = try string(v, "pushType")
            guard APNSPushType(rawValue: text) != nil else {
                throw JobFieldError(
                    "\"pushType\" must be one of \(APNSPushType.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(text.abbreviated())\""
                )
            }
            n.pushType = text
        }
        if let v = fields[.collapseId] {
            let text = try string(v, "collapseId")
            do {
                try APNSHTTP2Request.validate(collapseID: text)
            } catch {
                throw JobFieldError("\"collapseId\": \(error.message)")
            }
            n.collapseId = text
        }
        if let v = fields[.payload] {
            guard let custom = v.objectValue else {
                throw JobFieldError("\"payload\" must be an object of custom keys")
            }
            guard custom["aps"] == nil else {
                throw JobFieldError(
                    "\"payload\" may not contain \"aps\"; put aps fields in \"aps\" or the convenience fields"
                )
            }
            n.custom = custom
        }
        if let v = fields[.expiry] {
            switch v {
            case .int(let seconds):
                try Self.checkAbsoluteExpiry(seconds, written: "\(seconds)")
                n.expiry = seconds == 0 ? .immediately : .at(unixSeconds: UInt32(seconds))
            case .string(let text):
                let digits = text.trimmingCharacters(in: .whitespaces)
                if !digits.isEmpty, digits.utf8.allSatisfy({ $0 &- UInt8(ascii: "0") < 10 }) {
                    try Self.checkAbsoluteExpiry(Int64(digits) ?? .max, written: "\"\(digits.abbreviated())\"")
                }
                do { n.expiry = try APNSExpiry(parsing: text) } catch { throw JobFieldError(error.message) }
            default:
                throw JobFieldError("\"expiry\" must be a UNIX time in seconds or a string such as \"30m\" or \"1d\"")
            }
        }
        var autoPriority = false
        if let v = fields[.priority] {
            if v.stringValue == "auto" {
                // Decided per Live Activity update when it is sent (`docs/jobs.md`, "Priority budget").
                autoPriority = true
                n.priority = .immediate
            } else {
                guard let raw = v.intValue, let priority = APNSPriority(rawValue: Int(raw)) else {
                    throw JobFieldError(
                        "\"priority\" must be 10 (immediate), 5 (power-considerate), 1 (low, HTTP/2 apps only) or \"auto\" (Live Activity jobs)"
                    )
                }
                n.priority = priority
            }
        }
        if let v = fields[.truncateAtWordEnd] { n.truncateAtWordEnd = try bool(v, "truncateAtWordEnd") }
        if let v = fields[.retryLimit] { n.retryLimit = try nonNegativeInt(v, "retryLimit") }
        if let v = fields[.env] {
            guard let env = v.stringValue, env == "production" || env == "sandbox" else {
                throw JobFieldError("\"env\" must be \"production\" or \"sandbox\"")
            }
            job.environment = env
        }
        if let v = fields[.registeredAt] {
            guard let seconds = v.intValue, seconds >= 0 else {
                throw JobFieldError("\"registeredAt\" must be a UNIX time in seconds")
            }
            job.registeredAt = seconds
        }
        if let v = fields[.apnsId] {
            guard let text = v.stringValue, let id = JobAPNSID.canonical(text) else {
                throw JobFieldError(
                    "\"apnsId\" must be a UUID string such as \"123e4567-e89b-12d3-a456-426614174000\" (8-4-4-4-12 hex digits)"
                )
            }
            job.apnsId = id
        }
        if let v = fields[.topic] {
            let text = try string(v, "topic")
            do {
                try APNSHTTP2Request.validate(topic: text)
            } catch {
                throw JobFieldError("\"topic\": \(error.message)")
            }
            job.topic = text
            n.topic = text
        }
        if let v = fields[.dryRun] { job.dryRun = try bool(v, "dryRun") }
        if let v = fields[.staleAfter] {
            let sentence =
                "\"staleAfter\" must be a positive number of seconds or a string such as \"90s\", \"10m\" or \"1h\", "
                + "at most a year"
            switch v {
            case .int(let seconds):
                guard seconds > 0, seconds <= 31_536_000 else { throw JobFieldError(sentence) }
                job.staleAfter = .seconds(seconds)
            case .string(let text):
                guard case .after(let duration)? = try? APNSExpiry(parsing: text), duration > .zero,
                    duration <= .seconds(31_536_000)
                else {
                    throw JobFieldError(sentence)
                }
                job.staleAfter = duration
            default:
                throw JobFieldError(sentence)
            }
        }
        if let v = fields[.summary] { job.summary = try bool(v, "summary") }
        if let v = fields[.liveActivity] {
            let seconds = producedAt.map { $0 / 1000 } ?? Int64(Date().timeIntervalSince1970)
            job.liveActivity = try applyLiveActivity(v, app: job.app, producedAt: seconds, fields: fields, to: &n)
            job.liveActivity?.autoPriority = autoPriority
        } else if autoPriority {
            throw JobFieldError(
                "\"priority\": \"auto\" is for Live Activity jobs (with \"liveActivity\"); give 10, 5 or 1 for other jobs"
            )
        }
        swap(&job.notification, &n)
    }

    /// Interprets a raw `aps` dictionary (§5); keys the model does not name pass through.
    private func applyAPS(_ aps: [String: JSONValue], to n: inout APNSNotification) throws(JobFieldError) {
        for (key, value) in aps {
            switch key {
            case "alert": n.alert = try alert(value, "aps.alert")
            case "badge": n.badge = try nonNegativeInt(value, "aps.badge")
            case "sound": n.sound = try sound(value, "aps.sound")
            case "content-available": n.contentAvailable = try flag(value, "aps.content-available")
            case "mutable-content": n.mutableContent = try flag(value, "aps.mutable-content")
            case "category": n.category = try string(value, "aps.category")
            case "thread-id": n.threadId = try string(value, "aps.thread-id")
            case "target-content-id": n.targetContentId = try string(value, "aps.target-content-id")
            case "interruption-level": n.interruptionLevel = try string(value, "aps.interruption-level")
            case "relevance-score":
                guard let score = value.doubleValue else {
                    throw JobFieldError("\"aps.relevance-score\" must be a number")
                }
                n.relevanceScore = score
            case "url-args": n.urlArgs = try strings(value, "aps.url-args")
            default: n.additionalAPSFields[key] = value
            }
        }
    }

    private func alert(_ value: JSONValue, _ name: String) throws(JobFieldError) -> APNSAlert {
        if let text = value.stringValue { return .text(text) }
        guard let dict = value.objectValue else {
            throw JobFieldError("\"\(name)\" must be a string or an object with title, body, ...")
        }
        var fields = APNSAlertFields()
        for (key, item) in dict {
            let path = "\(name).\(key.abbreviated())"
            switch key {
            case "title": fields.title = try string(item, path)
            case "subtitle": fields.subtitle = try string(item, path)
            case "body": fields.body = try string(item, path)
            case "launch-image": fields.launchImage = try string(item, path)
            case "loc-key": fields.locKey = try string(item, path)
            case "loc-args": fields.locArgs = try strings(item, path)
            case "title-loc-key": fields.titleLocKey = try string(item, path)
            case "title-loc-args": fields.titleLocArgs = try strings(item, path)
            case "subtitle-loc-key": fields.subtitleLocKey = try string(item, path)
            case "subtitle-loc-args": fields.subtitleLocArgs = try strings(item, path)
            case "action-loc-key": fields.actionLocKey = try string(item, path)
            case "action": fields.action = try string(item, path)
            default:
                throw JobFieldError(
                    "\"\(path)\" is not an alert field; use title, subtitle, body, launch-image, loc-key, loc-args, title-loc-key, title-loc-args, subtitle-loc-key, subtitle-loc-args, action-loc-key or action"
                )
            }
        }
        return .fields(fields)
    }

    /// A sound name, or `{"name", "critical", "volume"}`: critical only with `critical` 1 or
    /// `true` (§5); any other key is an error.
    private func sound(_ value: JSONValue, _ name: String) throws(JobFieldError) -> APNSSound {
        if let text = value.stringValue { return .named(text) }
        guard let dict = value.objectValue, let soundName = dict["name"]?.stringValue else {
            throw JobFieldError("\"\(name)\" must be a sound name or an object with name, critical and volume")
        }
        var critical = false
        var volume: Double? = nil
        for (key, item) in dict {
            switch key {
            case "name": break
            case "critical":
                if let flag = item.boolValue {
                    critical = flag
                } else if let number = item.intValue, number == 0 || number == 1 {
                    critical = number == 1
                } else {
                    throw JobFieldError("\"\(name).critical\" must be 1 or true (a critical alert), or 0 or false")
                }
            case "volume":
                guard let level = item.doubleValue, (0...1).contains(level) else {
                    throw JobFieldError("\"\(name).volume\" must be a number from 0 to 1")
                }
                volume = level
            default:
                throw JobFieldError(
                    "\"\(name).\(key.abbreviated())\" is not a sound field; a sound object has name, critical and volume"
                )
            }
        }
        if critical { return .critical(name: soundName, volume: volume ?? 1) }
        guard volume == nil else {
            throw JobFieldError(
                "\"\(name).volume\" applies to critical alerts only; add \"critical\": 1, or leave volume out for a regular sound"
            )
        }
        return .named(soundName)
    }

    /// A numeric `expiry` is an absolute UNIX time in seconds. Numbers that can only be a
    /// mistake are refused with the form to use: below 10^9 (before September 2001: most likely
    /// a relative time, in seconds or milliseconds as apnagent counts it) or UNIX milliseconds.
    static func checkAbsoluteExpiry(_ seconds: Int64, written: String) throws(JobFieldError) {
        let forms =
            "give an absolute UNIX time in seconds (such as 1732233600), or a time relative to sending as a string such as \"30m\", \"6h\" or \"1d\""
        if seconds < 0 || seconds > Int64(UInt32.max) {
            if seconds >= 1_000_000_000_000 && seconds < 10_000_000_000_000 {
                throw JobFieldError(
                    "\"expiry\" \(written) looks like UNIX milliseconds; expiry counts seconds: \(forms)"
                )
            }
            throw JobFieldError("\"expiry\" must be from 0 to \(UInt32.max), not \(written); \(forms)")
        }
        if seconds != 0 && seconds < 1_000_000_000 {
            throw JobFieldError(
                "\"expiry\" \(written) is not a plausible UNIX time (it is before September 2001); a number means an absolute UNIX time in seconds: \(forms), or 0 to not store it"
            )
        }
    }

    /// The job's `metadata`: a JSON object of at most ``maxMetadataBytes`` serialized compactly.
    static func metadata(_ value: JSONValue) -> Result<[UInt8], JobFieldError> {
        guard case .object = value else {
            return .failure(
                JobFieldError("\"metadata\" must be a JSON object; it is copied into every result of the job")
            )
        }
        let bytes = value.serialized()
        guard bytes.count <= maxMetadataBytes else {
            return .failure(
                JobFieldError(
                    "\"metadata\" is \(bytes.count) bytes as compact JSON, over the limit of \(maxMetadataBytes); keep only what a consumer needs to route the results"
                )
            )
        }
        return .success(bytes)
    }

    func string(_ value: JSONValue, _ name: String) throws(JobFieldError) -> String {
        guard let text = value.stringValue else { throw JobFieldError("\"\(name)\" must be a string") }
        return text
    }

    private func strings(_ value: JSONValue, _ name: String) throws(JobFieldError) -> [String] {
        guard let items = value.arrayValue else { throw JobFieldError("\"\(name)\" must be an array of strings") }
        var out: [String] = []
        for item in items {
            guard let text = item.stringValue else { throw JobFieldError("\"\(name)\" must be an array of strings") }
            out.append(text)
        }
        return out
    }

    private func bool(_ value: JSONValue, _ name: String) throws(JobFieldError) -> Bool {
        guard let flag = value.boolValue else { throw JobFieldError("\"\(name)\" must be true or false") }
        return flag
    }

    /// `1`/`0` or `true`/`false`, as `aps` flags are written.
    private func flag(_ value: JSONValue, _ name: String) throws(JobFieldError) -> Bool {
        if let flag = value.boolValue { return flag }
        if let number = value.intValue, number == 0 || number == 1 { return number == 1 }
        throw JobFieldError("\"\(name)\" must be 1 or 0")
    }

    private func nonNegativeInt(_ value: JSONValue, _ name: String) throws(JobFieldError) -> Int {
        guard let number = value.intValue, number >= 0, number <= Int64(Int32.max) else {
            throw JobFieldError("\"\(name)\" must be a whole number of 0 or more")
        }
        return Int(number)
    }
}

struct JobFieldError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}
