import APNSCore
import APNSHTTP2Core
import Foundation

/// A job's fields into the ``Job`` and its notification, each checked; the first field that
/// cannot be read is the job's rejection (``JobFieldError``).
extension JobParser {
    func fill(_ job: inout Job, from fields: Fields, producedAt: Int64?) throws(JobFieldError) {
        var n = APNSNotification()
        try fillContent(&n, from: fields)
        try fillDelivery(&n, from: fields)
        let autoPriority = try fillPriority(&n, from: fields)
        try fillJob(&job, &n, from: fields)
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

    /// What the device shows or does: `aps`, its convenience fields and the custom payload.
    private func fillContent(_ n: inout APNSNotification, from fields: Fields) throws(JobFieldError) {
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
    }

    /// How Apple delivers it: push type, collapse ID, expiry, and the retry settings.
    private func fillDelivery(_ n: inout APNSNotification, from fields: Fields) throws(JobFieldError) {
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
        if let v = fields[.truncateAtWordEnd] { n.truncateAtWordEnd = try bool(v, "truncateAtWordEnd") }
        if let v = fields[.retryLimit] { n.retryLimit = try nonNegativeInt(v, "retryLimit") }
    }

    /// `priority`: a number, or `"auto"` (true), decided per Live Activity update.
    private func fillPriority(_ n: inout APNSNotification, from fields: Fields) throws(JobFieldError) -> Bool {
        if let v = fields[.priority] {
            if v.stringValue == "auto" {
                // Decided per Live Activity update when it is sent (`docs/jobs.md`, "Priority budget").
                n.priority = .immediate
                return true
            } else {
                guard let raw = v.intValue, let priority = APNSPriority(rawValue: Int(raw)) else {
                    throw JobFieldError(
                        "\"priority\" must be 10 (immediate), 5 (power-considerate), 1 (low, HTTP/2 apps only) or \"auto\" (Live Activity jobs)"
                    )
                }
                n.priority = priority
            }
        }
        return false
    }

    /// The job's own fields: environment, registration time, apns-id, topic, dry run, stale
    /// deadline, summary.
    private func fillJob(_ job: inout Job, _ n: inout APNSNotification, from fields: Fields) throws(JobFieldError) {
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
        if let v = fields[.staleAfter] { job.staleAfter = try staleAfter(v) }
    }

    /// `staleAfter`: seconds, or a duration such as `"10m"`, at most a year.
    private func staleAfter(_ v: JSONValue) throws(JobFieldError) -> Duration {
        let sentence =
            "\"staleAfter\" must be a positive number of seconds or a string such as \"90s\", \"10m\" or \"1h\", "
            + "at most a year"
        switch v {
        case .int(let seconds):
            guard seconds > 0, seconds <= 31_536_000 else { throw JobFieldError(sentence) }
            return .seconds(seconds)
        case .string(let text):
            guard case .after(let duration)? = try? APNSExpiry(parsing: text), duration > .zero,
                duration <= .seconds(31_536_000)
            else {
                throw JobFieldError(sentence)
            }
            return duration
        default:
            throw JobFieldError(sentence)
        }
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
