import APNSCore
import APNSHTTP2Core
import Foundation

/// A job's `liveActivity` object (`docs/jobs.md`, "Live Activities"): an ActivityKit push
/// notification that starts, updates or ends a Live Activity (`docs/apns-protocol.md` §5.1).
public struct LiveActivity: Sendable, Hashable {
    /// `aps.event`.
    public enum Event: String, Sendable, Hashable, CaseIterable {
        case start
        case update
        case end
    }

    public var event: Event
    /// `aps.content-state`: the activity's dynamic content, an object matching the app's
    /// `ContentState` exactly.
    public var contentState: JSONValue
    /// `aps.timestamp` (UNIX seconds): when the content was produced; the device ignores an
    /// update older than the one it shows.
    public var timestamp: Int64
    /// `aps.stale-date` (UNIX seconds).
    public var staleDate: Int64?
    /// `aps.dismissal-date` (UNIX seconds), `end` only.
    public var dismissalDate: Int64?
    /// `aps.relevance-score`.
    public var relevanceScore: Double?
    /// `aps.attributes-type` and `aps.attributes`, `start` only (both required there).
    public var attributesType: String?
    public var attributes: JSONValue?
    /// `aps.input-push-token`: a `start` that asks the device for an update token.
    public var inputPushToken = false
    /// `aps.input-push-channel`: a `start` that subscribes the activity to a broadcast channel.
    public var inputPushChannel: String?
    /// The job says `"priority": "auto"`: the worker sends 10 while the activity is within its
    /// app's `liveActivityHighPriorityPerHour`, 5 after it (updates without an alert only).
    public var autoPriority = false

    /// Whether it has `liveActivity.alert`.
    public var hasAlert = false

    /// The most bytes a content state may take as compact JSON: ActivityKit's limit for an
    /// activity's state (§5.1).
    public static let maxContentStateBytes = 4096

    /// The `aps` keys this object sets, besides `alert` and `relevance-score`.
    var apsFields: [String: JSONValue] {
        var fields: [String: JSONValue] = [
            "event": .string(event.rawValue),
            "content-state": contentState,
            "timestamp": .int(timestamp),
        ]
        if let staleDate { fields["stale-date"] = .int(staleDate) }
        if let dismissalDate { fields["dismissal-date"] = .int(dismissalDate) }
        if let attributesType { fields["attributes-type"] = .string(attributesType) }
        if let attributes { fields["attributes"] = attributes }
        if inputPushToken { fields["input-push-token"] = .int(1) }
        if let inputPushChannel { fields["input-push-channel"] = .string(inputPushChannel) }
        return fields
    }
}

extension JobParser {
    /// The fields a `liveActivity` object may have, for the error that names an unknown one.
    private static let liveActivityFields =
        "event, contentState, timestamp, staleDate, dismissalDate, relevanceScore, attributesType, attributes, alert, inputPushToken, inputPushChannel"

