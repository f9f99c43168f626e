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
        var roomWaiters: [CheckedContinuation<Void, Never>] = []
        var emptyWaiters: [CheckedContinuation<Void, Never>] = []
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

    /// Waits until there is room for more (or the limit is closed for shutdown).
    func waitForRoom() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { s -> Bool in
                if Self.hasRoom(s, maximum) { return true }
                s.roomWaiters.append(continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Waits until nothing is in flight; `false` when `deadline` came first.
    func waitUntilEmpty(deadline: ContinuousClock.Instant) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let done = self.state.withLock { s -> Bool in
                        if s.inFlight <= 0 { return true }
                        s.emptyWaiters.append(continuation)
                        return false
                    }
                    if done { continuation.resume() }
                }
                return true
            }
            group.addTask {
                try? await Task.sleep(until: deadline)
                return false
            }
            let first = await group.next() ?? false
            if !first { self.resumeEmptyWaiters() }
            group.cancelAll()
            return first
        }
    }

    private func resumeEmptyWaiters() {
        let waiters = state.withLock { s in
            defer { s.emptyWaiters.removeAll() }
            return s.emptyWaiters
        }
        waiters.forEach { $0.resume() }
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
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            body(&s)
            var out: [CheckedContinuation<Void, Never>] = []
            if !s.roomWaiters.isEmpty, Self.hasRoom(s, maximum) {
                out = s.roomWaiters
                s.roomWaiters.removeAll()
            }
            if s.inFlight <= 0, !s.emptyWaiters.isEmpty {
                out += s.emptyWaiters
                s.emptyWaiters.removeAll()
            }
            return out
        }
        waiters.forEach { $0.resume() }
    }
}
