import APNSCore

/// The queue's stale requests (``QueuedRequest/staleAt``, a job's `staleAfter`).
extension HTTP2PoolStateMachine {
    /// Up to `count` requests from the front of the queue for a connection to write; one past its
    /// `staleAt` when its turn comes is failed as `expired` instead (the clock is read once, and
    /// only when a request has one), and a Live Activity update a newer one replaced is
    /// answered `superseded`.
    mutating func takeRequests(_ count: Int) -> [QueuedRequest] {
        var taken: [QueuedRequest] = []
        taken.reserveCapacity(count)
        var now: Int64? = nil
        while taken.count < count, let request = queue.popFirst() {
            // A Live Activity update's ticket is looked at once, at its first turn: one written
            // before may have been delivered, and is finished as it would be.
            if !tickets.isEmpty, let ticket = tickets.removeValue(forKey: request.tag), request.writes == 0,
                let job = ticket.replacement
            {
                events.append(outcome: .transmissionError(request.supersededFailure(by: job)))
                continue
            }
            if let staleAt = request.staleAt {
                let current = now ?? configuration.now()
                now = current
                if staleAt <= current {
                    events.append(
                        outcome: .transmissionError(
                            request.staleFailure(peer: "the server", duplicateNote: Self.duplicateNote)
                        )
                    )
                    continue
                }
            }
            taken.append(request)
        }
        // Every ticket belongs to a request still queued: none is left once the queue is empty.
        if queue.isEmpty && !tickets.isEmpty { tickets.removeAll() }
        return taken
    }

    /// While no connection is open: fails the queued and delayed requests whose `staleAt` has
    /// passed.
    mutating func failStale() {
        guard queue.mayHoldStale || delayed.contains(where: { $0.request.staleAt != nil }) else { return }
        let now = configuration.now()
        queue.failStale(now: now, peer: "the server", duplicateNote: Self.duplicateNote, into: &events)
        for item in delayed where item.request.isStale(at: now) {
            events.append(
                outcome: .transmissionError(
                    item.request.staleFailure(peer: "the server", duplicateNote: Self.duplicateNote)
                )
            )
        }
        delayed.removeAll { $0.request.isStale(at: now) }
        if queue.isEmpty { tickets.removeAll() }
    }

    /// Why a request that was written before may have been delivered.
    static let duplicateNote = "an earlier attempt was left unanswered, so the server may have it"

}