    /// Reads a job's `liveActivity` object into `notification`: the `aps` keys of §5.1, the
    /// alert (with its sound inside it), and push type `liveactivity` (whose topic is the bundle ID with
    /// `.push-type.liveactivity`). `producedAt` (UNIX seconds) is the default timestamp.
    func applyLiveActivity(
        _ value: JSONValue,
        app: String,
        producedAt: Int64,
        fields: Fields,
        to n: inout APNSNotification
    ) throws(JobFieldError) -> LiveActivity {
        guard http2Apps.contains(app) else {
            throw JobFieldError(
                "\"liveActivity\" needs the HTTP/2 API, and app \"\(app.abbreviated())\" is delivered over the binary protocol; configure it with transport http2"
            )
        }
        guard let object = value.objectValue else {
            throw JobFieldError("\"liveActivity\" must be an object with event and contentState")
        }
        if let pushType = n.pushType, pushType != APNSPushType.liveactivity.rawValue {
            throw JobFieldError(
                "a Live Activity job is sent with push type liveactivity; leave \"pushType\" out or set it to \"liveactivity\", not \"\(pushType.abbreviated())\""
            )
        }
        // §5.1, §7.3: Apple asks for apns-priority 10 or 5 on Live Activity pushes, to a token or a channel.
        if n.priority == .low {
            throw JobFieldError(
                "a Live Activity is sent with \"priority\" 10 (immediate, counted against the activity's budget) or 5 (power-considerate); Apple does not take priority 1 for it"
            )
        }
        for conflicting in [JobParser.Fields.Name.alert, .sound, .contentAvailable, .mdm]
        where fields[conflicting] != nil {
            let name = JobParser.Fields.Name.spellings[conflicting.rawValue]
            throw JobFieldError(
                "\"\(name)\" does not go with \"liveActivity\"; a Live Activity's alert and sound go in liveActivity.alert"
            )
        }
        if let unknown = object.keys.filter({ !Self.liveActivityKeys.contains($0) }).min() {
            throw JobFieldError(
                "\"liveActivity.\(unknown.abbreviated())\" is not a Live Activity field; use \(Self.liveActivityFields)"
            )
        }
        guard let eventText = object["event"]?.stringValue, let event = LiveActivity.Event(rawValue: eventText) else {
            throw JobFieldError("\"liveActivity.event\" must be \"start\", \"update\" or \"end\"")
        }
        guard let contentState = object["contentState"], case .object = contentState else {
            throw JobFieldError(
                "\"liveActivity.contentState\" is required: an object matching the activity's ContentState"
            )
        }
        let stateBytes = contentState.serialized().count
        guard stateBytes <= LiveActivity.maxContentStateBytes else {
            throw JobFieldError(
                "\"liveActivity.contentState\" is \(stateBytes) bytes as compact JSON, over ActivityKit's limit of \(LiveActivity.maxContentStateBytes); send less state"
            )
        }
        func seconds(_ key: String) throws(JobFieldError) -> Int64? {
            guard let value = object[key] else { return nil }
            guard let number = value.intValue, number >= 0, number < 10_000_000_000 else {
                throw JobFieldError("\"liveActivity.\(key)\" must be a UNIX time in seconds")
            }
            return number
        }
        var activity = LiveActivity(
            event: event,
            contentState: contentState,
            timestamp: try seconds("timestamp") ?? producedAt
        )
        activity.staleDate = try seconds("staleDate")
        activity.dismissalDate = try seconds("dismissalDate")
        if let staleDate = activity.staleDate, staleDate <= activity.timestamp {
            throw JobFieldError(
                "\"liveActivity.staleDate\" \(staleDate) is not after the update's timestamp \(activity.timestamp): the activity would show as stale at once; give a later staleDate or leave it out"
            )
        }
        if activity.dismissalDate != nil && event != .end {
            throw JobFieldError("\"liveActivity.dismissalDate\" applies to an end event only")
        }
        if let score = object["relevanceScore"] {
            guard let number = score.doubleValue, number.isFinite else {
                throw JobFieldError("\"liveActivity.relevanceScore\" must be a number")
            }
            activity.relevanceScore = number
        }
        if let type = object["attributesType"] {
            guard let text = type.stringValue, !text.isEmpty else {
                throw JobFieldError(
                    "\"liveActivity.attributesType\" must be the name of the app's ActivityAttributes type"
                )
            }
            activity.attributesType = text
        }
        if let attributes = object["attributes"] {
            guard case .object = attributes else {
                throw JobFieldError(
                    "\"liveActivity.attributes\" must be an object matching the app's ActivityAttributes"
                )
            }
            activity.attributes = attributes
        }
        if let flag = object["inputPushToken"] {
            guard let on = flag.boolValue else {
                throw JobFieldError("\"liveActivity.inputPushToken\" must be true or false")
            }
            activity.inputPushToken = on
        }
        if let channel = object["inputPushChannel"] {
            guard let text = channel.stringValue, !text.isEmpty, Data(base64Encoded: text) != nil else {
                throw JobFieldError("\"liveActivity.inputPushChannel\" must be a channel id, a base64 string")
            }
            activity.inputPushChannel = text
        }
        var alert: APNSLiveActivityAlert? = nil
        if let value = object["alert"] { alert = try liveActivityAlert(value) }
        switch event {
        case .start:
            guard activity.attributesType != nil, activity.attributes != nil else {
                throw JobFieldError(
                    "a Live Activity start needs \"liveActivity.attributesType\" and \"liveActivity.attributes\": the app's ActivityAttributes type and its static values"
                )
            }
            guard alert != nil else {
                throw JobFieldError(
                    "a Live Activity start needs \"liveActivity.alert\" with a title and body: Apple shows a started activity with an alert"
                )
            }
            if activity.inputPushToken && activity.inputPushChannel != nil {
                throw JobFieldError(
                    "a Live Activity start asks for either an update token (inputPushToken) or a channel (inputPushChannel), not both"
                )
            }
        case .update, .end:
            for key in ["attributesType", "attributes", "inputPushToken", "inputPushChannel"] where object[key] != nil {
                throw JobFieldError("\"liveActivity.\(key)\" applies to a start event only")
            }
        }
        if let alert {
            n.alert = .liveActivity(alert)
            activity.hasAlert = true
        }
        n.relevanceScore = activity.relevanceScore
        for (key, value) in activity.apsFields { n.additionalAPSFields[key] = value }
        n.pushType = APNSPushType.liveactivity.rawValue
        return activity
    }

