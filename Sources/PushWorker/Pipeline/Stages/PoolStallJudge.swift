/// Which delivery pools are *stalled*: they hold many notifications and will not deliver them
/// soon — a gateway that answers slowly, accepts connections and never answers, or answers
/// `429` to everything. A stalled pool is treated as an unreachable one: it gets no more
/// notifications (they park, and move aside), and what it holds stops counting against
/// `maxInFlight`, so that the other apps go on (`docs/delivery.md`, "A slow app").
///
/// Each pool is observed about once a second. It is stalled while either holds:
/// - **backed up**: at least ``least`` notifications wait to be written, and at the pace it
///   wrote since the previous observation emptying that queue would take more than ``window``;
/// - **slow to finish**: it held at least ``least`` notifications ``window`` ago and holds as
///   many now, and fewer of them got an outcome since than it held then.
///
/// A pool that is merely busy empties its queue in well under ``window`` (a binary pool at
/// 60,000/s holds a second's worth; an HTTP/2 pool at 10,000/s two seconds' worth of the
/// default budget), and a pool that holds fewer than ``least`` notifications is never stalled.
struct PoolStallJudge: Sendable {
    /// One observation of one pool.
    struct Sample: Sendable, Equatable {
        var at: ContinuousClock.Instant
        /// The pool's ``APNSPoolSnapshot/writes``: notifications written (HTTP/2: answered).
        var writes: Int
        /// Outcomes the pool delivered, since it was made.
        var outcomes: Int
        /// Notifications admitted and without an outcome yet.
        var held: Int
        /// Of those, the ones waiting to be written.
        var queued: Int
    }

    /// The fewest notifications a pool holds (or queues) to be judged stalled.
    let least: Int
    /// How long a pool may need to empty its queue, or to finish what it held, before it is
    /// stalled.
    let window: Duration

    private var samples: [PoolKey: [Sample]] = [:]
    private(set) var stalled: Set<PoolKey> = []

    init(least: Int, window: Duration = .seconds(5)) {
        self.least = max(1, least)
        self.window = window
    }

    /// The bound for a worker with `maxInFlight`: a twentieth of it, at least 100.
    static func least(forMaxInFlight maxInFlight: Int) -> Int { max(100, maxInFlight / 20) }

    /// Records an observation of the pool of `key` and judges it; returns whether it is stalled.
    mutating func observe(_ key: PoolKey, _ sample: Sample) -> Bool {
        var history = samples[key] ?? []
        // Counters that went back belong to a pool that replaced this one: start again.
        if let last = history.last, sample.writes < last.writes || sample.outcomes < last.outcomes {
            history = []
        }
        let isStalled = Self.judge(sample, after: history, least: least, window: window)
        history.append(sample)
        // Keep what the next judgement reads: the samples within the window, and the newest
        // one older than it.
        if let newestOld = history.lastIndex(where: { sample.at - $0.at >= window }), newestOld > 0 {
            history.removeFirst(newestOld)
        }
        samples[key] = history
        if isStalled { stalled.insert(key) } else { stalled.remove(key) }
        return isStalled
    }

    /// Forgets a pool (shut down).
    mutating func forget(_ key: PoolKey) {
        samples[key] = nil
        stalled.remove(key)
    }

    /// Whether a pool observed as `now`, after the observations `history` (oldest first), is
    /// stalled; no state.
    static func judge(_ now: Sample, after history: [Sample], least: Int, window: Duration) -> Bool {
        guard let previous = history.last, now.at > previous.at else { return false }
        if now.queued >= least {
            let elapsed = now.at - previous.at
            let written = Double(now.writes - previous.writes)
            // Written at this pace, the queue takes longer than the window to empty.
            if written * (window / elapsed) < Double(now.queued) { return true }
        }
        if now.held >= least, let then = history.last(where: { now.at - $0.at >= window }), then.held >= least,
            now.outcomes - then.outcomes < then.held
        {
            return true
        }
        return false
    }
}
