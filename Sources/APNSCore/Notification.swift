/// One push notification: the `aps` dictionary fields (§5), custom data, and the delivery
/// parameters carried beside the payload (expiry and priority, §1.2).
///
/// Covers the fields exposed by node-apn, apnagent and node_apns. Build the wire payload with
/// ``payload()`` or ``validatedPayload(limit:allowLowPriority:)``.
public struct APNSNotification: Sendable, Hashable {
    /// `aps.alert`: a plain string (shown as the body) or a dictionary.
    public var alert: APNSAlert?
    /// `aps.badge`: `0` removes the badge; `nil` leaves it unchanged.
    public var badge: Int?
    /// `aps.sound`: a sound file name (or `"default"`), or a critical-alert sound.
    public var sound: APNSSound?
    /// `aps.content-available: 1`: a background (silent) update.
    public var contentAvailable: Bool = false
    /// `aps.mutable-content: 1`: route through the Notification Service Extension.
    public var mutableContent: Bool = false
    /// `aps.category`: the identifier of a registered notification category.
    public var category: String?
    /// `aps.thread-id`: grouping key.
    public var threadId: String?
    /// `aps.target-content-id`: the window or content to bring forward.
    public var targetContentId: String?
    /// `aps.interruption-level`: `passive`, `active`, `time-sensitive` or `critical`.
    public var interruptionLevel: String?
    /// `aps.relevance-score`: 0–1 (any value for Live Activities).
    public var relevanceScore: Double?
    /// `aps.url-args`: Safari website push placeholder values.
    public var urlArgs: [String]?
    /// MDM PushMagic. When set, the payload is exactly `{"mdm":"<value>"}` with no `aps` (§5).
    public var mdm: String?
    /// Further Apple keys inside `aps` (Focus filters, Live Activity keys, …), written after
    /// the modelled keys in sorted order.
    public var additionalAPSFields: [String: JSONValue] = [:]
    /// Custom keys written next to `aps` (never inside it, §5 check 7).
    public var custom: [String: JSONValue] = [:]
    /// When APNs may stop trying to deliver (§1.2).
    public var expiry: APNSExpiry = .immediately
    /// Delivery priority (§1.2 item 5).
    public var priority: APNSPriority = .immediate
    /// Payload text encoding; APNs accepts only UTF-8 (§5 check 1).
    public var encoding: APNSPayloadEncoding = .utf8
    /// When ``trim(toFit:)`` shortens the body, cut back to the end of a word.
    public var truncateAtWordEnd: Bool = false
    /// How often the notification may be resent after a failure; `nil` means unlimited.
    public var retryLimit: Int? = nil
    /// HTTP/2 only: the `apns-push-type` (§3.3), e.g. `alert`, `background`, `voip`. `nil`
    /// lets the client choose: `mdm` for MDM, `background` for a content-available-only
    /// notification, otherwise `alert`.
    public var pushType: String? = nil
    /// HTTP/2 only: `apns-collapse-id` (§3.3, at most 64 bytes).
    public var collapseId: String? = nil
    /// HTTP/2 only: the bundle ID of the `apns-topic` (§3.3), to which the push type's suffix is
    /// added; `nil` uses the client's configured topic. Lets one token-authenticated client
    /// serve several apps of a team.
    public var topic: String? = nil

    public init() {}

