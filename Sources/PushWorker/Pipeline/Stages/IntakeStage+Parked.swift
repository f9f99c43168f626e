import Logging
import PushKafka

extension IntakeStage {
    /// The partitions of the parked topic that intake leaves where they are while the pool of
    /// their first record cannot reach its gateway: paused, their position set back to that
    /// record, and resumed once the pool is reachable again. Their records stay in Kafka, not
    /// in memory, and are not moved aside again and again.
    ///
    /// A record whose job went stale (`staleAt` in its envelope) is not held back: it is read,
    /// and answered `expired` by the claim stage. So that a record behind one held back is
    /// answered soon after its own `staleAt`, a partition is read again every ``recheck``.
    struct HeldBack {
        /// How long a partition is held back before its first record is looked at again.
        static let recheck: Duration = .seconds(10)

        private(set) var pools: [TopicPartition: PoolKey] = [:]
        /// The Kafka timestamp of the first record left in each partition.
        private var since: [TopicPartition: Int64] = [:]
        /// When each partition was held back.
        private var heldAt: [TopicPartition: ContinuousClock.Instant] = [:]
        /// The pools whose age of the oldest record is exported as more than 0.
        private var reported: Set<PoolKey> = []

        var isEmpty: Bool { pools.isEmpty }

        /// Resumes the partitions whose pool is reachable again (a partition revoked meanwhile
        /// cannot be resumed, and is forgotten).
        mutating func resumeReachable(
            _ consumer: KafkaConsumer,
            isUnavailable: (PoolKey) -> Bool,
            logger: Logger
        ) {
            guard !pools.isEmpty else { return }
            let now = ContinuousClock.now
            let ready = pools.filter { partition, pool in
                !isUnavailable(pool) || now - (heldAt[partition] ?? now) >= Self.recheck
            }.map(\.key)
            guard !ready.isEmpty else { return }
            do {
                try consumer.resume(ready)
                for partition in ready { forget(partition) }
            } catch {
                // Those still assigned are tried again on the next batch; the others are not ours.
                logger.info("Cannot resume parked partitions", metadata: ["error": "\(error)"])
                let assigned = Set((try? consumer.assignment()) ?? [])
                for partition in ready where !assigned.contains(partition) { forget(partition) }
            }
        }

        private mutating func forget(_ partition: TopicPartition) {
            pools[partition] = nil
            since[partition] = nil
            heldAt[partition] = nil
        }

        /// Takes out of `messages` the parked records whose pool cannot reach its gateway, with
        /// every later message of their partitions, and leaves those partitions paused at the
        /// first of them. When the consumer cannot be paused or set back, nothing is taken out
        /// (the records are parked in memory, then moved aside again).
        mutating func holdBack(
            _ messages: inout [KafkaMessage],
            parkedTopic: String,
            consumer: KafkaConsumer,
            isUnavailable: (PoolKey) -> Bool,
            now: Int64,
            logger: Logger
        ) {
            var first: [TopicPartition: (offset: Int64, pool: PoolKey, timestamp: Int64?)] = [:]
            for message in messages where message.topic == parkedTopic {
                let partition = TopicPartition(topic: message.topic, partition: message.partition)
                guard first[partition] == nil, let pool = ParkedRecord.pool(key: message.key), isUnavailable(pool),
                    ParkedRecord.staleAt(of: message.value).map({ $0 > now }) ?? true
                else {
                    continue
                }
                first[partition] = (message.offset, pool, MessageTimestamp(message).known)
            }
            guard !first.isEmpty else { return }
            do {
                try consumer.pause(Array(first.keys))
                try consumer.seek(first.map { TopicPartitionOffset($0.key, offset: $0.value.offset) })
            } catch {
                logger.warning(
                    "Cannot leave parked records in Kafka while their gateway is unreachable; they are read",
                    metadata: ["error": "\(error)"]
                )
                _ = try? consumer.resume(Array(first.keys))
                return
            }
            let heldAt = ContinuousClock.now
            for (partition, held) in first {
                pools[partition] = held.pool
                since[partition] = held.timestamp
                self.heldAt[partition] = heldAt
            }
            messages.removeAll { message in
                guard message.topic == parkedTopic,
                    let held = first[TopicPartition(topic: message.topic, partition: message.partition)]
                else { return false }
                return message.offset >= held.offset
            }
        }

        /// Exports the age of the oldest record left in Kafka, per pool (0 for a pool with none
        /// left since the last report).
        mutating func report(to metrics: WorkerMetrics, now: Int64) {
            guard !pools.isEmpty || !reported.isEmpty else { return }
            var oldest: [PoolKey: Int64] = [:]
            for (partition, pool) in pools {
                let age = max(0, now - (since[partition] ?? now)) / 1000
                oldest[pool] = max(oldest[pool] ?? 0, age)
            }
            for pool in reported.subtracting(oldest.keys) {
                metrics.set(MetricCatalogue.movedAsideOldest, [pool.app, pool.environment.rawValue], to: 0)
            }
            for (pool, age) in oldest {
                metrics.set(MetricCatalogue.movedAsideOldest, [pool.app, pool.environment.rawValue], to: Int(age))
            }
            reported = Set(oldest.keys)
        }
    }
}
