import Synchronization

/// Whether this worker's liveness key may have expired while it held claims.
///
/// Another worker takes over a claim whose owner's liveness key is gone (`w:#<claim id>`), and
/// sends it again marked `possibleDuplicate`. A worker cut off from Redis for longer than the
/// key's TTL cannot know whether that happened; when it reaches Redis again it still holds its
/// notifications, sends those it queued and records their outcomes. Its own results of them
/// must then say `possibleDuplicate` too: a reader that keeps a notification's first result
/// would otherwise see one without the flag while Apple accepted it twice
/// (`docs/delivery.md#when-one-worker-is-partitioned`).
///
/// The key is alive until at least `ttl` after a heartbeat that succeeded was sent. A *lapse* is
/// a time after that without a newer heartbeat that succeeded. A claim takes a ``mark()``
/// before its round trip; its result is flagged when a lapse began since (``mayHaveLapsed(since:at:)``).
final class LivenessWatch: Sendable {
    private struct State {
        /// When the newest heartbeat that succeeded was sent; `nil` before the first.
        var renewedAt: ContinuousClock.Instant?
        /// Lapses that ended (a heartbeat succeeded `ttl` or more after the one before it).
        var lapses: UInt32 = 0
    }

    private let state = Mutex(State())
    let ttl: Duration

    init(ttl: Duration) {
        self.ttl = ttl
    }

    /// A heartbeat sent at `sentAt` succeeded (its reply came at `now`): the key lives until at
    /// least `sentAt + ttl`. A lapse ends when the one before it may have expired by then.
    func renewed(sentAt: ContinuousClock.Instant, at now: ContinuousClock.Instant = .now) {
        state.withLock { s in
            if let renewedAt = s.renewedAt, now >= renewedAt + ttl { s.lapses &+= 1 }
            if s.renewedAt.map({ sentAt > $0 }) ?? true { s.renewedAt = sentAt }
        }
    }

    /// Taken before a claim's round trip: what ``mayHaveLapsed(since:at:)`` compares with.
    func mark() -> UInt32 {
        state.withLock { $0.lapses }
    }

    /// Whether the key may have expired since `mark` was taken: a lapse ended since, or one is
    /// under way at `now`.
    func mayHaveLapsed(since mark: UInt32, at now: ContinuousClock.Instant = .now) -> Bool {
        let s = snapshot(at: now)
        return s.ongoing || s.lapses != mark
    }

    /// The lapses that ended, and whether one is under way at `now`: a claim's mark lapsed when
    /// one is under way or it differs from `lapses`.
    func snapshot(at now: ContinuousClock.Instant = .now) -> (lapses: UInt32, ongoing: Bool) {
        state.withLock { s in
            (s.lapses, s.renewedAt.map { now >= $0 + ttl } ?? false)
        }
    }
}
