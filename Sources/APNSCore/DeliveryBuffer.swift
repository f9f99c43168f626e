// What the binary and the HTTP/2 clients share between their callers and their pools: the
// events waiting for the consumer, and the admission of notifications (backpressure).

import DequeModule
import Synchronization

/// The events of a delivery client waiting for its consumer, oldest first.
///
/// Outcomes are always kept: there is one per notification, and admission bounds them.
/// Connection-level events are kept up to ``maxConnectionEvents``; more are counted in
/// ``droppedConnectionEvents`` and dropped, unless they are forced (the ones a consumer must
/// not miss, such as ``APNSDeliveryEvent/unavailable(reason:)``).
@usableFromInline package struct APNSEventBuffer: Sequence, Sendable {
    private var events = Deque<APNSDeliveryEvent>()
    /// Connection-level events kept at most before new ones are dropped.
    package let maxConnectionEvents: Int
    private var connectionEvents = 0
    package private(set) var droppedConnectionEvents = 0
    /// Set once the client has shut down: with the buffer empty, the consumer's sequence ends.
    package private(set) var isFinished = false

    package init(maxConnectionEvents: Int) {
        self.maxConnectionEvents = maxConnectionEvents
    }

    package var isEmpty: Bool { events.isEmpty }
    package var count: Int { events.count }
    @usableFromInline package func makeIterator() -> Deque<APNSDeliveryEvent>.Iterator { events.makeIterator() }

    /// Adds the outcome of one notification.
    package mutating func append(outcome event: APNSDeliveryEvent) {
        events.append(event)
    }

    /// Adds a connection-level event, or counts it as dropped when the buffer holds its
    /// maximum of them and the event is not `forced`.
    package mutating func append(connectionEvent event: APNSDeliveryEvent, force: Bool = false) {
        if !force && connectionEvents >= maxConnectionEvents {
            droppedConnectionEvents += 1
            return
        }
        connectionEvents += 1
        events.append(event)
    }

    /// Moves up to `max` events (at least one) into `taken`; returns how many were outcomes.
    package mutating func take(max: Int, into taken: inout [APNSDeliveryEvent]) -> Int {
        var outcomes = 0
        let limit = Swift.max(1, max)
        while taken.count < limit, let event = events.popFirst() {
            taken.append(event)
            if event.outcome == nil { connectionEvents -= 1 } else { outcomes += 1 }
        }
        return outcomes
    }

    /// Forgets every event (tests read the buffer of a state machine directly).
    package mutating func removeAll() {
        events.removeAll()
        connectionEvents = 0
    }

    /// The client has shut down; no event follows the ones in the buffer.
    package mutating func finish() {
        isFinished = true
    }
}

