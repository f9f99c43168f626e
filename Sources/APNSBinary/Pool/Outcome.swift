import APNSCore

/// The final verdict on one notification sent through an ``APNSBinaryClient``.
///
/// Every notification handed to the client produces exactly one outcome.
public struct APNSDeliveryOutcome: Sendable, Hashable {
    /// The caller's tag from the submission.
    public var tag: UInt64
    public var token: DeviceToken
    /// `nil` when the notification was transmitted; otherwise Apple's status (§1.4) or one of
    /// the client's own codes (``APNSStatus/invalidPayload``, ``APNSStatus/indeterminate``, ...).
    public var status: APNSStatus?
    /// A sentence describing a failure that came from the client rather than Apple.
    public var message: String?
    /// How many times the notification was written to a gateway connection.
    public var attempts: Int
    /// True when an earlier attempt was on a connection that closed without an error packet, so
    /// Apple may have accepted the notification more than once.
    public var possibleDuplicate: Bool

    public var isTransmitted: Bool { status == nil }

    public init(
        tag: UInt64,
        token: DeviceToken,
        status: APNSStatus?,
        message: String? = nil,
        attempts: Int,
        possibleDuplicate: Bool
    ) {
        self.tag = tag
        self.token = token
        self.status = status
        self.message = message
        self.attempts = attempts
        self.possibleDuplicate = possibleDuplicate
    }
}

/// What an ``APNSBinaryClient`` reports, in the spirit of node-apn's connection events.
public enum APNSBinaryEvent: Sendable {
    /// A gateway connection completed its TLS handshake.
    case connected(connection: Int)
    /// A gateway connection closed; `reason` says why.
    case disconnected(connection: Int, reason: String)
    /// A connect attempt or an idle connection timed out.
    case timeout(connection: Int, reason: String)
    /// A notification is known to be accepted by the gateway.
    case transmitted(APNSDeliveryOutcome)
    /// A notification failed for good.
    case transmissionError(APNSDeliveryOutcome)
    /// A socket or TLS error on a connection.
    case socketError(connection: Int, error: String)
    /// A problem that is not tied to one notification.
    case error(APNSError)

    /// The outcome this event carries, if it is one.
    public var outcome: APNSDeliveryOutcome? {
        switch self {
        case .transmitted(let o), .transmissionError(let o): o
        default: nil
        }
    }
}
