import Dispatch
import PushKafka
import Synchronization

/// What every stage of one worker shares besides its queues: whether the worker is stopping,
/// whether Redis answers, the revocation epochs, the signal a revocation waits on, and the
/// counters and metrics.
final class PipelineControl: Sendable {
    private struct State {
        var stopping = false
        var redisDown = false
        /// Revocations so far; a candidate remembers the count it was parsed at.
        var epoch: UInt64 = 0
        /// The epoch at which each partition was last revoked.
        var revokedAt: [TopicPartition: UInt64] = [:]
        /// The consumer's rebalance generation at each partition's last revocation, and the
        /// newest of them (see ``KafkaMessage/rebalanceGeneration``).
        var revokedAtGeneration: [TopicPartition: UInt64] = [:]
        var lastRevocationGeneration: UInt64 = 0
        var statistics = WorkerStatistics()
    }

    private let state = Mutex(State())
    /// Signalled whenever a stage makes progress a revocation may be waiting for (it waits on
    /// librdkafka's poll thread, synchronously).
    let progress = DispatchSemaphore(value: 0)
    private let revoking = Atomic<Bool>(false)
    let metrics: WorkerMetrics

    init(metrics: WorkerMetrics = WorkerMetrics()) {
        self.metrics = metrics
    }

    var isStopping: Bool { state.withLock { $0.stopping } }
    func stop() { state.withLock { $0.stopping = true } }

    var isRedisDown: Bool { state.withLock { $0.redisDown } }
    /// Records whether Redis answered; returns the previous state.
    @discardableResult
    func setRedisDown(_ down: Bool) -> Bool {
        state.withLock { s in
            defer { s.redisDown = down }
            return s.redisDown
        }
    }

    var epoch: UInt64 { state.withLock { $0.epoch } }

    /// A revocation starts: stages signal ``progress`` from now on.
    func startRevocation() {
        revoking.store(true, ordering: .releasing)
    }

    /// The notifications of `partitions` parsed until now are stale: whatever of them has not
    /// been claimed yet is handed back instead (their partitions' next owner consumes them).
    /// So are the messages of `partitions` fetched before the consumer's rebalance `generation`
    /// that intake has not parsed yet (see ``current(_:)``).
    func markRevoked(_ partitions: Set<TopicPartition>, generation: UInt64) {
        state.withLock { s in
            s.epoch += 1
            for partition in partitions {
                s.revokedAt[partition] = s.epoch
                s.revokedAtGeneration[partition] = generation
            }
            s.lastRevocationGeneration = max(s.lastRevocationGeneration, generation)
        }
    }

    /// `messages` without those fetched before their partition was revoked: a revocation can
    /// run inside the poll that gathers a batch, after some of the batch's messages were
    /// fetched. Those belong to the partition's next owner, which consumes them from the
    /// committed offset; processing them here would produce their results twice.
    func current(_ messages: [KafkaMessage]) -> (current: [KafkaMessage], dropped: Int) {
        // Generations only grow along a batch: most batches need no look-up at all.
        guard let first = messages.first else { return (messages, 0) }
        let revoked = state.withLock { s in
            first.rebalanceGeneration < s.lastRevocationGeneration ? s.revokedAtGeneration : [:]
        }
        guard !revoked.isEmpty else { return (messages, 0) }
        let current = messages.filter { message in
            guard let at = revoked[TopicPartition(topic: message.topic, partition: message.partition)] else { return true }
            return message.rebalanceGeneration >= at
        }
        return (current, messages.count - current.count)
    }

    func endRevocation() {
        revoking.store(false, ordering: .releasing)
        // Drain any stale signal.
        while progress.wait(timeout: .now()) == .success {}
    }

    /// The epoch at which each partition was last revoked (see ``Candidate/epoch``).
    func revocations() -> [TopicPartition: UInt64] {
        state.withLock { $0.revokedAt }
    }

    /// Wakes a revocation that waits for progress, if one does.
    func madeProgress() {
        if revoking.load(ordering: .acquiring) { progress.signal() }
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
