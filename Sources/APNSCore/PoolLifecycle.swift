/// Where a connection pool is in its life. Both pools go `running` → `draining` (a shutdown:
/// nothing new is taken, what is held is finished) → `finished`; a shutdown that runs out of
/// time goes to `abandoning` (what is held fails) before `finished`.
@usableFromInline package enum APNSPoolLifecycle: Sendable, Hashable {
    case running
    case draining
    case abandoning
    /// Everything is settled and every connection closed; the event buffer is finished.
    case finished

    /// Shutting down and not finished yet: draining or abandoning.
    package var isStopping: Bool { self == .draining || self == .abandoning }
}

/// What a pool keeps under its client's lock, as far as the start of a shutdown needs it.
@usableFromInline package protocol APNSPoolShutdownState {
    associatedtype Batch: Sendable
    associatedtype Action
    /// The admission of the callers' batches.
    var admission: APNSAdmission<Batch> { get set }
    /// Where the pool is in its life.
    var lifecycle: APNSPoolLifecycle { get }
    /// The callers waiting for the shutdown to finish.
    var shutdownWaiters: [CheckedContinuation<Void, Never>] { get set }
    /// Has the pool begin its shutdown (`draining`); returns what the pool asks for.
    mutating func beginShutdown() -> [Action]
}

extension APNSPoolShutdownState {
    /// Shuts the pool down and returns once it has finished. In one `step` (the client's
    /// locked step, which carries out the actions returned): admission stops, and unless the
    /// pool has already finished, the caller waits among ``shutdownWaiters`` and the pool begins
    /// its shutdown. The callers whose batches were still waiting for room fail with
    /// ``APNSStatus/shutDown``.
    package static func shutDown(through step: ((inout Self) -> [Action]) -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            var rejected: [APNSAdmission<Batch>.Waiter] = []
            var done = false
            step { state in
                rejected = state.admission.stop()
                if state.lifecycle == .finished {
                    done = true
                    return []
                }
                state.shutdownWaiters.append(continuation)
                return state.beginShutdown()
            }
            APNSAdmission.reject(rejected)
            if done { continuation.resume() }
        }
    }
}

/// Connection identifiers of one pool: 1, 2, 3, … in the order the connections are made. Logs
/// (`apns.connection`), events and actions name connections by them.
package struct APNSConnectionIDs: Sendable {
    private var next = 1

    package init() {}

    /// The identifier of the next connection.
    package mutating func make() -> Int {
        defer { next += 1 }
        return next
    }
}
