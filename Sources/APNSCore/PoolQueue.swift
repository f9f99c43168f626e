import DequeModule

/// A notification as a connection pool holds it while it waits for a connection.
package protocol APNSQueuedNotification: Sendable {
    /// When it goes stale, in milliseconds since the epoch (``APNSSubmission/Content/staleAt``).
    var staleAt: Int64? { get }
    /// An earlier attempt may have delivered it.
    var possibleDuplicate: Bool { get }
    /// Written before every notification that is not (``APNSSubmission/Content/urgent``).
    var urgent: Bool { get }
    /// Its submission's tag and token (``APNSSubmission``).
    var tag: UInt64 { get }
    var token: DeviceToken { get }
    /// How often it was written to a connection.
    var attempts: Int { get }
    /// When it was last written (``APNSDeliveryOutcome/writtenAt``).
    var writtenAt: UInt64? { get }
    /// Its outcome as a failure with `status` and `message`.
    func failure(_ status: APNSStatus, message: String) -> APNSDeliveryOutcome
}

extension APNSQueuedNotification {
    /// Not urgent, unless the type says otherwise.
    package var urgent: Bool { false }

    /// Its outcome now, with what every transport reports: transmitted when `status` is `nil`.
    package func baseOutcome(status: APNSStatus?, message: String?) -> APNSDeliveryOutcome {
        var outcome = APNSDeliveryOutcome(
            tag: tag,
            token: token,
            status: status,
            message: message,
            attempts: attempts,
            possibleDuplicate: possibleDuplicate
        )
        outcome.writtenAt = writtenAt
        return outcome
    }

    /// True when it has a stale time and `now` (milliseconds since the epoch) has reached it.
    @inlinable
    package func isStale(at now: Int64) -> Bool {
        guard let staleAt else { return false }
        return staleAt <= now
    }

    /// Its outcome when it went stale while `peer` could not be reached: ``APNSStatus/expired``
    /// and "not sent", or ``APNSStatus/indeterminate`` with `duplicateNote` when an earlier
    /// attempt may have delivered it.
    package func staleFailure(peer: String, duplicateNote: String) -> APNSDeliveryOutcome {
        let stale = "went stale while \(peer) was unreachable"
        if possibleDuplicate { return failure(.indeterminate, message: "\(stale); \(duplicateNote)") }
        return failure(.expired, message: "\(stale); not sent")
    }
}

/// The notifications a connection pool holds for its next connection with room, in order: new
/// ones join at the back, ones to write again go back to the front; urgent ones
/// (``APNSQueuedNotification/urgent``) come before all the others, in their own order.
///
/// Every method is inlinable so that a pool's per-notification work (an append, a pop) is
/// specialised for its element and stays a `Deque` operation.
package struct APNSPoolQueue<Element: APNSQueuedNotification>: Sequence, Sendable {
    @usableFromInline
    var urgent = Deque<Element>()
    @usableFromInline
    var items = Deque<Element>()

    @inlinable
    package init() {}

    @inlinable
    package var count: Int { urgent.count + items.count }

    @inlinable
    package var isEmpty: Bool { urgent.isEmpty && items.isEmpty }

    /// The next notification to write.
    @inlinable
    package var first: Element? { urgent.first ?? items.first }

    @inlinable
    package func makeIterator() -> Array<Element>.Iterator { (Array(urgent) + Array(items)).makeIterator() }

    @inlinable
    package mutating func append(_ item: Element) {
        if item.urgent { urgent.append(item) } else { items.append(item) }
    }

    @inlinable
    package mutating func append(contentsOf newItems: some Collection<Element>) {
        // Most batches hold no urgent notification: appended at once.
        if newItems.contains(where: \.urgent) {
            for item in newItems { append(item) }
        } else {
            items.append(contentsOf: newItems)
        }
    }

    /// Puts a notification back in front of all the others of its kind.
    @inlinable
    package mutating func prepend(_ item: Element) {
        if item.urgent { urgent.prepend(item) } else { items.prepend(item) }
    }

    @inlinable
    package mutating func popFirst() -> Element? { urgent.popFirst() ?? items.popFirst() }

    @inlinable
    @discardableResult
    package mutating func removeFirst() -> Element { urgent.isEmpty ? items.removeFirst() : urgent.removeFirst() }

    /// True when some notification has a stale time, so that ``failStale(now:peer:duplicateNote:into:)``
    /// has something to look at.
    @inlinable
    package var mayHoldStale: Bool { urgent.contains { $0.staleAt != nil } || items.contains { $0.staleAt != nil } }

    /// Fails the notifications that are stale at `now` (milliseconds since the epoch), in order,
    /// with ``APNSQueuedNotification/staleFailure(peer:duplicateNote:)``; the others keep their
    /// order.
    package mutating func failStale(now: Int64, peer: String, duplicateNote: String, into events: inout APNSEventBuffer)
    {
        for item in urgent where item.isStale(at: now) {
            events.append(outcome: .transmissionError(item.staleFailure(peer: peer, duplicateNote: duplicateNote)))
        }
        for item in items where item.isStale(at: now) {
            events.append(outcome: .transmissionError(item.staleFailure(peer: peer, duplicateNote: duplicateNote)))
        }
        urgent.removeAll { $0.isStale(at: now) }
        items.removeAll { $0.isStale(at: now) }
    }
}
