import Logging
import PushKafka

// What the intake loop does around its batches: polling, pausing for Redis, and counting.
extension IntakeStage {
    /// Counts the notifications read back from the parked topic, by pool.
    func countBroughtBack(_ candidates: [Candidate], parkedTopic: String, metrics: WorkerMetrics) {
        guard candidates.contains(where: { $0.ref.partition.topic == parkedTopic }) else { return }
        var counts: [PoolKey: Int] = [:]
        for c in candidates where c.ref.partition.topic == parkedTopic { counts[c.poolKey, default: 0] += 1 }
        for (key, count) in counts {
            metrics.increment(MetricCatalogue.broughtBack, [key.app, key.environment.rawValue], by: count)
        }
    }

    /// Logs and counts jobs Kafka deleted before they were read.
    func report(_ loss: RetentionWatch.Loss, metrics: WorkerMetrics) {
        logger.error(
            "Kafka deleted \(loss.count) jobs before they were read: \(loss.partition.topic)[\(loss.partition.partition)] offsets \(loss.from) to \(loss.to - 1) get no result. The topic's retention is shorter than this group's lag: raise retention.ms/retention.bytes or add workers (docs/operations.md, \"Retention and lag\")",
            metadata: [
                "topic": "\(loss.partition.topic)", "partition": "\(loss.partition.partition)",
                "from": "\(loss.from)", "to": "\(loss.to)", "lost": "\(loss.count)",
            ]
        )
        metrics.increment(
            MetricCatalogue.messagesLostToRetention,
            [loss.partition.topic, String(loss.partition.partition)],
            by: Int(loss.count)
        )
    }

    /// Pauses (Redis unreachable) or resumes the assigned partitions; returns whether they are
    /// paused now. A pause that fails leaves them consuming and is tried again on the next batch:
    /// what is consumed meanwhile waits for Redis in the claim stage, under `maxInFlight`.
    func pauseOrResume(_ consumer: KafkaConsumer, pause: Bool, wasPaused: Bool) -> Bool {
        do {
            let assigned = try consumer.assignment()
            if !assigned.isEmpty {
                if pause { try consumer.pause(assigned) } else { try consumer.resume(assigned) }
            }
        } catch {
            logger.warning(
                pause
                    ? "Cannot pause consumption while Redis is unreachable; trying again"
                    : "Cannot resume consumption; trying again",
                metadata: ["error": "\(error)"]
            )
            return wasPaused
        }
        if pause != wasPaused {
            logger.notice(pause ? "Redis is unreachable: consumption paused" : "Redis is back: consumption resumed")
        }
        return pause
    }

    /// Polls a batch from the first `lanes` priority lanes: up to `batchSize` messages, gathered
    /// for at most `window` once the first arrived.
    static func pollBatch(
        _ consumer: KafkaConsumer,
        batchSize: Int,
        window: Duration,
        lanes: Int = .max
    ) async throws(KafkaError) -> [KafkaMessage] {
        var messages = try await consumer.poll(maxMessages: batchSize, timeout: .milliseconds(100), lanes: lanes)
        guard !messages.isEmpty else { return messages }
        let deadline = ContinuousClock.now + window
        while messages.count < batchSize {
            let remaining = deadline - .now
            if remaining <= .zero { break }
            let more = try await consumer.poll(
                maxMessages: batchSize - messages.count,
                timeout: remaining,
                lanes: lanes
            )
            if more.isEmpty { break }
            messages += more
        }
        return messages
    }
}
