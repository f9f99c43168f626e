import PushKafka

/// The notifications that wait in the worker without a claim, and the pools that cannot take
/// notifications now: a part of the ``PipelineLedger``, so that one lock orders a notification's
/// parking against its pool's coming back, and the parked count is the lists' own.
///
/// - *Held* notifications are claimed again after a delay: another live worker holds them,
///   their app is over its rate, or Redis does not answer.
/// - *Parked* notifications wait, unclaimed, for a *blocked* pool: one that cannot reach its
///   gateway (*unreachable*, as the pool reports it) or is too slow for what it holds
///   (*stalled*, as the delivery stage judges it, ``PoolStallJudge``).
/// - Parked notifications *moving aside* have left their pool's list for the parked topic; they
///   count as parked until they are written there, or come back.
struct WaitingNotifications: Sendable {
    struct Held: Sendable {
        var due: ContinuousClock.Instant
        var candidate: Candidate
    }

    private(set) var held: [Held] = []
    /// By pool, in the order they came; no empty lists.
    private(set) var parked: [PoolKey: [Candidate]] = [:]
    /// The parked notifications, with those moving aside.
    private(set) var parkedCount = 0
    private(set) var unreachable: Set<PoolKey> = []
    private(set) var stalled: Set<PoolKey> = []
    /// Notifications moved aside, by pool, since the worker started.
    private(set) var movedAside: [PoolKey: Int] = [:]

    // MARK: Blocked pools

    /// Whether the pool of `key` cannot take notifications now: unreachable, or stalled.
    func isBlocked(_ key: PoolKey) -> Bool { unreachable.contains(key) || stalled.contains(key) }

    /// Whether any pool is blocked.
    var hasBlocked: Bool { !unreachable.isEmpty || !stalled.isEmpty }

    /// The pools that cannot take notifications now.
    var blockedPools: Set<PoolKey> { unreachable.union(stalled) }

    /// The blocked pools, each `unreachable` or `stalled` (unreachable when both).
    var conditions: [PoolKey: String] {
        var conditions: [PoolKey: String] = [:]
        for key in stalled { conditions[key] = "stalled" }
        for key in unreachable { conditions[key] = "unreachable" }
        return conditions
    }

    /// The pool of `key` reports whether it reaches its gateway. Returns whether that blocked
    /// or unblocked it.
    mutating func setUnreachable(_ key: PoolKey, _ isUnreachable: Bool) -> Bool {
        let wasBlocked = isBlocked(key)
        if isUnreachable { unreachable.insert(key) } else { unreachable.remove(key) }
        return wasBlocked != isBlocked(key)
    }

    /// The pool of `key` is judged stalled, or not. Returns whether that blocked or unblocked it.
    mutating func setStalled(_ key: PoolKey, _ isStalled: Bool) -> Bool {
        let wasBlocked = isBlocked(key)
        if isStalled { stalled.insert(key) } else { stalled.remove(key) }
        return wasBlocked != isBlocked(key)
    }

    /// The pool of `key` was replaced: the old one's conditions are not the new one's. Returns
    /// whether it was blocked.
    mutating func forgetConditions(of key: PoolKey) -> Bool {
        let wasBlocked = isBlocked(key)
        unreachable.remove(key)
        stalled.remove(key)
        return wasBlocked
    }

    // MARK: Held

    mutating func hold(_ candidates: [Candidate], until due: ContinuousClock.Instant) {
        held += candidates.map { Held(due: due, candidate: $0) }
    }

    /// Takes the held notifications due at `now`.
    mutating func takeDue(at now: ContinuousClock.Instant) -> [Candidate] {
        guard !held.isEmpty else { return [] }
        let due = held.filter { $0.due <= now }.map(\.candidate)
        held.removeAll { $0.due <= now }
        return due
    }

    // MARK: Parked

    /// Parks the notifications of `ready` whose pool is blocked, and returns how many. A dry
    /// run writes nothing to the gateway and need not wait for it; a job stale at `now` is
    /// claimed to be answered `expired` at once.
    mutating func park(from ready: inout [Candidate], freshAt now: Int64) -> Int {
        guard hasBlocked else { return 0 }
        let before = ready.count
        ready.removeAll { c in
            guard !c.job.dryRun, isBlocked(c.poolKey), c.job.content.staleAt.map({ $0 > now }) ?? true else {
                return false
            }
            parked[c.poolKey, default: []].append(c)
            return true
        }
        parkedCount += before - ready.count
        return before - ready.count
    }

    /// Takes, in order, up to `room` of the notifications parked for the pool of `key`, unless
    /// it is blocked.
    mutating func unpark(_ key: PoolKey, room: Int) -> [Candidate] {
        guard !isBlocked(key), room > 0, let list = parked[key] else { return [] }
        let taken: [Candidate]
        if list.count > room {
            parked[key] = Array(list.dropFirst(room))
            taken = Array(list.prefix(room))
        } else {
            parked[key] = nil
            taken = list
        }
        parkedCount -= taken.count
        return taken
    }

    /// Takes the parked notifications that `match`.
    mutating func unpark(where match: (Candidate) -> Bool) -> [Candidate] {
        guard !parked.isEmpty else { return [] }
        var out: [Candidate] = []
        for (key, list) in parked {
            let taken = list.filter(match)
            guard !taken.isEmpty else { continue }
            let left = list.filter { !match($0) }
            parked[key] = left.isEmpty ? nil : left
            out += taken
        }
        parkedCount -= out.count
        return out
    }

    /// The pools that have parked notifications and take notifications again.
    var unblockedWithParked: [PoolKey] { parked.keys.filter { !isBlocked($0) } }

    // MARK: Moving aside

    /// Takes the parked lists of pools with `after` or more notifications, to move them aside;
    /// they still count as parked.
    mutating func takeForMovingAside(after: Int) -> [(PoolKey, [Candidate])] {
        var taken: [(PoolKey, [Candidate])] = []
        for (key, list) in parked where list.count >= after {
            taken.append((key, list))
            parked[key] = nil
        }
        return taken
    }

    /// Notifications taken to move aside that wait here again, ahead of those parked since.
    mutating func parkAgain(_ candidates: [Candidate], for key: PoolKey) {
        guard !candidates.isEmpty else { return }
        parked[key, default: []].insert(contentsOf: candidates, at: 0)
    }

    /// `count` notifications of the pool of `key` were written to the parked topic.
    mutating func movedAside(_ count: Int, of key: PoolKey) {
        parkedCount -= count
        movedAside[key, default: 0] += count
    }

    // MARK: Revocation and shutdown

    /// Takes the held and the parked notifications of the partitions that `match`.
    mutating func take(where match: (TopicPartition) -> Bool) -> (held: [Candidate], parked: [Candidate]) {
        let held = held.filter { match($0.candidate.ref.partition) }.map(\.candidate)
        if !held.isEmpty { self.held.removeAll { match($0.candidate.ref.partition) } }
        return (held, unpark { match($0.ref.partition) })
    }
}
