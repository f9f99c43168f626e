import Synchronization

/// The worker's one memory bound: notifications between consumption and a written result
/// (`maxInFlight`). Intake waits for room before it polls Kafka; every stage that finishes or
/// hands back a notification gives its slot back. Every queue behind intake holds in-flight
/// notifications only, so this bound is theirs too.
///
/// Parked notifications (waiting for an unreachable gateway) have a bound of their own of the
/// same size, so that other apps go on while one app's gateway is down.
final class InFlightLimit: Sendable {
    private struct State {
        var inFlight = 0
        var parked = 0
        var closed = false
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

    let maximum: Int
    private let state = Mutex(State())

    init(maximum: Int) {
        self.maximum = maximum
    }

    var inFlight: Int { state.withLock { $0.inFlight } }

    private static func hasRoom(_ s: State, _ maximum: Int) -> Bool {
        s.closed || (s.inFlight - s.parked < maximum && s.parked < maximum)
    }

    /// Waits until there is room for more (or the limit is closed for shutdown, or the task is
    /// cancelled: the caller checks for that).
    func waitForRoom() async {
        let id = state.withLock { $0.makeId() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { s -> Bool in
                    if s.gone.remove(id) != nil || Self.hasRoom(s, maximum) { return true }
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
                            if s.inFlight <= 0 { return true }
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

    /// `count` more notifications are in flight.
    func add(_ count: Int) {
        guard count != 0 else { return }
        state.withLock { $0.inFlight += count }
    }

    /// `count` notifications are finished or handed back.
    func remove(_ count: Int) {
        guard count != 0 else { return }
        changed { $0.inFlight -= count }
    }

    /// `delta` notifications started (positive) or stopped (negative) waiting for their gateway.
    func parked(_ delta: Int) {
        guard delta != 0 else { return }
        changed { $0.parked += delta }
    }

    /// Lets every waiter for room through from now on (shutdown).
    func close() {
        changed { $0.closed = true }
    }

    private func changed(_ body: (inout State) -> Void) {
        let waiters = state.withLock { s -> ([CheckedContinuation<Void, Never>], [CheckedContinuation<Bool, Never>]) in
            body(&s)
            var room: [CheckedContinuation<Void, Never>] = []
            var empty: [CheckedContinuation<Bool, Never>] = []
            if !s.roomWaiters.isEmpty, Self.hasRoom(s, maximum) {
                room = Array(s.roomWaiters.values)
                s.roomWaiters.removeAll()
            }
            if s.inFlight <= 0, !s.emptyWaiters.isEmpty {
                empty = Array(s.emptyWaiters.values)
                s.emptyWaiters.removeAll()
            }
            return (room, empty)
        }
        waiters.0.forEach { $0.resume() }
        waiters.1.forEach { $0.resume(returning: true) }
    }
}
