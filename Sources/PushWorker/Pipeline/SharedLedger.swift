import Synchronization

/// The ``PipelineLedger`` the stages share: one lock around it, and the waiters for what it
/// bounds. Intake waits for room before it polls Kafka (``waitForRoom()``); a drain waits until
/// nothing is in flight (``waitUntilEmpty(deadline:)``). Every event applied with
/// ``update(_:)`` wakes the waiters whose condition now holds.
final class SharedLedger: Sendable {
    private struct State {
        var ledger: PipelineLedger
        /// Waiters by id, so that a cancelled or timed-out one is resumed alone.
        var roomWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var emptyWaiters: [UInt64: CheckedContinuation<Bool, Never>] = [:]
        /// Ids of waiters cancelled (or timed out) before they were installed.
        var gone: Set<UInt64> = []
        var nextId: UInt64 = 0

        mutating func makeId() -> UInt64 {
            nextId += 1
            return nextId
        }
    }

    private let state: Mutex<State>

    init(maximum: Int, highestLane: String? = nil, laneReserve: Int = 0) {
        state = Mutex(
            State(ledger: PipelineLedger(maximum: maximum, highestLane: highestLane, laneReserve: laneReserve))
        )
    }

    var inFlight: Int { state.withLock { $0.ledger.inFlight } }

    /// Reads the ledger.
    func read<T>(_ query: (borrowing PipelineLedger) -> T) -> T {
        state.withLock { query($0.ledger) }
    }

    /// Applies events to the ledger, then wakes the waiters for room and for an empty pipeline
    /// whose condition holds; returns what `event` returns (its actions).
    @discardableResult
    func update<T>(_ event: (inout PipelineLedger) -> T) -> T {
        let (result, room, empty) = state.withLock {
            s -> (T, [CheckedContinuation<Void, Never>], [CheckedContinuation<Bool, Never>]) in
            let result = event(&s.ledger)
            var room: [CheckedContinuation<Void, Never>] = []
            var empty: [CheckedContinuation<Bool, Never>] = []
            if !s.roomWaiters.isEmpty, s.ledger.hasRoom {
                room = Array(s.roomWaiters.values)
                s.roomWaiters.removeAll()
            }
            if !s.emptyWaiters.isEmpty, s.ledger.isEmpty {
                empty = Array(s.emptyWaiters.values)
                s.emptyWaiters.removeAll()
            }
            return (result, room, empty)
        }
        room.forEach { $0.resume() }
        empty.forEach { $0.resume(returning: true) }
        return result
    }

    /// Waits until there is room for more (or the ledger is closed for shutdown, or the task is
    /// cancelled: the caller checks for that).
    func waitForRoom() async {
        let id = state.withLock { $0.makeId() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { s -> Bool in
                    if s.gone.remove(id) != nil || s.ledger.hasRoom { return true }
                    s.roomWaiters[id] = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            state.withLock { s -> CheckedContinuation<Void, Never>? in
                guard let waiter = s.roomWaiters.removeValue(forKey: id) else {
                    s.gone.insert(id)
                    return nil
                }
                return waiter
            }?.resume()
        }
    }

    /// Waits until nothing is in flight; `false` when `deadline` came first or the task was
    /// cancelled. Only this call's waiter is resumed when it gives up.
    func waitUntilEmpty(deadline: ContinuousClock.Instant) async -> Bool {
        let id = state.withLock { $0.makeId() }
        let giveUp: @Sendable () -> Void = { [self] in
            self.state.withLock { s -> CheckedContinuation<Bool, Never>? in
                guard let waiter = s.emptyWaiters.removeValue(forKey: id) else {
                    s.gone.insert(id)
                    return nil
                }
                return waiter
            }?.resume(returning: false)
        }
        return await withTaskGroup(of: Bool?.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                        let answer = self.state.withLock { s -> Bool? in
                            if s.gone.remove(id) != nil { return false }
                            if s.ledger.isEmpty { return true }
                            s.emptyWaiters[id] = continuation
                            return nil
                        }
                        if let answer { continuation.resume(returning: answer) }
                    }
                } onCancel: {
                    giveUp()
                }
            }
            group.addTask {
                // Cancelled by the group once the waiter answered; gives up at the deadline.
                guard (try? await Task.sleep(until: deadline)) != nil else { return nil }
                giveUp()
                return nil
            }
            var answer = false
            if let first = await group.next(), let first { answer = first }
            group.cancelAll()
            return answer
        }
    }
}
