import APNSCore
import APNSHTTP2Core

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
    /// Whether a `jobSummary` result is written once every token has its result.
    public var summary = false
}

/// A token of a job: parsed, or kept as text with the reason it is malformed.
public enum JobToken: Sendable, Hashable {
    case valid(DeviceToken)
    case malformed(text: String, reason: String)

    /// The token as it appears in results: lowercase hex, or the text as given.
    public var text: String {
        switch self {
        case .valid(let token): token.hex
        case .malformed(let text, _): text
        }
    }
}

/// What parsing one Kafka message gives.
public enum JobParseResult: Sendable, Hashable {
    /// A valid job (some tokens may still be malformed).
    case job(Job)
    /// Readable id and tokens but an invalid job: every token gets an `invalidJob` error result.
    case rejected(jobId: String, app: String?, tokens: [String], reason: String)
    /// Not even the id and tokens could be read: one `invalidJob` result for the message.
    case unreadable(jobId: String?, app: String?, reason: String)
}

/// Parses and validates job messages (`docs/jobs.md`).
public struct JobParser: Sendable {
    /// Largest accepted message, in bytes.
    public var maxMessageBytes = 1 << 20
    /// Most tokens in one job.
    public var maxTokens = 10_000
    /// The payload limit the notification must fit, after trimming the alert body (§1.3).
    public var payloadLimit = APNSNotification.binaryPayloadLimit
    /// Apps delivered over HTTP/2: their payloads may be 4096 bytes (5120 for VoIP) and use
    /// priority 1 (§1.3, §3.3).
    public var http2Apps: Set<String> = []

    public init() {}

    /// A job's top-level members, sorted out in one pass over the object (a dictionary lookup
    /// per known key would hash every key name for every job).
    struct Fields {
        var id, app, token, tokens, aps, alert, badge, sound, contentAvailable, mutableContent: JSONValue?
        var category, threadId, urlArgs, mdm, payload, expiry, priority, truncateAtWordEnd, env: JSONValue?
        var registeredAt, retryLimit, pushType, collapseId, staleAfter: JSONValue?
        var summary: JSONValue?
        /// Member names that are not job fields.
        var unknown: [String] = []

        init(_ members: [String: JSONValue]) {
            for (key, value) in members {
                switch key {
                case "id": id = value
                case "app": app = value
                case "token": token = value
                case "tokens": tokens = value
                case "aps": aps = value
                case "alert": alert = value
                case "badge": badge = value
                case "sound": sound = value
                case "contentAvailable": contentAvailable = value
                case "mutableContent": mutableContent = value
                case "category": category = value
                case "threadId": threadId = value
                case "urlArgs": urlArgs = value
                case "mdm": mdm = value
                case "payload": payload = value
                case "expiry": expiry = value
                case "priority": priority = value
                case "truncateAtWordEnd": truncateAtWordEnd = value
                case "env": env = value
                case "registeredAt": registeredAt = value
                case "retryLimit": retryLimit = value
                case "pushType": pushType = value
                case "collapseId": collapseId = value
                case "staleAfter": staleAfter = value
                case "summary": summary = value
                default: unknown.append(key)
                }
            }
        }
    }