/// Admission: at most `maxPending` notifications in a client with outcomes not yet taken by
/// the consumer. A batch that does not fit waits, in order, until enough outcomes are taken;
/// a batch larger than the limit is admitted alone into an empty client.
///
/// It lives under the client's lock; the client enqueues the batches it admits
/// (``popAdmitted()``) and resumes the continuations it hands back
/// (``takeWakeups(events:into:)``) after releasing the lock.
@usableFromInline package struct APNSAdmission<Batch: Sendable>: Sendable {
    package struct Waiter: Sendable {
        package var id: Int
        package var batch: Batch
        package var count: Int
        package var continuation: CheckedContinuation<Void, any Error>
    }

    package let maxPending: Int
    package private(set) var admitted = 0
    /// Batches that had to wait for room, since the client was made.
    package private(set) var waits = 0
    private var waiters = Deque<Waiter>()
    /// Batches waiting for room.
    package var waiting: Int { waiters.count }
    /// Batches admitted and not yet handed to the pool.
    private var admittedBatches = Deque<Batch>()
    private var submittersToResume: [CheckedContinuation<Void, any Error>] = []
    /// The consumer, waiting for an event.
    private var eventWaiter: CheckedContinuation<Void, Never>?
    /// No batch is admitted any more.
    package private(set) var stopping = false

    /// Copies what admission counts into a client's snapshot.
    package func describe(into snapshot: inout APNSPoolSnapshot) {
        snapshot.backpressureWaits = waits
        snapshot.admitted = admitted
        snapshot.maxPending = maxPending
    }

    package init(maxPending: Int) {
        self.maxPending = maxPending
    }

    private func fits(_ count: Int) -> Bool {
        admitted + count <= maxPending || admitted == 0
    }

    /// Admits `batch` now if it fits and nobody waits before it, else queues it. Returns false
    /// (and keeps nothing) once the client is stopping.
    package mutating func admit(
        _ batch: Batch,
        count: Int,
        id: Int,
        continuation: CheckedContinuation<Void, any Error>
    ) -> Bool {
        guard !stopping else { return false }
        if waiters.isEmpty && fits(count) {
            admitted += count
            admittedBatches.append(batch)
            submittersToResume.append(continuation)
        } else {
            waits += 1
            waiters.append(Waiter(id: id, batch: batch, count: count, continuation: continuation))
        }
        return true
    }

    /// The consumer took `outcomes` outcomes: admits the waiting batches that now fit.
    package mutating func release(_ outcomes: Int) {
        admitted -= outcomes
        while let waiter = waiters.first, fits(waiter.count) {
            waiters.removeFirst()
            admitted += waiter.count
            admittedBatches.append(waiter.batch)
            submittersToResume.append(waiter.continuation)
        }
    }

    /// The next admitted batch for the pool.
    @usableFromInline package mutating func popAdmitted() -> Batch? {
        admittedBatches.popFirst()
    }

    /// Removes the waiter `id` (its task was cancelled).
    package mutating func cancel(id: Int) -> Waiter? {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return nil }
        return waiters.remove(at: index)
    }

    /// Stops admitting; returns the waiters, whose batches will never be admitted.
    package mutating func stop() -> [Waiter] {
        stopping = true
        defer { waiters.removeAll() }
        return Array(waiters)
    }

    /// Fails the callers whose batches were still waiting when admission stopped.
    package static func reject(_ waiters: [Waiter]) {
        for waiter in waiters {
            waiter.continuation.resume(
                throwing: APNSError(.shutDown, "the client shut down before these notifications were queued")
            )
        }
    }

    /// Registers the consumer unless `eventsReady`; returns true when it should not wait.
    package mutating func waitForEvents(_ continuation: CheckedContinuation<Void, Never>, eventsReady: Bool) -> Bool {
        if eventsReady { return true }
        eventWaiter = continuation
        return false
    }

    /// The consumer waiting for events, taken out: its task was cancelled.
    package mutating func cancelEventWait() -> CheckedContinuation<Void, Never>? {
        defer { eventWaiter = nil }
        return eventWaiter
    }

    /// Moves into `wakeups` what to resume once the lock is released: the consumer if `events`
    /// has something for it (an event, or the end), and the submitters whose batches were admitted.
    @usableFromInline package mutating func takeWakeups(events: APNSEventBuffer, into wakeups: inout APNSWakeups) {
        if !events.isEmpty || events.isFinished, let waiter = eventWaiter {
            eventWaiter = nil
            wakeups.consumer = waiter
        }
        if !submittersToResume.isEmpty {
            swap(&wakeups.submitters, &submittersToResume)
        }
    }
}

/// The tasks a client step makes ready, resumed after the client's lock is released.
@usableFromInline package struct APNSWakeups: Sendable {
    /// The consumer, waiting for an event.
    package var consumer: CheckedContinuation<Void, Never>?
    /// Callers of `send` whose notifications were admitted.
    package var submitters: [CheckedContinuation<Void, any Error>] = []
    /// Callers of `shutdown`, once it is complete.
    package var shutdown: [CheckedContinuation<Void, Never>] = []

    package init() {}

    @usableFromInline package func resume() {
        consumer?.resume()
        for continuation in submitters { continuation.resume() }
        for continuation in shutdown { continuation.resume() }
    }
}

private let waiterIDs = Atomic<Int>(0)

/// Notifications of one `send` call on their way to admission: the ones to send and the ones
/// rejected up front (each still gets its outcome).
@usableFromInline package struct APNSSubmissionBatch<Item: Sendable, Rejected: Sendable>: Sendable {
    package var items: [Item] = []
    package var rejected: [Rejected] = []
    /// The items' Live Activity tickets by tag (``APNSSubmission/activity``): few, kept beside
    /// the items rather than in each.
    package var tickets: [(tag: UInt64, ticket: APNSActivityTicket)] = []
    package var count: Int { items.count + rejected.count }

    package init() {}
}

