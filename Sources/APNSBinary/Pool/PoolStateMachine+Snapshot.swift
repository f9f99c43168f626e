import APNSCore

extension PoolStateMachine {
    /// The pool now: ``counters`` with the gauges filled in. Its cost grows with the number of
    /// connections, not with what they hold (except during a shutdown, when the probes are
    /// left out of ``APNSPoolSnapshot/cachedNotifications``).
    func snapshot() -> APNSPoolSnapshot {
        var snapshot = counters
        var cached = 0
        var bytes = 0
        for c in connections.values {
            switch c.phase {
            case .scheduled: snapshot.backingOff += 1
            case .connecting: snapshot.connecting += 1
            case .ready, .failed, .closing: snapshot.open += 1
            }
            cached += c.cache.count
            if c.probeSent { cached -= c.cache.reduce(0) { $1.pending == nil ? $0 + 1 : $0 } }
            bytes += c.cacheBytes
        }
        snapshot.cachedNotifications = cached
        snapshot.cachedBytes = bytes
        snapshot.queued = queue.count
        return snapshot
    }
}