    private static let liveActivityKeys: Set<String> = [
        "event", "contentState", "timestamp", "staleDate", "dismissalDate", "relevanceScore", "attributesType",
        "attributes", "alert", "inputPushToken", "inputPushChannel",
    ]

    /// A Live Activity's alert (§5.1): `title` and `body`, each a string or a localized
    /// `{"loc-key", "loc-args"}`, and an optional `sound`, which goes inside the alert.
    private func liveActivityAlert(_ value: JSONValue) throws(JobFieldError) -> APNSLiveActivityAlert {
        guard let object = value.objectValue else {
            throw JobFieldError("\"liveActivity.alert\" must be an object with title, body and optionally sound")
        }
        var title: APNSAlertText? = nil
        var body: APNSAlertText? = nil
        var sound: String? = nil
        for (key, item) in object {
            switch key {
            case "title": title = try alertText(item, "liveActivity.alert.title")
            case "body": body = try alertText(item, "liveActivity.alert.body")
            case "sound": sound = try string(item, "liveActivity.alert.sound")
            default:
                throw JobFieldError(
                    "\"liveActivity.alert.\(key.abbreviated())\" is not a Live Activity alert field; use title, body and sound"
                )
            }
        }
        guard let title, let body else {
            throw JobFieldError("\"liveActivity.alert\" needs both a title and a body")
        }
        return APNSLiveActivityAlert(title: title, body: body, sound: sound)
    }

    /// A title or body: the text to show, or `{"loc-key": "KEY", "loc-args": ["…"]}` naming a
    /// string of the app's `Localizable.strings` and its arguments (§5).
    private func alertText(_ value: JSONValue, _ name: String) throws(JobFieldError) -> APNSAlertText {
        if let text = value.stringValue { return .text(text) }
        let form =
            "a string, or an object with \"loc-key\" (a key of the app's Localizable.strings) and optionally \"loc-args\""
        guard let object = value.objectValue else { throw JobFieldError("\"\(name)\" must be \(form)") }
        if let unknown = object.keys.filter({ $0 != "loc-key" && $0 != "loc-args" }).min() {
            throw JobFieldError(
                "\"\(name).\(unknown.abbreviated())\" is not a localized text field; \(name) is \(form)"
            )
        }
        guard let key = object["loc-key"]?.stringValue, !key.isEmpty else {
            throw JobFieldError("\"\(name)\" needs \"loc-key\", the key of a string in the app's Localizable.strings")
        }
        var arguments: [String]? = nil
        if let items = object["loc-args"] {
            guard let array = items.arrayValue, array.allSatisfy({ $0.stringValue != nil }) else {
                throw JobFieldError(
                    "\"\(name).loc-args\" must be an array of strings, one for each %@ of the localized string"
                )
            }
            arguments = array.compactMap(\.stringValue)
        }
        return .localized(key: key, arguments: arguments)
    }
}
