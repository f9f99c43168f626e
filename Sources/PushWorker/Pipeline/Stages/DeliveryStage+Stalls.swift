import APNSCore

// Pools that cannot take notifications (`docs/delivery.md`, "A slow app"): unreachable ones
// report themselves; stalled ones are judged here, once a second, from their snapshots.
extension DeliveryStage {
    /// Observes every open pool and judges which are stalled (``PoolStallJudge``); a pool that
    /// becomes blocked (stalled or unreachable) or unblocked is signalled to the claim stage as
    /// `unavailable` or `available`.
    func judgeStalls(at now: ContinuousClock.Instant = .now) {
        let open = state.withLock { s in s.stopping ? [] : s.pools.map { ($0.key, $0.value) } }
        let observed = open.map { key, client in (key, client.snapshot()) }
        let changes = state.withLock { s -> [(key: PoolKey, stalled: Bool, held: Int)] in
            var changes: [(key: PoolKey, stalled: Bool, held: Int)] = []
            for (key, snapshot) in observed {
                let wasStalled = s.judge.stalled.contains(key)
                let sample = PoolStallJudge.Sample(
                    at: now,
                    writes: snapshot.writes,
                    outcomes: s.outcomes[key] ?? 0,
                    held: snapshot.admitted,
                    queued: snapshot.queued
                )
                let stalled = s.judge.observe(key, sample)
                if stalled != wasStalled { changes.append((key, stalled, snapshot.admitted)) }
            }
            return changes
        }
        for change in changes {
            let key = change.key
            let blockedChanged = ledger.update { $0.poolStalled(key, change.stalled) }
            if change.stalled {
                logger.warning(
                    "Gateway too slow: this app's new notifications wait until it catches up; other apps go on",
                    metadata: ["app": "\(key.app)", "env": "\(key.environmentName)", "held": "\(change.held)"]
                )
            } else {
                logger.notice(
                    "Gateway caught up: this app's notifications go to it again",
                    metadata: ["app": "\(key.app)", "env": "\(key.environmentName)", "held": "\(change.held)"]
                )
            }
            if blockedChanged { claimSignals.yield(change.stalled ? .unavailable(key) : .available(key)) }
        }
    }

    /// Notifications held by pools that cannot deliver them now (unreachable or stalled): they
    /// do not count against `maxInFlight` (``PipelineLedger/setStuck(_:)``).
    func heldByBlockedPools() -> Int {
        let blocked = ledger.read { $0.waiting.blockedPools }
        guard !blocked.isEmpty else { return 0 }
        let pools = state.withLock { s in s.pools.filter { blocked.contains($0.key) }.map(\.value) }
        return pools.reduce(0) { $0 + $1.snapshot().admitted }
    }

    /// The pools that cannot take notifications now, each `unreachable` or `stalled`.
    func conditions() -> [PoolKey: String] {
        ledger.read { $0.waiting.conditions }
    }

    /// Whether the pool of `key` cannot take notifications now: unreachable, or stalled.
    func isBlocked(_ key: PoolKey) -> Bool { ledger.read { $0.waiting.isBlocked(key) } }

    /// How many more notifications the pool of `key` takes before `send` waits for room
    /// (unbounded without a pool yet).
    func room(for key: PoolKey) -> Int {
        guard let client = state.withLock({ $0.pools[key] }) else { return .max }
        let snapshot = client.snapshot()
        return max(0, snapshot.maxPending - snapshot.admitted)
    }
}
