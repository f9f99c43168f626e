import Logging
import PushKafka

/// Finds jobs Kafka deleted before this worker read them (`docs/operations.md`, "Retention and
/// lag"): when a partition's backlog outgrows the topic's retention, the broker drops its oldest
/// messages and the consumer's position, out of range, is reset to the oldest one kept. Those
/// messages get no result; the worker cannot bring them back, but it counts and logs them.
///
/// It follows each partition's offsets per ownership (the consumer's rebalance generation). A
/// partition's first message after it is assigned is compared with the group's committed offset,
/// and a later message that skips more than one offset with the one expected; either is
/// confirmed against the partition's low watermark, so that offsets without messages
/// (transaction markers, which a gap of one usually is) never count.
struct RetentionWatch {
    /// A partition whose offsets skipped some: `expected` is the next offset it should have
    /// given (`nil`: ask for the group's committed offset), `first` the one it gave.
    struct Suspect: Hashable {
        var partition: TopicPartition
        var expected: Int64?
        var first: Int64
    }

    /// Offsets a broker deleted: `[from, to)` of `partition`.
    struct Loss: Hashable {
        var partition: TopicPartition
        var from: Int64
        var to: Int64
        var count: Int64 { to - from }
    }

    private var next: [TopicPartition: (epoch: UInt64, offset: Int64)] = [:]

    /// Notes a batch of messages; returns the partitions to check with the broker.
    mutating func note(_ messages: [KafkaMessage]) -> [Suspect] {
        var suspects: [Suspect] = []
        for message in messages {
            let partition = TopicPartition(topic: message.topic, partition: message.partition)
            let known = next[partition]
            if let known, known.epoch == message.rebalanceGeneration {
                if message.offset > known.offset + 1 {
                    suspects.append(Suspect(partition: partition, expected: known.offset, first: message.offset))
                }
            } else if known == nil || known!.epoch < message.rebalanceGeneration {
                suspects.append(Suspect(partition: partition, expected: nil, first: message.offset))
            } else {
                continue  // from an earlier ownership, dropped by the caller
            }
            next[partition] = (message.rebalanceGeneration, message.offset + 1)
        }
        return suspects
    }

    /// The losses the suspects show, given the committed offsets and low watermarks the broker
    /// answered (a partition missing from either is not judged).
    static func losses(
        of suspects: [Suspect],
        committed: [TopicPartition: Int64],
        lowWatermarks: [TopicPartition: Int64]
    ) -> [Loss] {
        suspects.compactMap { suspect in
            guard let expected = suspect.expected ?? committed[suspect.partition],
                let low = lowWatermarks[suspect.partition], low > expected, suspect.first > expected
            else { return nil }
            return Loss(partition: suspect.partition, from: expected, to: min(suspect.first, low))
        }
    }

    /// Asks the broker about `suspects` and returns the losses; an answer that does not come
    /// is logged and judged as no loss.
    static func check(_ suspects: [Suspect], consumer: KafkaConsumer, logger: Logger) async -> [Loss] {
        let partitions = Array(Set(suspects.map(\.partition)))
        var committed: [TopicPartition: Int64] = [:]
        var lows: [TopicPartition: Int64] = [:]
        do {
            let unknown = Array(Set(suspects.filter { $0.expected == nil }.map(\.partition)))
            if !unknown.isEmpty {
                for entry in try await consumer.committed(unknown, timeout: .seconds(2)) {
                    committed[TopicPartition(topic: entry.topic, partition: entry.partition)] = entry.offset
                }
            }
            for (partition, marks) in try await consumer.watermarks(partitions) { lows[partition] = marks.low }
        } catch {
            logger.warning(
                "Cannot check whether Kafka deleted unread jobs",
                metadata: ["partitions": "\(partitions)", "error": "\(error)"]
            )
            return []
        }
        return losses(of: suspects, committed: committed, lowWatermarks: lows)
    }
}
