/// A delivery client's pool at one moment: its connections, what it holds, and counters that
/// only grow from the moment the client was made.
///
/// ``APNSDeliveryClient/snapshot()`` takes one under the client's lock, from state the client
/// keeps anyway; counting costs an integer increment where the event happens. A reader that
/// exports counters (Prometheus) takes snapshots now and then and adds the difference.
///
/// The gauges describe the moment; the counters never decrease. A dictionary counter holds only
/// the keys that have occurred: a missing key is zero.
public struct APNSPoolSnapshot: Sendable, Equatable {
    /// Why a connect failed: its TLS handshake (a certificate, a trust root, ALPN), the gateway
    /// refusing the TCP connection, no answer within the connect timeout, or anything else.
    /// Raw values are metric label values.
    public enum ConnectFailure: String, Sendable, Hashable, CaseIterable {
        case tls
        case refused
        case timeout
        case other
    }

    /// Why an open connection (one counted in ``connectionsOpened``) closed. Raw values are
    /// metric label values.
    public enum CloseReason: String, Sendable, Hashable, CaseIterable {
        /// The binary gateway sent an error packet (§1.5), status 10 (shutdown) included.
        case errorResponse
        /// The peer or the network ended it without an error packet or a GOAWAY: end of file,
        /// a reset, a TLS error.
        case silentClose
        /// The HTTP/2 server sent GOAWAY (§3.5), and the connection closed once drained.
        case goaway
        /// The client closed it after the idle timeout.
        case idle
        /// The client closed it while shutting down.
        case shutdown
        /// The client closed it for another reason: a write or a PING that got no answer in
        /// time, a connection replaced after an answer that asks for a new one or to change its
        /// provider token, stream identifiers used up.
        case other
    }

    // MARK: Gauges

    /// Connections whose TLS handshake completed (for HTTP/2: whose server SETTINGS arrived),
    /// until they close; one that is draining or closing still counts.
    public var open = 0
    /// Connections being made: TCP, TLS (and, for HTTP/2, the server's first SETTINGS).
    public var connecting = 0
    /// Connection slots waiting out a reconnect back-off before their next connect.
    public var backingOff = 0
    /// Binary: notifications in the sent caches, written and not yet confirmed. `nil` for HTTP/2.
    public var cachedNotifications: Int? = nil
    /// Binary: bytes of the frames in the sent caches. `nil` for HTTP/2.
    public var cachedBytes: Int? = nil
    /// HTTP/2: streams open, requests written and not yet answered. `nil` for binary.
    public var streamsInUse: Int? = nil
    /// Notifications accepted by `send` and waiting to be written: new ones, ones to write again,
    /// and (HTTP/2) ones waiting out a retry delay.
    public var queued = 0
    /// Notifications `send` admitted whose outcomes were not yet taken, and the most it admits
    /// (`maxPending`): a `send` of more waits.
    public var admitted = 0
    public var maxPending = 0

    // MARK: Counters since the client was made

    /// Connections that completed their handshake (HTTP/2: received the server's SETTINGS).
    public var connectionsOpened = 0
    /// Connects that failed before the connection was open, by why.
    public var connectFailures: [ConnectFailure: Int] = [:]
    /// Open connections that closed, by why. `connectionsOpened` minus their sum is ``open``.
    public var connectionsClosed: [CloseReason: Int] = [:]
    /// Notifications written to a connection, resends included (binary: taken into a sent cache
    /// to be written; HTTP/2: written on a stream, counted when the stream ends).
    public var writes = 0
    /// Those of ``writes`` that were not a notification's first write.
    public var retransmissions = 0
    /// Times `send` waited for room because the client held `maxPending` notifications.
    public var backpressureWaits = 0
    /// HTTP/2 with provider tokens: new provider tokens (JWTs) the client's provider handed it,
    /// the first one included. The provider signs each once, so with a provider of its own
    /// this is the tokens signed for the client; a provider shared by clients counts in each.
    public var providerTokenRefreshes = 0
    /// HTTP/2: answers with status 429 (`TooManyRequests`, `TooManyProviderTokenUpdates`).
    public var tooManyRequests = 0
    /// Answers the client could not fully use and partly ignored (HTTP/2: a 410 timestamp that
    /// is not a time between 1970 and 9999), each logged: an error of the peer.
    public var malformedAnswers = 0

    // MARK: Times

    /// HTTP/2 with provider tokens: when the newest provider token APNs accepted was signed
    /// (its `iat`, seconds since 1970). A token counts as accepted once a request that carried
    /// it got a 200 or a 4xx answer other than 403 (`ExpiredProviderToken`,
    /// `InvalidProviderToken` and the other refusals of a token) and 429 (which includes
    /// `TooManyProviderTokenUpdates`); a 5xx says nothing about the token. `nil` until then,
    /// with certificate authentication, and for binary.
    public var providerTokenAcceptedAt: Int64? = nil

    public init() {}

    /// Counts one failed connect.
    package mutating func count(_ failure: ConnectFailure) {
        connectFailures[failure, default: 0] += 1
    }

    /// Counts one open connection closed.
    package mutating func count(_ reason: CloseReason) {
        connectionsClosed[reason, default: 0] += 1
    }

    /// Notes that APNs accepted a request carrying the provider token signed at `issuedAt`;
    /// an older token than the newest accepted one changes nothing.
    package mutating func providerTokenAccepted(issuedAt: Int64) {
        if issuedAt > providerTokenAcceptedAt ?? .min { providerTokenAcceptedAt = issuedAt }
    }
}