    public func parse(_ bytes: [UInt8]) -> JobParseResult {
        guard bytes.count <= maxMessageBytes else {
            return .unreadable(
                jobId: nil, app: nil,
                reason: "the message is \(bytes.count) bytes, over the \(maxMessageBytes)-byte limit for a job")
        }
        let document: JSONValue
        do {
            document = try JSONValue.parse(bytes)
        } catch {
            return .unreadable(jobId: nil, app: nil, reason: "the message is not valid JSON: \(error.message)")
        }
        guard case .object(let members) = document else {
            return .unreadable(
                jobId: nil, app: nil,
                reason: "the message is JSON but not an object; a job is a JSON object with id, app and token or tokens")
        }
        let fields = Fields(members)
        let app = fields.app?.stringValue
        guard let idValue = fields.id else {
            return .unreadable(jobId: nil, app: app, reason: "the job has no \"id\"; every job needs a string id, its idempotency key")
        }
        guard let id = idValue.stringValue, !id.isEmpty, id.utf8.count <= 256 else {
            return .unreadable(jobId: nil, app: app, reason: "the job's \"id\" must be a string of 1 to 256 bytes")
        }
        let rawTokens: [String]
        switch (fields.token, fields.tokens) {
        case (nil, nil):
            return .unreadable(jobId: id, app: app, reason: "the job has neither \"token\" nor \"tokens\"")
        case (.some, .some):
            return .unreadable(jobId: id, app: app, reason: "the job has both \"token\" and \"tokens\"; give one of them")
        case (.some(let single), nil):
            guard let text = single.stringValue else {
                return .unreadable(jobId: id, app: app, reason: "\"token\" must be a hex string")
            }
            rawTokens = [text]
        case (nil, .some(let many)):
            guard let items = many.arrayValue, !items.isEmpty else {
                return .unreadable(jobId: id, app: app, reason: "\"tokens\" must be a non-empty array of hex strings")
            }
            guard items.count <= maxTokens else {
                return .unreadable(
                    jobId: id, app: app,
                    reason: "\"tokens\" has \(items.count) entries, over the limit of \(maxTokens) per job; split the job")
            }
            var texts: [String] = []
            texts.reserveCapacity(items.count)
            for (index, item) in items.enumerated() {
                guard let text = item.stringValue else {
                    return .unreadable(jobId: id, app: app, reason: "tokens[\(index)] is not a string; tokens are hex strings")
                }
                texts.append(text)
            }
            rawTokens = texts
        }

        // Tokens in order, once each (by their normalized form).
        var seen = Set<String>()
        var tokens: [JobToken] = []
        tokens.reserveCapacity(rawTokens.count)
        for text in rawTokens {
            let entry: JobToken
            do {
                entry = .valid(try DeviceToken(hex: text))
            } catch {
                entry = .malformed(text: text, reason: error.message)
            }
            if rawTokens.count == 1 || seen.insert(entry.text).inserted { tokens.append(entry) }
        }
        let tokenTexts = tokens.map(\.text)
        func reject(_ reason: String) -> JobParseResult {
            .rejected(jobId: id, app: app, tokens: tokenTexts, reason: reason)
        }

        guard let app else {
            return reject(
                fields.app == nil
                    ? "the job has no \"app\"; name one of the configured apps"
                    : "\"app\" must be a string naming a configured app")
        }
        if let unknown = fields.unknown.min() {
            return reject("the job has an unknown field \"\(unknown.abbreviated())\"; see docs/jobs.md for the fields a job may have")
        }
        var job = Job(id: id, app: app, environment: nil, tokens: tokens, notification: APNSNotification())
        do throws(JobFieldError) {
            try fill(&job, from: fields)
        } catch {
            return reject(error.message)
        }
        // §1.3: the payload must fit; trim the alert body if it does not.
        let http2 = http2Apps.contains(app)
        let limit =
            !http2
            ? payloadLimit
            : job.notification.pushType == APNSPushType.voip.rawValue ? APNSPushType.voipPayloadLimit : APNSPushType.regularPayloadLimit
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

    // MARK: Fields

    private func fill(_ job: inout Job, from fields: Fields) throws(JobFieldError) {
        var n = APNSNotification()
        if let aps = fields.aps {
            guard let dict = aps.objectValue else { throw JobFieldError("\"aps\" must be an object") }
            try applyAPS(dict, to: &n)
        }
        if let v = fields.alert { n.alert = try alert(v, "alert") }
        if let v = fields.badge { n.badge = try nonNegativeInt(v, "badge") }
        if let v = fields.sound { n.sound = try sound(v, "sound") }
        if let v = fields.contentAvailable { n.contentAvailable = try bool(v, "contentAvailable") }
        if let v = fields.mutableContent { n.mutableContent = try bool(v, "mutableContent") }
        if let v = fields.category { n.category = try string(v, "category") }
        if let v = fields.threadId { n.threadId = try string(v, "threadId") }
        if let v = fields.urlArgs { n.urlArgs = try strings(v, "urlArgs") }
        if let v = fields.mdm { n.mdm = try string(v, "mdm") }
        if let v = fields.pushType {
            let text = try string(v, "pushType")
            guard APNSPushType(rawValue: text) != nil else {
                throw JobFieldError(
                    "\"pushType\" must be one of \(APNSPushType.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(text.abbreviated())\""
                )
            }
            n.pushType = text
        }
        if let v = fields.collapseId {
            let text = try string(v, "collapseId")
            do {
                try APNSHTTP2Request.validate(collapseID: text)
            } catch {
                throw JobFieldError("\"collapseId\": \(error.message)")
            }
            n.collapseId = text
        }
        if let v = fields.payload {
            guard let custom = v.objectValue else { throw JobFieldError("\"payload\" must be an object of custom keys") }
            guard custom["aps"] == nil else {
                throw JobFieldError("\"payload\" may not contain \"aps\"; put aps fields in \"aps\" or the convenience fields")
            }
            n.custom = custom
        }
        if let v = fields.expiry {
            switch v {
            case .int(let seconds):
                guard seconds >= 0, seconds <= Int64(UInt32.max) else {
                    throw JobFieldError("\"expiry\" must be a UNIX time from 0 to \(UInt32.max), not \(seconds)")
                }
                n.expiry = seconds == 0 ? .immediately : .at(unixSeconds: UInt32(seconds))
            case .string(let text):
                do { n.expiry = try APNSExpiry(parsing: text) } catch { throw JobFieldError(error.message) }
            default:
                throw JobFieldError("\"expiry\" must be a UNIX time in seconds or a string such as \"30m\" or \"1d\"")
            }
        }
        if let v = fields.priority {
            guard let raw = v.intValue, let priority = APNSPriority(rawValue: Int(raw)) else {
                throw JobFieldError("\"priority\" must be 10 (immediate), 5 (power-considerate) or 1 (low, HTTP/2 apps only)")
            }
            n.priority = priority
        }
        if let v = fields.truncateAtWordEnd { n.truncateAtWordEnd = try bool(v, "truncateAtWordEnd") }
        if let v = fields.retryLimit { n.retryLimit = try nonNegativeInt(v, "retryLimit") }
        if let v = fields.env {
            guard let env = v.stringValue, env == "production" || env == "sandbox" else {
                throw JobFieldError("\"env\" must be \"production\" or \"sandbox\"")
            }
            job.environment = env
        }
        if let v = fields.registeredAt {
            guard let seconds = v.intValue, seconds >= 0 else {
                throw JobFieldError("\"registeredAt\" must be a UNIX time in seconds")
            }
            job.registeredAt = seconds
        }
        if let v = fields.staleAfter {
            let sentence = "\"staleAfter\" must be a positive number of seconds or a string such as \"90s\", \"10m\" or \"1h\""
            switch v {
            case .int(let seconds):
                guard seconds > 0, seconds <= 31_536_000 else { throw JobFieldError(sentence) }
                job.staleAfter = .seconds(seconds)
            case .string(let text):
                guard case .after(let duration)? = try? APNSExpiry(parsing: text), duration > .zero else {
                    throw JobFieldError(sentence)
                }
                job.staleAfter = duration
            default:
                throw JobFieldError(sentence)
            }
        }
        if let v = fields.summary { job.summary = try bool(v, "summary") }
        job.notification = n
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
                guard let score = value.doubleValue else { throw JobFieldError("\"aps.relevance-score\" must be a number") }
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

    private func sound(_ value: JSONValue, _ name: String) throws(JobFieldError) -> APNSSound {
        if let text = value.stringValue { return .named(text) }
        guard let dict = value.objectValue, let soundName = dict["name"]?.stringValue else {
            throw JobFieldError("\"\(name)\" must be a sound name or an object with name, critical and volume")
        }
        let volume = dict["volume"]?.doubleValue ?? 1
        guard (0...1).contains(volume) else { throw JobFieldError("\"\(name).volume\" must be from 0 to 1") }
        return .critical(name: soundName, volume: volume)
    }

    private func string(_ value: JSONValue, _ name: String) throws(JobFieldError) -> String {
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
