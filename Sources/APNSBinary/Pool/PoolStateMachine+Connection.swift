import APNSCore
import DequeModule
import NIOCore

extension PoolStateMachine {
    enum Phase: Equatable {
        /// Waiting for a back-off delay before connecting.
        case scheduled
        case connecting
        case ready
        /// An error response arrived; the cache has been settled and the connection is closing.
        case failed
        /// Closed by the client (idle, shutdown).
        case closing
    }

    struct CacheEntry {
        var identifier: UInt32
        /// `nil` marks the deliberately invalid probe written at shutdown (§6.3).
        var pending: PendingNotification?
        /// When the frame was handed to the kernel; `.distantFuture` until the write completes.
        var sentAt: NIODeadline
        var bytes: Int
    }

    struct Connection {
        let id: Int
        var phase: Phase
        var cache = Deque<CacheEntry>()
        var cacheBytes = 0
        var nextIdentifier: UInt32 = 1
        var pumpScheduled = false
        var writable = true
        /// True once a notification written on it was confirmed (by time or by an error response).
        var productive = false
        var probeSent = false
        var timerArmed = false
        /// Why the client is closing it, once the client has decided to (or the error packet that
        /// ends it arrived); `nil` while nobody has.
        var closeReason: APNSPoolSnapshot.CloseReason?

        /// Position of `identifier` in the cache. Identifiers are consecutive (mod 2³²) from the
        /// front of the cache because entries are only ever removed from the front or all at once.
        func index(of identifier: UInt32) -> Int? {
            guard let first = cache.first else { return nil }
            let offset = Int(identifier &- first.identifier)
            guard offset < cache.count, cache[offset].identifier == identifier else { return nil }
            return offset
        }
    }
}

extension PoolStateMachine {
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

extension PoolStateMachine {
    enum Action: Equatable {
        /// Open connection `id`; wait `delay` first when it is not zero.
        case connect(id: Int, delay: TimeAmount)
        /// Run the write pump of connection `id` on its event loop.
        case schedulePump(id: Int)
        /// Close connection `id`.
        case close(id: Int)
        /// Call ``PoolStateMachine/timerFired(id:now:)`` for connection `id` at `deadline`.
        case armTimer(id: Int, deadline: NIODeadline)
        /// Everything is drained and closed after a shutdown.
        case shutdownComplete
    }
}