    public init(
        alert: APNSAlert? = nil,
        badge: Int? = nil,
        sound: APNSSound? = nil,
        contentAvailable: Bool = false,
        mutableContent: Bool = false,
        category: String? = nil,
        threadId: String? = nil,
        targetContentId: String? = nil,
        interruptionLevel: String? = nil,
        relevanceScore: Double? = nil,
        urlArgs: [String]? = nil,
        mdm: String? = nil,
        additionalAPSFields: [String: JSONValue] = [:],
        custom: [String: JSONValue] = [:],
        expiry: APNSExpiry = .immediately,
        priority: APNSPriority = .immediate,
        encoding: APNSPayloadEncoding = .utf8,
        truncateAtWordEnd: Bool = false,
        retryLimit: Int? = nil
    ) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.category = category
        self.threadId = threadId
        self.targetContentId = targetContentId
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.urlArgs = urlArgs
        self.mdm = mdm
        self.additionalAPSFields = additionalAPSFields
        self.custom = custom
        self.expiry = expiry
        self.priority = priority
        self.encoding = encoding
        self.truncateAtWordEnd = truncateAtWordEnd
        self.retryLimit = retryLimit
    }

    /// The alert body: the string alert, or `body` of the dictionary alert.
    /// Setting it on a notification without an alert creates a string alert.
    public var alertBody: String? {
        get {
            switch alert {
            case .text(let text): return text
            case .fields(let fields): return fields.body
            case .liveActivity(let fields):
                if case .text(let text) = fields.body { return text }
                return nil
            case nil: return nil
            }
        }
        set {
            switch alert {
            case .fields(var fields):
                fields.body = newValue
                alert = .fields(fields)
            case .liveActivity(var fields):
                // A Live Activity's alert always has a body (§5.1).
                fields.body = .text(newValue ?? "")
                alert = .liveActivity(fields)
            case .text, nil:
                alert = newValue.map(APNSAlert.text)
            }
        }
    }
}

/// `aps.alert`: a string is displayed as the body; the dictionary form is preferred (§5).
public enum APNSAlert: Sendable, Hashable, ExpressibleByStringLiteral {
    case text(String)
    /// Boxed: the dictionary's dozen fields would otherwise make every notification (and every
    /// copy of one a worker keeps in flight) about 180 bytes larger.
    indirect case fields(APNSAlertFields)
    /// A Live Activity's alert (§5.1): its own dictionary, whose `title` and `body` may be
    /// localized and which carries the `sound` itself.
    indirect case liveActivity(APNSLiveActivityAlert)

    public init(stringLiteral value: String) { self = .text(value) }
}

/// The `aps.alert` dictionary of an ActivityKit notification (§5.1): Apple's examples write
/// `{"title": …, "body": …, "sound": "chime.aiff"}`, with the sound inside the alert, where the
/// system plays it when it shows the alert (a `sound` beside the alert in `aps` is not played).
public struct APNSLiveActivityAlert: Sendable, Hashable {
    /// `title`
    public var title: APNSAlertText
    /// `body`
    public var body: APNSAlertText
    /// `sound`: a sound file in the app bundle or `Library/Sounds`, or `"default"`.
    public var sound: String?

    public init(title: APNSAlertText, body: APNSAlertText, sound: String? = nil) {
        self.title = title
        self.body = body
        self.sound = sound
    }
}

/// A Live Activity alert's `title` or `body` (§5.1): text as it is shown, or a key of the app's
/// `Localizable.strings` with the arguments for its `%@` placeholders.
public enum APNSAlertText: Sendable, Hashable {
    case text(String)
    /// Written as `{"loc-key": key, "loc-args": [arguments…]}`; `loc-args` is left out when
    /// `arguments` is `nil`.
    case localized(key: String, arguments: [String]?)

    /// The value of the `title` or `body` member.
    public var json: JSONValue {
        switch self {
        case .text(let text): return .string(text)
        case .localized(let key, let arguments):
            var members: [String: JSONValue] = ["loc-key": .string(key)]
            if let arguments { members["loc-args"] = .array(arguments.map(JSONValue.string)) }
            return .object(members)
        }
    }
}

/// The `aps.alert` dictionary (§5). Only fields that are set are written.
public struct APNSAlertFields: Sendable, Hashable {
    /// `title`
    public var title: String?
    /// `subtitle`
    public var subtitle: String?
    /// `body`
    public var body: String?
    /// `launch-image`
    public var launchImage: String?
    /// `loc-key`
    public var locKey: String?
    /// `loc-args`
    public var locArgs: [String]?
    /// `title-loc-key`
    public var titleLocKey: String?
    /// `title-loc-args`
    public var titleLocArgs: [String]?
    /// `subtitle-loc-key`
    public var subtitleLocKey: String?
    /// `subtitle-loc-args`
    public var subtitleLocArgs: [String]?
    /// `action-loc-key` (legacy)
    public var actionLocKey: String?
    /// `action`: the button label of a Safari website push.
    public var action: String?

