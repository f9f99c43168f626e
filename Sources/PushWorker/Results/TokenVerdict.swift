import APNSCore

/// Apple's permanent verdict on a device token: the reason it gave and when (UNIX seconds). The
/// worker remembers it per app and environment for `invalidTokenTTLDays`
/// (`docs/jobs.md`, "Invalid tokens"), answers later notifications to the token with status 519
/// without asking Apple, and puts it in results as `tokenVerdict`, so that job writers can delete
/// the token on their side.
public struct TokenVerdict: Sendable, Hashable {
    /// Apple's reason: `Unregistered`, `BadDeviceToken`, `DeviceTokenNotForTopic` (HTTP/2, §3.4),
    /// `InvalidToken` (binary status 8, §1.4), or for a broadcast channel `ChannelNotRegistered`
    /// (§7.4).
    public var reason: String
    /// When Apple gave it (for `Unregistered`, when it last confirmed the token invalid).
    public var since: Int64

    public init(reason: String, since: Int64) {
        self.reason = reason
        self.since = since
    }

    static let unregistered = "Unregistered"
    static let invalidToken = "InvalidToken"
    /// A broadcast's answer (§7.4): the channel is deleted or was never created.
    static let channelNotRegistered = "ChannelNotRegistered"

    /// The HTTP/2 reasons that condemn a token for good (§3.4); `Unregistered` comes with 410.
    static let permanentReasons: Set<String> = ["BadDeviceToken", "DeviceTokenNotForTopic"]

    /// Reads `<since>|<reason>` as the store keeps it; a bare `<since>` is `Unregistered`.
    init(stored bytes: some Collection<UInt8>) {
        let text = String(decoding: bytes, as: UTF8.self)
        if let bar = text.firstIndex(of: "|") {
            since = Int64(text[..<bar]) ?? 0
            let reason = String(text[text.index(after: bar)...])
            self.reason = reason.isEmpty ? Self.unregistered : reason
        } else {
            since = Int64(text) ?? 0
            reason = Self.unregistered
        }
    }

    /// The sentence of a notification not sent because of the verdict (status 519).
    var sentence: String {
        switch reason {
        case Self.unregistered:
            "Apple reported this token unregistered at \(since), after the job's registeredAt (or the job has none)"
        case Self.channelNotRegistered:
            "Apple answered ChannelNotRegistered for this channel at \(since): it was deleted or never created; it is not sent to again until the verdict expires"
        default:
            "Apple refused this token with \(reason) at \(since), after the job's registeredAt (or the job has none); it is not sent again until the verdict expires"
        }
    }
}
