// Shared by every transport.

import Foundation

/// One notification to send: what, to whom, and a tag the caller uses to match the outcome.
public struct APNSSubmission: Sendable {
    public var tag: UInt64
    public var token: DeviceToken
    /// HTTP/2: the `apns-id` to send (a canonical lower-case UUID, §3.3); `nil` lets the client
    /// make one. Ignored by the binary API.
    public var apnsID: String? = nil
    /// HTTP/2: a Live Activity update's place among its activity's updates (latest wins), and
    /// the priority chosen for it; `nil` for every other notification.
    public var activity: APNSActivityTicket? = nil
    /// The notification and its payload, by reference: the submissions of one notification to
    /// many tokens share one ``Content`` instead of copying every field per token.
    public var content: Content

    public var notification: APNSNotification {
        get { content.notification }
        set {
            content = Content(
                notification: newValue,
                payload: content.payload,
                staleAt: content.staleAt,
                broadcast: content.broadcast,
                urgent: content.urgent
            )
        }
    }

    /// The notification's payload when the caller has already built and validated it (with
    /// ``APNSNotification/validatedPayload(limit:allowLowPriority:)`` for the client's payload
    /// limit); `nil` makes the client build it.
    public var payload: [UInt8]? {
        get { content.payload }
        set {
            content = Content(
                notification: content.notification,
                payload: newValue,
                staleAt: content.staleAt,
                broadcast: content.broadcast,
                urgent: content.urgent
            )
        }
    }

    /// What is sent: the same for every token of a notification.
    public final class Content: Sendable {
        public let notification: APNSNotification
        public let payload: [UInt8]?
        /// When the notification goes stale, in milliseconds since the epoch: a client that
        /// cannot reach its gateway until then fails it with ``APNSStatus/expired`` instead of
        /// keeping it queued. `nil`: it waits for a connection however long that takes.
        public let staleAt: Int64?
        /// HTTP/2: a broadcast to a channel (§7.3) rather than a notification to a device. The
        /// submission's token is then the channel ID's bytes; the request goes to
        /// `/4/broadcasts/apps/<bundle ID>` with the ID in `apns-channel-id`.
        public let broadcast: Bool
        /// Written ahead of every notification that is not urgent, which waits in the pool
        /// (``APNSPoolQueue``): the highest priority lane's jobs.
        public let urgent: Bool

        public init(
            notification: APNSNotification,
            payload: [UInt8]? = nil,
            staleAt: Int64? = nil,
            broadcast: Bool = false,
            urgent: Bool = false
        ) {
            self.notification = notification
            self.payload = payload
            self.staleAt = staleAt
            self.broadcast = broadcast
            self.urgent = urgent
        }
    }

    public init(tag: UInt64, token: DeviceToken, notification: APNSNotification, payload: [UInt8]? = nil) {
        self.init(tag: tag, token: token, content: Content(notification: notification, payload: payload))
    }

    public init(tag: UInt64, token: DeviceToken, content: Content) {
        self.tag = tag
        self.token = token
        self.content = content
    }
}

/// The final verdict on one notification sent through a delivery client (binary or HTTP/2).
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
    /// Apple's HTTP/2 reason string (§3.4), e.g. `BadDeviceToken`; `nil` on the binary API.
    public var reason: String? = nil
    /// The `apns-id` the notification was last sent with (HTTP/2).
    public var apnsID: String? = nil
    /// The `apns-unique-id` APNs answered with (HTTP/2; the development environment only, §3.4).
    public var apnsUniqueID: String? = nil
    /// For HTTP/2 status 410: when APNs last confirmed the token invalid, in milliseconds since
    /// the epoch (§3.4). The token should not be used again unless registered after this time.
    public var unregisteredAt: Int64? = nil
    /// How many times the notification was written to a gateway connection.
    public var attempts: Int
    /// True when an earlier attempt was on a connection that closed without an error packet, so
    /// Apple may have accepted the notification more than once.
    public var possibleDuplicate: Bool
    /// When the notification was last written to a gateway connection (binary: when the
    /// kernel took the frame; HTTP/2: when its request went to the connection's frame layer);
    /// `nil` when it never was. The time from here to the outcome is the delivery latency:
    /// until the confirmation window passed or the error packet came (binary), or until the
    /// answer (HTTP/2). Nanoseconds of the monotonic clock (`DispatchTime.now().uptimeNanoseconds`,
    /// which `NIODeadline` also counts), a plain integer so that outcomes stay cheap to copy.
    public var writtenAt: UInt64? = nil

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

/// What a delivery client reports, in the spirit of node-apn's connection events.
public enum APNSDeliveryEvent: Sendable {
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
    /// No connection could be made to the gateway several times in a row and none is open.
    /// The client keeps reconnecting with capped back-off; what it holds waits in its queue
    /// (unless the client was given a `connectionRetryLimit`, or a notification goes stale).
    case unavailable(reason: String)
    /// A connection is open again after ``unavailable(reason:)``.
    case available

    /// The outcome this event carries, if it is one.
    public var outcome: APNSDeliveryOutcome? {
        switch self {
        case .transmitted(let o), .transmissionError(let o): o
        default: nil
        }
    }
}

/// What the binary and the HTTP/2 transports have in common: hand notifications in, read one
/// outcome per notification out. The worker and `apn-worker push` use either through it.
public protocol APNSDeliveryClient: AnyObject, Sendable {
    /// Opens the warm connections.
    func start()
    /// Hands notifications to the client. Returns once all are queued; waits while the client
    /// is full (backpressure). Each submission later produces exactly one outcome.
    func send(_ submissions: [APNSSubmission]) async throws
    /// The next outcome or connection event; `nil` once the client has shut down and every
    /// event was taken. One consumer at a time.
    func nextEvent() async -> APNSDeliveryEvent?
    /// Up to `max` events that are ready (waiting for the first one if there is none), in
    /// order; `nil` once the client has shut down and every event was taken.
    func nextEvents(max: Int) async -> [APNSDeliveryEvent]?
    /// The events as an `AsyncSequence` that takes them with ``nextEvent()``; one consumer.
    var events: APNSDeliveryEvents { get }
    /// Stops taking notifications, finishes the ones accepted, closes every connection.
    func shutdown(gracePeriod: Duration?) async
    /// The pool's connections, what it holds and its counters (``APNSPoolSnapshot``), read
    /// under the client's lock from state the client keeps anyway. Callable from any thread;
    /// it allocates nothing (the counters' dictionaries are shared, copy on write).
    func snapshot() -> APNSPoolSnapshot
}

extension APNSDeliveryClient {
    /// Outcomes and connection events, in the order they happened. One consumer at a time.
    /// The sequence ends after ``shutdown(gracePeriod:)`` completes and every event was read.
    public var events: APNSDeliveryEvents { APNSDeliveryEvents(client: self) }

    /// One event at a time, for clients without a batch of their own.
    public func nextEvents(max: Int) async -> [APNSDeliveryEvent]? {
        await nextEvent().map { [$0] }
    }

    /// Shuts down without a grace period: everything accepted is sent and answered first.
    public func shutdown() async {
        await shutdown(gracePeriod: nil)
    }
}
