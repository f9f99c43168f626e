import APNSCore
import DequeModule
import NIOCore

extension BinaryPoolStateMachine {
    /// Where a connection is in its life, with what only that stage has.
    ///
    /// Its moves: `scheduled → connecting → ready`, then `ready → closing` (the client closes it)
    /// or `ready/closing → failed` (an error response); a connection leaves the table when its
    /// channel closes. Any other move is a bug in the pool, and stops a debug build.
    enum State: Equatable {
        /// Waiting for a back-off delay before connecting.
        case scheduled
        /// TCP and the TLS handshake.
        case connecting
        /// Open: takes notifications while writable.
        case ready(Ready)
        /// Closed by the client, for this reason (the idle timeout or a shutdown); it takes no
        /// notifications, and what it carries is confirmed by time until it is gone.
        case closing(APNSPoolSnapshot.CloseReason)
        /// An error response arrived: the cache has been settled and the connection is closing.
        /// `.shutdown` when the response answered the shutdown probe, `.errorResponse` otherwise.
        case failed(APNSPoolSnapshot.CloseReason)

        /// Counts toward the connections the pool wants (it is neither closing nor failed).
        var isLive: Bool {
            switch self {
            case .scheduled, .connecting, .ready: true
            case .closing, .failed: false
            }
        }

        /// Not yet open: waiting out a back-off or connecting.
        var isOpening: Bool { self == .scheduled || self == .connecting }

        /// Its channel is up and its cache is confirmed by time: ready, or closed by the client.
        var isOpen: Bool {
            switch self {
            case .ready, .closing: true
            case .scheduled, .connecting, .failed: false
            }
        }

        var isReady: Bool {
            if case .ready = self { true } else { false }
        }
    }

    /// What an open connection keeps besides its cache.
    struct Ready: Equatable {
        /// The channel takes writes (below its high-water mark).
        var writable = true
        /// A pump is scheduled on its event loop.
        var pumpScheduled = false
        /// A notification written on it was confirmed, by time or by an error response.
        var productive = false
        /// The deliberately invalid probe was written on it (§6.3).
        var probeSent = false
    }

    struct CacheEntry {
        var identifier: UInt32
        /// `nil` marks the deliberately invalid probe written at shutdown (§6.3).
        var pending: PendingNotification?
        /// When the frame was handed to the kernel; `.distantFuture` until the write completes.
        var sentAt: NIODeadline
        var bytes: Int
    }

    /// One frame for a connection's pump to write: a notification with its identifier, or the
    /// shutdown probe (`notification == nil`).
    @usableFromInline package struct Frame: Equatable, Sendable {
        var identifier: UInt32
        var notification: PendingNotification?
    }

    struct Connection {
        let id: Int
        var state: State
        /// Every frame written and not yet confirmed, oldest first; kept across states until
        /// an error response settles it or the channel closes.
        var cache = Deque<CacheEntry>()
        var cacheBytes = 0
        var nextIdentifier: UInt32 = 1
        /// A confirmation timer is scheduled.
        var timerArmed = false

        /// Position of `identifier` in the cache. Identifiers are consecutive (mod 2³²) from the
        /// front of the cache because entries are only ever removed from the front or all at once.
        func index(of identifier: UInt32) -> Int? {
            guard let first = cache.first else { return nil }
            let offset = Int(identifier &- first.identifier)
            guard offset < cache.count, cache[offset].identifier == identifier else { return nil }
            return offset
        }

        /// Changes what the open connection keeps; nothing when it is not open.
        mutating func whenReady(_ change: (inout Ready) -> Void) {
            guard case .ready(var ready) = state else { return }
            change(&ready)
            state = .ready(ready)
        }
    }
}

extension BinaryPoolStateMachine {
    struct Configuration {
        var maxConnections = 1
        var minConnections = 0
        var cacheMaxCount = 50_000
        var cacheMaxBytes = 32 << 20
        var batchMaxCount = 256
        var batchMaxBytes = 64 << 10
        var confirmationWindow = TimeAmount.seconds(1)
        var resendOnUnknown = true
        /// Failures in a row after which queued notifications fail; `nil`: they wait.
        var connectionRetryLimit: Int? = 10
        var reconnectBaseDelay: Duration = .milliseconds(100)
        var reconnectMaxDelay: Duration = .seconds(5)
        /// Delays a reconnect with jitter (as the HTTP/2 pool's machine does).
        var jitter: @Sendable (Duration) -> Duration = APNSReconnectBackoff.jittered
        /// Wall-clock milliseconds since the epoch, for stale notifications.
        var now: @Sendable () -> Int64 = UnixTime.nowMilliseconds
        /// Connection-level events (not outcomes) kept for the consumer before new ones are dropped.
        var maxBufferedConnectionEvents = 1024
    }
}

extension BinaryPoolStateMachine {
    /// What the client does after a step, in order, once it has released its lock.
    @usableFromInline package enum Action: Equatable, Sendable {
        /// Open connection `id`; wait `delay` first when it is not zero, then ask
        /// ``BinaryPoolStateMachine/backoffElapsed(id:)`` whether it is still wanted.
        case connect(id: Int, delay: TimeAmount)
        /// Run the write pump of connection `id` on its event loop.
        case schedulePump(id: Int)
        /// Write these frames on connection `id` (the pump's answer, on the connection's event
        /// loop), then report them with ``BinaryPoolStateMachine/written(id:through:now:)``.
        case write(id: Int, frames: [Frame])
        /// Close connection `id`.
        case close(id: Int)
        /// Call ``BinaryPoolStateMachine/timerFired(id:now:)`` for connection `id` at `deadline`.
        case armTimer(id: Int, deadline: NIODeadline)
        /// Everything is drained and closed after a shutdown.
        case shutdownComplete

        /// The frames of a ``write(id:frames:)``; `nil` for every other action.
        var frames: [Frame]? {
            if case .write(_, let frames) = self { frames } else { nil }
        }
    }
}
