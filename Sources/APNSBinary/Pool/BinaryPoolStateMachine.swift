import APNSCore
import DequeModule
import NIOCore

/// The delivery logic of the binary connection pool, as a value with no I/O.
///
/// It owns the queue of notifications waiting for a connection, each connection's sent cache
/// (every notification written and not yet known to be accepted), identifier allocation, the
/// rules of §1.5 for error responses, confirmation by time, resending, reconnect policy and
/// shutdown. Its methods return ``Action``s — connects, pumps, timers, closes — that the
/// ``APNSBinaryClient`` carries out after releasing its lock; outcomes and connection events
/// are appended to ``events``.
@usableFromInline package struct BinaryPoolStateMachine {
    let configuration: Configuration
    private(set) var queue = APNSPoolQueue<PendingNotification>()
    private(set) var connections: [Int: Connection] = [:]
    /// Outcomes and connection events waiting for the consumer.
    var events: APNSEventBuffer
    private var connectionIDs = APNSConnectionIDs()
    /// Connections in a row that failed to connect or closed without confirming anything; a
    /// confirmed notification or an error response resets the count.
    private(set) var failures: APNSConnectFailures
    /// The most unconfirmed notifications one connection may carry. It starts at the cache size,
    /// halves when a connection closes silently with notifications in flight, and grows back as
    /// notifications are confirmed, so that a gateway that keeps cutting connections after a
    /// while still lets every notification through.
    private(set) var inflightLimit: Int
    private(set) var lifecycle = APNSPoolLifecycle.running {
        didSet { if lifecycle == .finished { events.finish() } }
    }
    /// The confirmation window in force. It starts as configured and widens to twice the longest
    /// error delay observed (at most ``maximumWindow``), because a notification confirmed by time
    /// before its gateway answered would be reported wrongly and the ones after it lost (§6.1).
    private(set) var confirmationWindow: TimeAmount
    static let maximumWindow = TimeAmount.seconds(60)

    /// The monotonic counters of ``snapshot()``; its gauges stay zero here.
    private(set) var counters = APNSPoolSnapshot()

    init(configuration: Configuration) {
        self.configuration = configuration
        self.inflightLimit = configuration.cacheMaxCount
        self.events = APNSEventBuffer(maxConnectionEvents: configuration.maxBufferedConnectionEvents)
        self.confirmationWindow = configuration.confirmationWindow
        self.failures = APNSConnectFailures(
            baseDelay: configuration.reconnectBaseDelay,
            maxDelay: configuration.reconnectMaxDelay,
            retryLimit: configuration.connectionRetryLimit
        )
    }

    // MARK: Queries

    /// Notifications waiting for a connection.
    var queuedCount: Int { queue.count }

    /// Notifications written and not yet confirmed, over all connections.
    var unconfirmedCount: Int { connections.values.reduce(0) { $0 + $1.cache.count } }

    private var liveConnectionCount: Int {
        connections.values.reduce(0) { count, c in c.state.isLive ? count + 1 : count }
    }

    private var isDrained: Bool {
        queue.isEmpty && connections.values.allSatisfy { c in c.cache.allSatisfy { $0.pending == nil } }
    }

    // MARK: Inputs

    /// Opens the warm connections.
    mutating func start() -> [Action] {
        var actions: [Action] = []
        dispatch(into: &actions)
        return actions
    }

    /// Adds notifications at the back of the queue, and reports those that never reach a
    /// connection (invalid payload and the like) with their reasons.
    mutating func enqueue(
        _ items: some Collection<PendingNotification>,
        rejected: [(PendingNotification, String)] = []
    ) -> [Action] {
        for (item, message) in rejected {
            emitFailure(item, status: .invalidPayload, message: message)
        }
        guard !items.isEmpty else { return [] }
        precondition(lifecycle == .running, "enqueue after shutdown")
        queue.append(contentsOf: items)
        var actions: [Action] = []
        dispatch(into: &actions)
        return actions
    }

    /// The back-off delay of connection `id` is over: it connects now, unless it is no longer
    /// wanted (the pool drained during a shutdown).
    mutating func backoffElapsed(id: Int) -> [Action] {
        guard var c = connections[id] else { return [] }
        guard c.state == .scheduled else {
            assertionFailure("connection \(id): back-off elapsed in state \(c.state)")
            return []
        }
        if lifecycle != .running && isDrained {
            connections[id] = nil
            return []
        }
        c.state = .connecting
        connections[id] = c
        return [.connect(id: id, delay: .zero)]
    }

    /// The TLS handshake of connection `id` completed.
    mutating func connectionEstablished(id: Int) -> [Action] {
        var actions: [Action] = []
        guard var c = connections[id] else { return actions }
        guard c.state == .connecting else {
            assertionFailure("connection \(id): handshake completed in state \(c.state)")
            return actions
        }
        c.state = .ready(Ready())
        connections[id] = c
        counters.connectionsOpened += 1
        emitConnectionEvent(.connected(connection: id))
        failures.connectionOpened(into: &events)
        dispatch(into: &actions)
        return actions
    }

    /// Connection `id` could not be established, because of `failure`.
    mutating func connectFailed(id: Int, reason: String, failure: APNSPoolSnapshot.ConnectFailure = .other) -> [Action]
    {
        var actions: [Action] = []
        guard connections.removeValue(forKey: id) != nil else { return actions }
        counters.count(failure)
        emitConnectionEvent(
            failure == .timeout ? .timeout(connection: id, reason: reason) : .socketError(connection: id, error: reason)
        )
        recordFailure(reason)
        dispatch(into: &actions)
        return actions
    }

    /// The pump of connection `id` runs: takes the next batch to write, assigning identifiers
    /// and moving the notifications into the sent cache. The batch is the first action,
    /// ``Action/write(id:frames:)``, when there is one.
    mutating func takeBatch(id: Int) -> [Action] {
        // Taken out of the table while it changes, so that its cache is uniquely referenced and
        // appends do not copy it.
        guard var c = connections.removeValue(forKey: id) else { return [] }
        // A pump scheduled before the connection closed finds nothing to do.
        guard case .ready(var ready) = c.state else {
            connections[id] = c
            return []
        }
        ready.pumpScheduled = false
        c.state = .ready(ready)
        guard ready.writable else {
            connections[id] = c
            return []
        }
        var batch: [Frame] = []
        var batchBytes = 0
        let limit = min(configuration.cacheMaxCount, inflightLimit)
        // A notification past its `staleAt` when its turn comes is failed instead of written (the
        // clock is read once, and only when a notification has one).
        var now: Int64? = nil
        while batch.count < configuration.batchMaxCount, c.cache.count < limit, let next = queue.first {
            if let staleAt = next.staleAt {
                let current = now ?? configuration.now()
                now = current
                if staleAt <= current {
                    queue.removeFirst()
                    events.append(
                        outcome: .transmissionError(
                            next.staleFailure(peer: "the gateway", duplicateNote: Self.duplicateNote)
                        )
                    )
                    continue
                }
            }
            let size = next.wireSize
            if c.cacheBytes + size > configuration.cacheMaxBytes && !c.cache.isEmpty { break }
            if batchBytes + size > configuration.batchMaxBytes && !batch.isEmpty { break }
            queue.removeFirst()
            var item = next
            item.attempts += 1
            counters.writes += 1
            if item.attempts > 1 { counters.retransmissions += 1 }
            let identifier = c.nextIdentifier
            c.nextIdentifier &+= 1
            c.cache.append(CacheEntry(identifier: identifier, pending: item, sentAt: .distantFuture, bytes: size))
            c.cacheBytes += size
            batch.append(Frame(identifier: identifier, notification: item))
            batchBytes += size
        }
        // At shutdown, once nothing is left to send, a deliberately invalid notification makes
        // the gateway answer with an error that confirms everything written before it (§6.3).
        if lifecycle.isStopping, queue.isEmpty, !ready.probeSent, !c.cache.isEmpty {
            let identifier = c.nextIdentifier
            c.nextIdentifier &+= 1
            c.cache.append(CacheEntry(identifier: identifier, pending: nil, sentAt: .distantFuture, bytes: 0))
            c.whenReady { $0.probeSent = true }
            batch.append(Frame(identifier: identifier, notification: nil))
        }
        connections[id] = c
        var actions: [Action] = batch.isEmpty ? [] : [.write(id: id, frames: batch)]
        dispatch(into: &actions)
        return actions
    }

    /// The batch of connection `id` ending with `lastIdentifier` was handed to the kernel at
    /// `now` (`instant` on the `ContinuousClock`, which outcomes report): its confirmation window
    /// starts. Counting from here rather than from the pump keeps time spent in the client's own
    /// buffers out of the window.
    mutating func written(
        id: Int,
        through lastIdentifier: UInt32,
        now: NIODeadline
    ) -> [Action] {
        var actions: [Action] = []
        guard var c = connections.removeValue(forKey: id) else { return actions }
        guard let last = c.index(of: lastIdentifier) else {
            connections[id] = c
            return actions
        }
        var index = last
        while index >= 0, c.cache[index].sentAt == .distantFuture {
            c.cache[index].sentAt = now
            c.cache[index].pending?.writtenAt = now.uptimeNanoseconds
            index -= 1
        }
        if !c.timerArmed, let first = c.cache.first, first.sentAt != .distantFuture {
            c.timerArmed = true
            actions.append(.armTimer(id: id, deadline: first.sentAt + confirmationWindow))
        }
        connections[id] = c
        return actions
    }

    /// The confirmation timer of connection `id` fired: everything that has been on the wire for
    /// the confirmation window on a connection that has not failed is accepted.
    mutating func timerFired(id: Int, now: NIODeadline) -> [Action] {
        var actions: [Action] = []
        guard var c = connections.removeValue(forKey: id) else { return actions }
        c.timerArmed = false
        // A failed connection's cache was settled by its error response.
        guard c.state.isOpen else {
            connections[id] = c
            return actions
        }
        var confirmed = 0
        // The first entry's time is read in place, and the entry moved out: a copy of it
        // retained its payload and token.
        while !c.cache.isEmpty, c.cache[c.cache.startIndex].sentAt + confirmationWindow <= now {
            let first = c.cache.removeFirst()
            c.cacheBytes -= first.bytes
            if let item = first.pending {
                emitTransmitted(item)
                confirmed += 1
            }
        }
        if confirmed > 0 {
            markProductive(&c, confirmed: confirmed)
        }
        if let first = c.cache.first, first.sentAt != .distantFuture {
            c.timerArmed = true
            actions.append(.armTimer(id: id, deadline: first.sentAt + confirmationWindow))
        }
        connections[id] = c
        dispatch(into: &actions)
        return actions
    }

    /// An error response arrived on connection `id` (§1.5).
    mutating func errorResponse(id: Int, _ response: ErrorResponse, now: NIODeadline) -> [Action] {
        var actions: [Action] = []
        // The gateway answers once and closes: anything on a connection not open is ignored.
        guard var c = connections[id], c.state.isOpen else { return actions }
        // The answer to the shutdown probe ends a connection the client is closing anyway.
        let probe = c.index(of: response.identifier).map { c.cache[$0].pending == nil } ?? false
        c.state = .failed(probe ? .shutdown : .errorResponse)
        let entries = Array(c.cache)
        c.cache.removeAll()
        c.cacheBytes = 0

        if let index = entries.firstIndex(where: { $0.identifier == response.identifier }) {
            // §1.5.2: everything before the bad one was accepted; §1.5.3: with status 10 the
            // identifier is the last good one.
            let lastAccepted = response.status == .shutdown ? index : index - 1
            var accepted = 0
            for entry in entries[...lastAccepted] where entry.pending != nil {
                emitTransmitted(entry.pending!)
                accepted += 1
            }
            if response.status != .shutdown, let failed = entries[index].pending {
                emitFailure(failed, status: response.status, message: nil)
            }
            // Everything written after it was discarded by the gateway and must be resent.
            requeueFront(entries[(index + 1)...].compactMap(\.pending), possibleDuplicate: false)
            failures.reset()
            if accepted > 0 { growInflightLimit(by: accepted) }
            let sentAt = entries[index].sentAt
            if sentAt != .distantFuture && now - sentAt > .nanoseconds(confirmationWindow.nanoseconds / 2) {
                widenWindow(
                    to: now - sentAt + (now - sentAt),
                    because: "an error response took \((now - sentAt).nanoseconds / 1_000_000) ms"
                )
            }
        } else {
            let pending = entries.compactMap(\.pending)
            if !pending.isEmpty {
                emitConnectionEvent(
                    .error(
                        APNSError(
                            .cacheInconsistency,
                            "connection \(id): error response (status \(response.status)) for identifier \(response.identifier), which is not in the sent cache (it holds \(entries.first!.identifier)...\(entries.last!.identifier)); the gateway's error delay may exceed the confirmation window of \(confirmationWindow.nanoseconds / 1_000_000) ms. \(pending.count) unconfirmed notifications are resent and marked as possible duplicates"
                        )
                    ),
                    force: true
                )
            }
            requeueFront(pending, possibleDuplicate: true)
            widenWindow(
                to: confirmationWindow + confirmationWindow,
                because: "an error response named a notification already confirmed"
            )
        }
        connections[id] = c
        actions.append(.close(id: id))
        dispatch(into: &actions)
        return actions
    }

    /// Connection `id` closed (for any reason, after it was established or while connecting).
    /// `cause` is why, when the client's connection handler closed it itself (a write that did
    /// not complete); otherwise the reason the pool recorded, or a silent close.
    mutating func connectionClosed(id: Int, reason: String, cause: APNSPoolSnapshot.CloseReason? = nil) -> [Action] {
        var actions: [Action] = []
        guard let c = connections.removeValue(forKey: id) else { return actions }
        switch c.state {
        case .scheduled, .connecting:
            counters.count(APNSPoolSnapshot.ConnectFailure.other)
            emitConnectionEvent(.socketError(connection: id, error: reason))
            recordFailure(reason)
        case .failed(let why):
            counters.count(why)
            emitConnectionEvent(.disconnected(connection: id, reason: reason))
        case .ready(let ready):
            counters.count(cause ?? .silentClose)
            emitConnectionEvent(.disconnected(connection: id, reason: reason))
            settleUnknown(c, reason: reason)
            if !ready.productive {
                recordFailure("connection \(id) closed before confirming anything: \(reason)")
            }
        case .closing(let why):
            counters.count(why)
            // The pool closed it: the reason is its own, whatever the channel saw.
            let reason = why == .idle ? "idle timeout" : "closed at shutdown"
            emitConnectionEvent(.disconnected(connection: id, reason: reason))
            settleUnknown(c, reason: reason)
        }
        dispatch(into: &actions)
        return actions
    }

    /// A connection closed without an error packet: whatever it left unconfirmed is in an
    /// unknown state (§6.2), resent as a possible duplicate or failed as indeterminate.
    private mutating func settleUnknown(_ c: Connection, reason: String) {
        let unknown = c.cache.compactMap(\.pending)
        guard !unknown.isEmpty else { return }
        if lifecycle != .finished, configuration.resendOnUnknown {
            requeueFront(unknown, possibleDuplicate: true)
        } else {
            for item in unknown {
                var item = item
                item.possibleDuplicate = true
                emitFailure(
                    item,
                    status: .indeterminate,
                    message:
                        "connection \(c.id) closed without an error packet (\(reason)); the gateway may or may not have accepted it"
                )
            }
        }
        inflightLimit = max(1, min(inflightLimit, unknown.count) / 2)
    }

    /// A write on connection `id` did not complete in time; the client closes it next.
    mutating func writeTimedOut(id: Int, reason: String) -> [Action] {
        emitConnectionEvent(.timeout(connection: id, reason: reason))
        return []
    }

    /// The channel of connection `id` became writable or stopped being writable.
    mutating func writabilityChanged(id: Int, writable: Bool) -> [Action] {
        var actions: [Action] = []
        guard connections[id] != nil else { return actions }
        connections[id]?.whenReady { $0.writable = writable }
        if writable { dispatch(into: &actions) }
        return actions
    }

    /// Connection `id` has seen no traffic for the idle timeout. It closes when nothing is
    /// queued or unconfirmed on it and more than the warm minimum are open.
    mutating func idleTimeout(id: Int) -> [Action] {
        guard var c = connections[id], c.state.isReady, c.cache.isEmpty, queue.isEmpty,
            liveConnectionCount > configuration.minConnections
        else { return [] }
        c.state = .closing(.idle)
        connections[id] = c
        emitConnectionEvent(.timeout(connection: id, reason: "idle"))
        return [.close(id: id)]
    }

    /// Stops taking new notifications and drains: everything queued is sent and confirmed, then
    /// every connection is closed.
    mutating func beginShutdown() -> [Action] {
        var actions: [Action] = []
        guard lifecycle == .running else { return actions }
        lifecycle = .draining
        dispatch(into: &actions)
        return actions
    }

    /// Ends a drain that ran out of time: queued notifications fail with ``APNSStatus/shutDown``,
    /// unconfirmed ones with ``APNSStatus/indeterminate``, and every connection closes.
    mutating func abandon(reason: String) -> [Action] {
        var actions: [Action] = []
        guard lifecycle != .finished else { return actions }
        lifecycle = .abandoning
        while let item = queue.popFirst() {
            emitFailure(item, status: .shutDown, message: reason)
        }
        for id in connections.keys.sorted() {
            guard var c = connections[id] else { continue }
            for entry in c.cache {
                guard var item = entry.pending else { continue }
                item.possibleDuplicate = true
                emitFailure(item, status: .indeterminate, message: "\(reason); it was written but not yet confirmed")
            }
            c.cache.removeAll()
            c.cacheBytes = 0
            connections[id] = c
        }
        dispatch(into: &actions)
        return actions
    }

    // MARK: Dispatch

    private mutating func dispatch(into actions: inout [Action]) {
        // Pumps: the least-loaded ready connections, enough of them to take what is queued.
        var remaining = queue.count
        let limit = min(configuration.cacheMaxCount, inflightLimit)
        while remaining > 0 {
            var best: Int? = nil
            var bestLoad = Int.max
            for (id, c) in connections where c.cache.count < limit && c.cache.count < bestLoad {
                guard case .ready(let ready) = c.state, ready.writable, !ready.pumpScheduled else { continue }
                best = id
                bestLoad = c.cache.count
            }
            guard let id = best else { break }
            connections[id]?.whenReady { $0.pumpScheduled = true }
            actions.append(.schedulePump(id: id))
            remaining -= min(configuration.batchMaxCount, limit - bestLoad)
        }

        if lifecycle.isStopping && queue.isEmpty {
            for (id, c) in connections {
                guard case .ready(let ready) = c.state, !ready.pumpScheduled, !ready.probeSent,
                    c.cache.contains(where: { $0.pending != nil })
                else { continue }
                connections[id]?.whenReady { $0.pumpScheduled = true }
                actions.append(.schedulePump(id: id))
            }
        }

        // Connections: all of them while there is work, the warm minimum otherwise.
        if lifecycle == .running || !queue.isEmpty {
            let wanted =
                queue.isEmpty && lifecycle == .running ? configuration.minConnections : configuration.maxConnections
            let connecting = connections.values.contains { $0.state.isOpening }
            var live = liveConnectionCount
            var opened = false
            while live < wanted {
                // After failures, probe with one connection at a time.
                if failures.inARow > 0 && (connecting || opened) { break }
                opened = true
                let id = connectionIDs.make()
                connections[id] = Connection(id: id, state: failures.inARow > 0 ? .scheduled : .connecting)
                let delay = failures.inARow > 0 ? configuration.jitter(failures.delay).timeAmount : .zero
                actions.append(.connect(id: id, delay: delay))
                live += 1
            }
        }

        if lifecycle.isStopping && isDrained {
            for (id, c) in connections {
                switch c.state {
                case .ready:
                    if c.cache.isEmpty {
                        connections[id]?.state = .closing(.shutdown)
                        actions.append(.close(id: id))
                    }
                case .scheduled:
                    connections[id] = nil
                case .connecting, .failed, .closing:
                    break
                }
            }
            if connections.isEmpty {
                lifecycle = .finished
                actions.append(.shutdownComplete)
            }
        }
    }

    // MARK: Helpers

    private mutating func recordFailure(_ reason: String) {
        let noneReady = !connections.values.contains { $0.state.isReady }
        failures.record(reason, peer: "the gateway", noneOpen: noneReady, into: &events)
        guard noneReady else { return }
        if queue.mayHoldStale {
            queue.failStale(
                now: configuration.now(),
                peer: "the gateway",
                duplicateNote: Self.duplicateNote,
                into: &events
            )
        }
        guard failures.retryLimitReached else { return }
        // Give up on what is queued rather than letting it wait forever.
        let message = failures.summary(peer: "the gateway", last: reason)
        if !queue.isEmpty {
            emitConnectionEvent(
                .error(APNSError(.connectionFailed, message + "; \(queue.count) queued notifications failed")),
                force: true
            )
        }
        while let item = queue.popFirst() {
            emitFailure(item, status: .connectionFailed, message: message)
        }
        failures.reset()
    }

    /// Why a stale notification that was written before may have been delivered.
    private static let duplicateNote =
        "an earlier attempt on a connection that closed without an error packet may have delivered it"

    private mutating func widenWindow(to proposed: TimeAmount, because reason: String) {
        let widened = min(proposed, Self.maximumWindow)
        guard widened > confirmationWindow else { return }
        confirmationWindow = widened
        emitConnectionEvent(
            .error(
                APNSError(
                    .slowGateway,
                    "\(reason); the confirmation window is now \(widened.nanoseconds / 1_000_000) ms"
                )
            ),
            force: true
        )
    }

    private mutating func markProductive(_ c: inout Connection, confirmed: Int) {
        c.whenReady { $0.productive = true }
        failures.reset()
        growInflightLimit(by: confirmed)
    }

    private mutating func growInflightLimit(by confirmed: Int) {
        inflightLimit = min(configuration.cacheMaxCount, inflightLimit + confirmed)
    }

    /// Puts notifications back at the front of the queue in their original order, or fails those
    /// that used up their retry limit.
    private mutating func requeueFront(_ items: [PendingNotification], possibleDuplicate: Bool) {
        for item in items.reversed() {
            var item = item
            if possibleDuplicate { item.possibleDuplicate = true }
            if let limit = item.retryLimit, item.attempts > limit {
                emitFailure(
                    item,
                    status: .retryLimitExceeded,
                    message: "written \(item.attempts) times; its retry limit is \(limit)"
                )
            } else {
                queue.prepend(item)
            }
        }
    }

    /// Moves the identifier counter of connection `id`, so that wrap-around can be exercised.
    mutating func setNextIdentifier(_ identifier: UInt32, connection id: Int) {
        connections[id]?.nextIdentifier = identifier
    }
}
