import Synchronization

/// The ``PipelineLedger`` the stages share: one lock around it, and the waiters for what it
/// bounds. Intake waits for room before it polls Kafka (``waitForRoom()``); a drain waits until
/// nothing is in flight (``waitUntilEmpty(deadline:)``), and the stop guard until a partition's
/// messages are done (``waitUntil(deadline:_:)``). Every event applied with ``update(_:)``
/// wakes the waiters whose condition now holds.
final class SharedLedger: Sendable {
    private struct State {
        var ledger: PipelineLedger
        /// Waiters by id, so that a cancelled or timed-out one is resumed alone.
        var roomWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        /// Waiters for a condition on the ledger, with it.
        var conditionWaiters: [UInt64: ConditionWaiter] = [:]
        /// Ids of waiters cancelled (or timed out) before they were installed.
        var gone: Set<UInt64> = []
        var nextId: UInt64 = 0

        mutating func makeId() -> UInt64 {
            nextId += 1
            return nextId
        }
    }

    private struct ConditionWaiter {
        var condition: @Sendable (borrowing PipelineLedger) -> Bool
        var continuation: CheckedContinuation<Bool, Never>
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

    /// Applies events to the ledger, then wakes the waiters for room and those whose condition
    /// now holds; returns what `event` returns (its actions).
    @discardableResult
    func update<T>(_ event: (inout PipelineLedger) -> T) -> T {
        let (result, room, satisfied) = state.withLock {
            s -> (T, [CheckedContinuation<Void, Never>], [CheckedContinuation<Bool, Never>]) in
            let result = event(&s.ledger)
            var room: [CheckedContinuation<Void, Never>] = []
            var satisfied: [CheckedContinuation<Bool, Never>] = []
            if !s.roomWaiters.isEmpty, s.ledger.hasRoom {
                room = Array(s.roomWaiters.values)
                s.roomWaiters.removeAll()
            }
            if !s.conditionWaiters.isEmpty {
                for (id, waiter) in s.conditionWaiters where waiter.condition(s.ledger) {
                    satisfied.append(waiter.continuation)
                    s.conditionWaiters[id] = nil
                }
            }
            return (result, room, satisfied)
        }
        room.forEach { $0.resume() }
        satisfied.forEach { $0.resume(returning: true) }
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
        await waitUntil(deadline: deadline) { $0.isEmpty }
    }

    /// Waits until `condition` holds for the ledger (checked now and after each event); `false`
    /// when `deadline` came first or the task was cancelled. Only this call's waiter is resumed
    /// when it gives up.
    func waitUntil(
        deadline: ContinuousClock.Instant,
        _ condition: @escaping @Sendable (borrowing PipelineLedger) -> Bool
    ) async -> Bool {
        let id = state.withLock { $0.makeId() }
        let giveUp: @Sendable () -> Void = { [self] in
            self.state.withLock { s -> CheckedContinuation<Bool, Never>? in
                guard let waiter = s.conditionWaiters.removeValue(forKey: id) else {
                    s.gone.insert(id)
                    return nil
                }
                return waiter.continuation
            }?.resume(returning: false)
        }
        // At the deadline the group cancels the waiter, whose handler gives up.
        return await answer(before: deadline) {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                    let answer = self.state.withLock { s -> Bool? in
                        if s.gone.remove(id) != nil { return false }
                        if condition(s.ledger) { return true }
                        s.conditionWaiters[id] = ConditionWaiter(condition: condition, continuation: continuation)
                        return nil
                    }
                    if let answer { continuation.resume(returning: answer) }
                }
            } onCancel: {
                giveUp()
            }
        }
    }
}