    public init(
        title: String? = nil,
        subtitle: String? = nil,
        body: String? = nil,
        launchImage: String? = nil,
        locKey: String? = nil,
        locArgs: [String]? = nil,
        titleLocKey: String? = nil,
        titleLocArgs: [String]? = nil,
        subtitleLocKey: String? = nil,
        subtitleLocArgs: [String]? = nil,
        actionLocKey: String? = nil,
        action: String? = nil
    ) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.launchImage = launchImage
        self.locKey = locKey
        self.locArgs = locArgs
        self.titleLocKey = titleLocKey
        self.titleLocArgs = titleLocArgs
        self.subtitleLocKey = subtitleLocKey
        self.subtitleLocArgs = subtitleLocArgs
        self.actionLocKey = actionLocKey
        self.action = action
    }

    /// The set fields as (JSON key, value) pairs in a fixed order.
    var members: [(String, JSONValue)] {
        var out: [(String, JSONValue)] = []
        func add(_ key: String, _ value: String?) { if let value { out.append((key, .string(value))) } }
        func add(_ key: String, _ value: [String]?) {
            if let value { out.append((key, .array(value.map(JSONValue.string)))) }
        }
        add("title", title)
        add("subtitle", subtitle)
        add("body", body)
        add("launch-image", launchImage)
        add("loc-key", locKey)
        add("loc-args", locArgs)
        add("title-loc-key", titleLocKey)
        add("title-loc-args", titleLocArgs)
        add("subtitle-loc-key", subtitleLocKey)
        add("subtitle-loc-args", subtitleLocArgs)
        add("action-loc-key", actionLocKey)
        add("action", action)
        return out
    }
}

/// `aps.sound` (§5).
public enum APNSSound: Sendable, Hashable, ExpressibleByStringLiteral {
    /// A sound file in the app bundle or `Library/Sounds`, or `"default"`.
    case named(String)
    /// A critical alert: written as `{"critical":1,"name":…,"volume":…}`; volume is 0.0–1.0.
    case critical(name: String, volume: Double)

    public init(stringLiteral value: String) { self = .named(value) }
}

/// Delivery priority (§1.2 item 5, §5 check 3).
public enum APNSPriority: Sendable, Hashable {
    /// 10: send now. The notification must produce an alert, sound or badge.
    case immediate
    /// 5: send when power allows; may be grouped, throttled or dropped.
    case powerConsiderate
    /// 1: lowest; HTTP/2 API only.
    case low

    /// Accepts 10, 5 and 1.
    public init?(rawValue: Int) {
        switch rawValue {
        case 10: self = .immediate
        case 5: self = .powerConsiderate
        case 1: self = .low
        default: return nil
        }
    }

    /// Like ``init(rawValue:)`` but throws `invalidPriority` for other values.
    public init(validating rawValue: Int) throws(APNSPayloadError) {
        guard let priority = APNSPriority(rawValue: rawValue) else {
            throw APNSPayloadError(
                .invalidPriority,
                "priority \(rawValue) is not valid; use 10 (immediate), 5 (power-considerate) or 1 (low, HTTP/2 only)"
            )
        }
        self = priority
    }

    /// How the documentation calls it: `immediate`, `power-considerate` or `low`.
    public var name: String {
        switch self {
        case .immediate: "immediate"
        case .powerConsiderate: "power-considerate"
        case .low: "low"
        }
    }

    /// The value sent on the wire (frame item 5 or `apns-priority`).
    public var rawValue: UInt8 {
        switch self {
        case .immediate: 10
        case .powerConsiderate: 5
        case .low: 1
        }
    }
}

/// Payload text encoding. APNs requires UTF-8 (§5 check 1), so that is the only case.
public enum APNSPayloadEncoding: String, Sendable {
    case utf8

    /// Accepts "utf8" and "utf-8" in any letter case; other names give `nil`.
    public init?(name: String) {
        switch name.lowercased() {
        case "utf8", "utf-8": self = .utf8
        default: return nil
        }
    }

    /// Like ``init(name:)`` but throws `unsupportedEncoding` for other names.
    public init(parsing name: String) throws(APNSPayloadError) {
        guard let encoding = APNSPayloadEncoding(name: name) else {
            throw APNSPayloadError(
                .unsupportedEncoding,
                "payload encoding \"\(name)\" is not supported; APNs accepts only UTF-8 JSON, so use \"utf8\""
            )
        }
        self = encoding
    }
}
