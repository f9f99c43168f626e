import PushKafka
import Synchronization

/// What every stage of one worker shares besides its queues: whether the worker is stopping,
/// whether Redis answers, when each partition's revocation took effect, the signal a
/// revocation waits on, and the counters and metrics.
final class PipelineControl: Sendable {
    private struct State {
        var stopping = false
        var redisDown = false
        /// The consumer's rebalance generation at which each partition's latest revocation took
        /// effect (``markRevoked(_:generation:)``), and the newest of them.
        var revokedAt: [TopicPartition: UInt64] = [:]
        var lastRevocation: UInt64 = 0
        /// Progress made since the revocation last looked (``waitForProgress(until:)``).
        var progressed = false
        var progressWaiter: CheckedContinuation<Bool, Never>?
        var statistics = WorkerStatistics()
    }

    private let state = Mutex(State())
    let metrics: WorkerMetrics
    /// Whether this worker's liveness key may have expired while it held claims.
    let liveness = LivenessWatch(ttl: Worker.livenessTTL)

    init(metrics: WorkerMetrics = WorkerMetrics()) {
        self.metrics = metrics
    }

    var isStopping: Bool { state.withLock { $0.stopping } }
    func stop() {
        state.withLock { $0.stopping = true }
        madeProgress()
    }

    var isRedisDown: Bool { state.withLock { $0.redisDown } }
    /// Records whether Redis answered; returns the previous state.
    @discardableResult
    func setRedisDown(_ down: Bool) -> Bool {
        state.withLock { s in
            defer { s.redisDown = down }
            return s.redisDown
        }
    }

    /// The newest generation at which a revocation took effect (0: none yet).
    var lastRevocation: UInt64 { state.withLock { $0.lastRevocation } }

    /// The notifications of `partitions` parsed from messages fetched before rebalance
    /// `generation` are stale from now on: whatever of them has not been claimed yet is handed
    /// back instead (their partitions' next owner consumes them).
    func markRevoked(_ partitions: Set<TopicPartition>, generation: UInt64) {
        state.withLock { s in
            for partition in partitions { s.revokedAt[partition] = generation }
            s.lastRevocation = max(s.lastRevocation, generation)
        }
    }

    /// The generation at which each partition's latest revocation took effect (see
    /// ``Candidate/epoch``).
    func revocations() -> [TopicPartition: UInt64] {
        state.withLock { $0.revokedAt }
    }

    /// Waits until a stage made progress since the last call (or the worker stops), or until
    /// `deadline`; `false` on the deadline or cancellation. One caller at a time (the worker's
    /// rebalance task).
    func waitForProgress(until deadline: ContinuousClock.Instant) async -> Bool {
        await answer(before: deadline) {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                    let now = self.state.withLock { s -> Bool in
                        if s.progressed || s.stopping {
                            s.progressed = false
                            return true
                        }
                        s.progressWaiter = continuation
                        return false
                    }
                    if now { continuation.resume(returning: true) }
                }
            } onCancel: {
                self.state.withLock { s -> CheckedContinuation<Bool, Never>? in
                    defer { s.progressWaiter = nil }
                    return s.progressWaiter
                }?.resume(returning: false)
            }
        }
    }

    /// Wakes a revocation that waits for progress, if one does.
    func madeProgress() {
        state.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard let waiter = s.progressWaiter else {
                s.progressed = true
                return nil
            }
            s.progressWaiter = nil
            return waiter
        }?.resume(returning: true)
    }

    var statistics: WorkerStatistics { state.withLock { $0.statistics } }
    func count(_ body: (inout WorkerStatistics) -> Void) { state.withLock { body(&$0.statistics) } }
}

/// Counters of one worker.
public struct WorkerStatistics: Sendable, CustomStringConvertible {
    public var messages = 0
    public var notifications = 0
    public var rejected = 0
    public var results = 0
    public var duplicates = 0
    public var reemitted = 0
    public var takenOver = 0
    /// Notifications consumed again whose results were already written (no result produced).
    public var alreadyWritten = 0
    /// Messages consumed again below their partition's hand-off mark (results written; skipped).
    public var skipped = 0
    public var feedback = 0
    /// Redis round trips of both connections (set when the worker stops).
    public var redisRoundTrips = 0
    /// Redis Cluster redirections (`MOVED`, `ASK`) both clients followed (set when the worker stops).
    public var redisRedirects = 0

    public var description: String {
        "messages=\(messages) notifications=\(notifications) rejected=\(rejected) results=\(results) "
            + "duplicates=\(duplicates) reemitted=\(reemitted) alreadyWritten=\(alreadyWritten) skipped=\(skipped) takenOver=\(takenOver) "
            + "feedback=\(feedback) redisRoundTrips=\(redisRoundTrips) redisRedirects=\(redisRedirects)"
    }
}

/// A failure that stops the worker, with a sentence a person can act on.
public struct WorkerError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
