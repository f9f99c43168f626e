import APNSCore
import APNSHTTP2Core
import Foundation
import NIOCore

extension HTTP2PoolStateMachine {
    struct Configuration {
        var maxConnections = 1
        /// Connections kept open while there is nothing to send.
        var minConnections = 0
        var maxStreamsPerConnection = 1000
        /// Writes of one request after which a stream left unanswered is not tried again.
        var maxAttempts = 5
        /// Resends of one request on another connection after answers that are about the
        /// connection or the provider token (``APNSRetryAdvice/onNewConnection``): enough for a
        /// token refresh, an idle connection and a server shutting down to meet one
        /// notification, few enough that a server answering nothing else cannot keep it
        /// forever. Independent of the request's `retryLimit`, which counts 429 and 5xx.
        var maxConnectionResends = 3
        /// Failed connects in a row after which waiting requests fail; `nil`: they wait.
        var connectionRetryLimit: Int? = 10
        var reconnectBaseDelay: Duration = .milliseconds(100)
        var reconnectMaxDelay: Duration = .seconds(5)
        var retryBaseDelay: Duration = .seconds(1)
        var retryMaxDelay: Duration = .seconds(60)
        /// The server, as messages name it.
        var server = ""
        /// Connection-level events kept for the consumer before new ones are dropped.
        var maxConnectionEvents = 1_000
        /// Monotonic time, for retry delays and reconnects.
        var clock: @Sendable () -> NIODeadline = { .now() }
        /// Wall-clock milliseconds since the epoch, for stale notifications.
        var now: @Sendable () -> Int64 = UnixTime.nowMilliseconds
        /// Delays a reconnect with jitter.
        var jitter: @Sendable (Duration) -> Duration = APNSReconnectBackoff.jittered
        /// Requests carry provider tokens (§4): an `ExpiredProviderToken` answer asks the client
        /// to refresh the token (``Action/refreshToken(connection:rejected:)``).
        var providerTokens = false
    }

    /// The provider token for a step that may hand out work, read by the client from its
    /// ``APNSTokenProvider`` before taking its lock (reading may sign a new token), with the
    /// provider's time; `nil` with certificate authentication.
    enum TokenOffer {
        case token(APNSProviderToken, now: Date)
        /// The provider could not sign a token: what waits fails.
        case failed(APNSError)
    }

    /// What a connection handler is asked to do next.
    @usableFromInline package struct Work: Sendable, Equatable {
        var requests: [QueuedRequest] = []
        var authorization: String?
        var close = false
    }

    /// Where a connection is in its life, with what only that stage has.
    ///
    /// Its moves: `connecting → ready → draining`, or `connecting → draining` (a GOAWAY or a
    /// close before the server's first SETTINGS); a connection leaves the table when its channel
    /// closes. Getting ready twice is a bug in the pool, and stops a debug build.
    enum State: Equatable {
        /// Waiting for TLS, ALPN and the server's first SETTINGS; `timedOut` once the connect
        /// timeout passed, and the client closes it.
        case connecting(timedOut: Bool)
        /// Opens streams, up to its limit.
        case ready(Ready)
        /// Takes no new streams (a GOAWAY, stream ids running out, a replacement, the idle
        /// timeout) and closes once its open streams are done. `established` when the server's
        /// first SETTINGS arrived.
        case draining(established: Bool)

        var isConnecting: Bool {
            if case .connecting = self { true } else { false }
        }

        var isDraining: Bool {
            if case .draining = self { true } else { false }
        }

        /// The server's first SETTINGS arrived: the connection counts as open until it closes.
        var isEstablished: Bool {
            switch self {
            case .connecting: false
            case .ready: true
            case .draining(let established): established
            }
        }
    }

    /// What a connection that opens streams keeps.
    struct Ready: Equatable {
        /// Streams it may have open: the server's limit, capped by ours.
        var limit: Int
        /// Its handler has been asked for work and has not taken it yet.
        var wakeScheduled = false
    }

    struct Connection {
        var id: Int
        var state = State.connecting(timedOut: false)
        /// The connect completed and the client holds the channel.
        var attached = false
        /// Streams open on it.
        var open = 0
        var tokenGuard = APNSConnectionTokenGuard()
        var currentToken: APNSProviderToken?
        /// The pool asked the client to close it.
        var closeRequested = false
        /// Why it is closing, once the pool knows (a GOAWAY, the idle timeout, a shutdown, a
        /// replacement); `nil` while it does not.
        var closeReason: APNSPoolSnapshot.CloseReason?

        /// Takes no new streams from now on.
        mutating func drain() {
            state = .draining(established: state.isEstablished)
        }

        /// Changes what the connection that opens streams keeps; nothing in another state.
        mutating func whenReady(_ change: (inout Ready) -> Void) {
            guard case .ready(var ready) = state else { return }
            change(&ready)
            state = .ready(ready)
        }
    }

    struct Delayed {
        var due: NIODeadline
        var request: QueuedRequest
    }
}

extension HTTP2PoolStateMachine.Configuration {
    /// The pool's part of a client's configuration.
    init(_ client: APNSHTTP2Configuration) {
        self.init(
            maxConnections: client.maxConnections,
            minConnections: client.minConnections,
            maxStreamsPerConnection: client.maxStreamsPerConnection,
            maxAttempts: client.maxAttempts,
            connectionRetryLimit: client.connectionRetryLimit,
            reconnectBaseDelay: client.reconnectBaseDelay,
            reconnectMaxDelay: client.reconnectMaxDelay,
            retryBaseDelay: client.retryBaseDelay,
            retryMaxDelay: client.retryMaxDelay,
            server: "\(client.host):\(client.port)"
        )
        if case .token = client.authentication { providerTokens = true }
    }
}

extension HTTP2PoolStateMachine {
    /// What the client does after a step, once it has released its lock.
    @usableFromInline package enum Action: Equatable, Sendable {
        /// The work connection `id`'s handler asked for (``takeWork(id:free:token:)``,
        /// ``streamsFinished(id:results:free:token:)``); the client hands it back to the handler.
        case work(id: Int, Work)
        /// Open connection `id`.
        case connect(id: Int)
        /// Ask the handler of connection `id` for its next work (``takeWork(id:free:)``).
        case wake(id: Int)
        /// Close connection `id`.
        case close(id: Int)
        /// Call ``delayedTimerFired()`` at the deadline.
        case armDelayedTimer(NIODeadline)
        /// Call ``reconnectTimerFired()`` at the deadline.
        case armReconnectTimer(NIODeadline)
        /// Everything is drained and closed after a shutdown.
        case shutdownComplete
        /// §6.10: APNs answered `ExpiredProviderToken` on `connection`, which was using
        /// `rejected`: refresh the provider's token (the connection is replaced anyway).
        case refreshToken(connection: Int, rejected: APNSProviderToken?)
        /// Log that connection `id` failed before it got ready, the `failures`-th in a row.
        case logConnectFailure(id: Int, reason: String, failures: Int)
        /// Log that the server on connection `id` answered what the client cannot fully use.
        case logPeerError(id: Int, message: String)

        /// The work of a ``work(id:_:)``; `nil` for every other action.
        var work: Work? {
            if case .work(_, let work) = self { work } else { nil }
        }
    }
}

extension HTTP2PoolStateMachine {
    /// A stream limit the server advertised, within 0 and the configured most per connection.
    func clampLimit(_ limit: Int) -> Int { max(0, min(limit, configuration.maxStreamsPerConnection)) }
}
