import APNSCore

extension BinaryPoolStateMachine {
    /// The pool now: ``counters`` with the gauges filled in. Its cost grows with the number of
    /// connections, not with what they hold (except during a shutdown, when the probes are
    /// left out of ``APNSPoolSnapshot/cachedNotifications``).
    func snapshot() -> APNSPoolSnapshot {
        var snapshot = counters
        var cached = 0
        var bytes = 0
        for c in connections.values {
            cached += c.cache.count
            switch c.state {
            case .scheduled: snapshot.backingOff += 1
            case .connecting: snapshot.connecting += 1
            case .ready(let ready):
                snapshot.open += 1
                if ready.probeSent { cached -= c.cache.reduce(0) { $1.pending == nil ? $0 + 1 : $0 } }
            case .failed, .closing: snapshot.open += 1
            }
            bytes += c.cacheBytes
        }
        snapshot.cachedNotifications = cached
        snapshot.cachedBytes = bytes
        snapshot.queued = queue.count
        return snapshot
    }
}

extension BinaryPoolStateMachine {
    /// Reports `item` accepted by the gateway.
    mutating func emitTransmitted(_ item: PendingNotification) {
        events.append(outcome: .transmitted(item.outcome(status: nil, message: nil)))
    }

    /// Reports `item` not accepted, with its status and why.
    mutating func emitFailure(_ item: PendingNotification, status: APNSStatus, message: String?) {
        events.append(outcome: .transmissionError(item.outcome(status: status, message: message)))
    }

    /// Reports a connection-level event; `force` keeps it even when the buffer of those is full.
    mutating func emitConnectionEvent(_ event: APNSDeliveryEvent, force: Bool = false) {
        events.append(connectionEvent: event, force: force)
    }
}