/// A delivery client built on ``APNSEventBuffer`` and ``APNSAdmission``: this extension is
/// its side facing the callers (``admit(_:count:)``, ``takeEvents(max:)``), the same for
/// every transport.
@usableFromInline package protocol APNSBufferedDeliveryClient: APNSDeliveryClient {
    associatedtype Batch: Sendable
    /// Runs `body` under the client's lock with its event buffer and admission, hands the
    /// batches admitted meanwhile to the pool, then (outside the lock) carries out what the
    /// pool asks for and resumes the ``APNSWakeups``.
    func withBuffer(_ body: (inout APNSEventBuffer, inout APNSAdmission<Batch>) -> Void)
}

extension APNSBufferedDeliveryClient {
    /// Hands `batch` (`count` notifications) to the pool once it fits, waiting until then.
    package func admit(_ batch: Batch, count: Int) async throws {
        let id = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                var accepted = true
                withBuffer { _, admission in
                    accepted = admission.admit(batch, count: count, id: id, continuation: continuation)
                }
                if !accepted {
                    continuation.resume(
                        throwing: APNSError(.shutDown, "the client is shutting down and takes no new notifications")
                    )
                }
            }
        } onCancel: {
            var waiter: APNSAdmission<Batch>.Waiter? = nil
            withBuffer { _, admission in waiter = admission.cancel(id: id) }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Hands `batch` to ``admit(_:count:)`` and empties it. `send` admits in chunks, so that a
    /// large call neither waits for room for all of it nor holds the lock long.
    package func admit<Item, Rejected>(
        _ batch: inout APNSSubmissionBatch<Item, Rejected>
    ) async throws where Batch == APNSSubmissionBatch<Item, Rejected> {
        try await admit(batch, count: batch.count)
        batch.items.removeAll(keepingCapacity: true)
        batch.rejected.removeAll(keepingCapacity: true)
    }

    /// Takes up to `max` events in one lock, waiting for the first if there is none; `nil` once
    /// the client has shut down and every event was taken. With `cancellable`, also `nil` once
    /// the waiting task is cancelled (the events stay for the next call): the event sequence's
    /// way. The worker's readers are not: every event is an outcome whose result must be
    /// written, so they read until the pool is finished.
    package func takeEvents(max: Int, cancellable: Bool = false) async -> [APNSDeliveryEvent]? {
        while true {
            var taken: [APNSDeliveryEvent] = []
            var finished = false
            withBuffer { events, admission in
                let outcomes = events.take(max: max, into: &taken)
                if taken.isEmpty {
                    finished = events.isFinished
                } else if outcomes > 0 {
                    admission.release(outcomes)
                }
            }
            if !taken.isEmpty { return taken }
            if finished || (cancellable && Task.isCancelled) { return nil }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    var resumeNow = false
                    withBuffer { events, admission in
                        // Cancelled before this wait was registered: the handler found none to resume.
                        let ready = !events.isEmpty || events.isFinished || (cancellable && Task.isCancelled)
                        resumeNow = admission.waitForEvents(continuation, eventsReady: ready)
                    }
                    if resumeNow { continuation.resume() }
                }
            } onCancel: {
                guard cancellable else { return }
                var waiter: CheckedContinuation<Void, Never>? = nil
                withBuffer { _, admission in waiter = admission.cancelEventWait() }
                waiter?.resume()
            }
        }
    }

}

/// The events of a delivery client as an `AsyncSequence`: outcomes and connection events in
/// the order they happened, ending after the client has shut down and every event was read.
/// Events stay in the client until an iterator takes them, so iterating again continues where
/// the last iteration stopped; each event is delivered once. One consumer at a time. A
/// cancelled iteration ends: `next()` answers `nil`, and the events not taken stay.
public struct APNSDeliveryEvents: AsyncSequence, Sendable {
    public typealias Element = APNSDeliveryEvent
    let client: any APNSDeliveryClient

    public func makeAsyncIterator() -> Iterator { Iterator(client: client) }

    public struct Iterator: AsyncIteratorProtocol {
        let client: any APNSDeliveryClient

        public mutating func next() async -> APNSDeliveryEvent? {
            await Self.next(of: client)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> APNSDeliveryEvent? {
            await Self.next(of: client)
        }

        private static func next(of client: any APNSDeliveryClient) async -> APNSDeliveryEvent? {
            if let buffered = client as? any APNSBufferedDeliveryClient {
                return await buffered.takeEvents(max: 1, cancellable: true)?.first
            }
            return Task.isCancelled ? nil : await client.nextEvent()
        }
    }
}
