import Logging
import PushKafka

extension IntakeStage {
    /// Which partitions of each batch this member has not looked at since they were assigned:
    /// what intake reads from Redis once per assignment (hand-off marks, stop records) is read
    /// for those.
    struct Assignments: Sendable {
        /// Partitions looked at since they were last assigned.
        private var known = Set<TopicPartition>()
        /// The newest revocation seen (``PipelineControl/lastRevocation``).
        private var epoch: UInt64 = 0

        /// The partitions of `messages` not looked at since they were assigned, in the order
        /// they first appear, and the partitions looked at before that were revoked since.
        mutating func note(
            _ messages: [KafkaMessage],
            control: PipelineControl
        ) -> (fresh: [TopicPartition], revoked: Set<TopicPartition>) {
            var revoked = Set<TopicPartition>()
            let latest = control.lastRevocation
            if latest != epoch {
                // Revoked since: when assigned again, they are looked at again.
                let at = control.revocations()
                for partition in known where (at[partition] ?? 0) > epoch { revoked.insert(partition) }
                known.subtract(revoked)
                epoch = latest
            }
            var fresh: [TopicPartition] = []
            var last: (partition: Int32, topic: String)? = nil
            for message in messages {
                if let last, last.partition == message.partition, last.topic == message.topic { continue }
                last = (message.partition, message.topic)
                let partition = TopicPartition(topic: message.topic, partition: message.partition)
                if !known.contains(partition) && !fresh.contains(partition) { fresh.append(partition) }
            }
            known.formUnion(fresh)
            return (fresh, revoked)
        }
    }

    /// The hand-off marks of the partitions assigned to this member
    /// (``NotificationStore/handoffs(_:)``): looked up once per assignment, on the first batch
    /// with messages of the partition, and dropped once its messages reach the mark.
    struct Handoffs: Sendable {
        private(set) var marks: [TopicPartition: NotificationStore.HandoffMark] = [:]

        init(marks: [TopicPartition: NotificationStore.HandoffMark] = [:]) {
            self.marks = marks
        }

        /// Whether the message at `ref`, produced at `timestamp`, has all its results written.
        mutating func covers(_ ref: MessageRef, timestamp: Int64?) -> Bool {
            guard !marks.isEmpty, let mark = marks[ref.partition] else { return false }
            if ref.offset >= mark.offset {
                marks[ref.partition] = nil
                return false
            }
            return mark.covers(offset: ref.offset, timestamp: timestamp)
        }

        /// Drops the marks of partitions revoked: when assigned again, they are read again.
        mutating func forget(_ revoked: Set<TopicPartition>) {
            for partition in revoked { marks[partition] = nil }
        }

        /// Reads the marks of partitions newly assigned. If Redis cannot answer, their messages
        /// are consumed as usual.
        mutating func lookUp(_ fresh: [TopicPartition], store: NotificationStore, logger: Logger) async {
            guard !fresh.isEmpty else { return }
            do {
                for (partition, mark) in try await store.handoffs(fresh) {
                    marks[partition] = mark
                    logger.info(
                        "Partition handed on without a commit: skipping the messages whose results its previous owner wrote",
                        metadata: ["partition": "\(partition)", "before": "\(mark.offset)"]
                    )
                }
            } catch {
                logger.warning(
                    "Cannot read the hand-off marks of newly assigned partitions; results of bad input may be written again",
                    metadata: ["partitions": "\(fresh)", "error": "\(error.message)"]
                )
            }
        }
    }
}
