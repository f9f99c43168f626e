import APNSCore

/// The `apns-push-type` header (§3.3), with the topic suffix and payload limit each type needs.
public enum APNSPushType: String, Sendable, Hashable, CaseIterable {
    case alert
    case background
    case voip
    case complication
    case fileprovider
    case location
    case liveactivity
    case pushtotalk
    case widgets
    case controls
    case mdm

    /// Payload limit of the HTTP/2 API for regular notifications (§1.3).
    public static let regularPayloadLimit = 4096
    /// Payload limit of the HTTP/2 API for VoIP notifications (§1.3: 5 KB).
    public static let voipPayloadLimit = 5120
    /// Payload limit of a broadcast to a channel (§7.3: 5 KB).
    public static let broadcastPayloadLimit = 5120

    /// The suffix the topic must end with (§3.3 table): `nil` for `alert` and `background`,
    /// whose topic is the bundle ID, and for `mdm`, whose topic comes from the MDM push
    /// certificate.
    public var topicSuffix: String? {
        switch self {
        case .alert, .background, .mdm: nil
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .location: ".location-query"
        case .liveactivity: ".push-type.liveactivity"
        case .pushtotalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        case .controls: ".push-type.controls"
        }
    }

    /// The topic for an app's bundle ID: the bundle ID plus ``topicSuffix``.
    public func topic(bundleID: String) -> String { bundleID + (topicSuffix ?? "") }

    /// The largest payload APNs accepts for this type (§1.3, §3.3).
    public var payloadLimit: Int { self == .voip ? Self.voipPayloadLimit : Self.regularPayloadLimit }

    /// The type is available on token-authenticated connections only (§3.3: `location`).
    public var requiresTokenAuthentication: Bool { self == .location }

    /// The priorities allowed with this type: `background` allows 5 only (§3.3, §5 check 4),
    /// `liveactivity` 10 and 5, to a device or a channel (§5.1, §7.3); `nil` means any of 10, 5
    /// and 1.
    public var allowedPriorities: Set<APNSPriority>? {
        switch self {
        case .background: [.powerConsiderate]
        case .liveactivity: [.immediate, .powerConsiderate]
        default: nil
        }
    }

    /// Throws `invalidRequest` unless `topic` ends with ``topicSuffix`` and has a bundle ID
    /// in front of it (§3.3 table, §5 check 5).
    public func validate(topic: String) throws(APNSError) {
        guard let suffix = topicSuffix else { return }
        guard topic.hasSuffix(suffix), topic.utf8.count > suffix.utf8.count else {
            throw APNSError(
                .invalidRequest,
                "topic \"\(topic)\" does not fit push type \(rawValue); its topic is the bundle ID followed by \(suffix), such as com.example.app\(suffix)"
            )
        }
    }

    /// Throws `invalidRequest` when this type does not allow `priority` (§3.3, §5.1).
    public func validate(priority: APNSPriority) throws(APNSError) {
        guard let allowed = allowedPriorities, !allowed.contains(priority) else { return }
        let names = allowed.sorted { $0.rawValue > $1.rawValue }.map { "\($0.rawValue) (\($0.name))" }
        throw APNSError(
            .invalidRequest,
            "push type \(rawValue) allows only priority \(names.joined(separator: " or ")), not \(priority.rawValue); send it with \(names.count == 1 ? "priority \(names[0])" : "one of those")"
        )
    }
}
