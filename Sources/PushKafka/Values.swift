import CRdKafka

/// A topic partition.
public struct TopicPartition: Sendable, Hashable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }

    /// The partition number only: a process reads few topics, and hashing the topic's text was
    /// most of the cost of a lookup by partition, made for every message (equality still
    /// compares the topic).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(partition)
    }
}

/// A topic partition and an offset. For commits the offset is the next offset to
/// read, i.e. the last processed offset + 1.
public struct TopicPartitionOffset: Sendable, Hashable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }

    public init(_ topicPartition: TopicPartition, offset: Int64) {
        self.init(topic: topicPartition.topic, partition: topicPartition.partition, offset: offset)
    }

    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }
    public var description: String { "\(topic)[\(partition)]@\(offset)" }
}

/// A record header. Kafka allows repeated keys; order is preserved.
public struct KafkaHeader: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]

    public init(_ key: String, _ value: [UInt8]) {
        self.key = key
        self.value = value
    }
}

/// A record to produce. `partition == nil` lets the partitioner choose from the key.
public struct KafkaOutgoingMessage: Sendable, Hashable {
    public var topic: String
    public var partition: Int32?
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaHeader]
    /// The record's timestamp (UNIX ms, its CreateTime); `nil`: the time it is produced.
    public var timestamp: Int64?

    public init(
        topic: String,
        partition: Int32? = nil,
        key: [UInt8]?,
        value: [UInt8],
        headers: [KafkaHeader] = [],
        timestamp: Int64? = nil
    ) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
    }
}

/// Who set a record's timestamp: its producer (`CreateTime`), or the broker when it appended
/// the record (`LogAppendTime`, a topic's `message.timestamp.type`).
public enum KafkaTimestampType: String, Sendable, Hashable {
    case createTime = "CreateTime"
    case logAppendTime = "LogAppendTime"
}

/// Where the broker stored an acknowledged record.
public struct KafkaDeliveryReport: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
}

/// A consumed record.
public struct KafkaMessage: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    /// `nil` for a null key.
    public var key: [UInt8]?
    /// A null value reads as empty.
    public var value: [UInt8]
    public var headers: [KafkaHeader]
    /// Record timestamp in milliseconds since the Unix epoch, `nil` if the broker sent none. It
    /// is whatever the producer (or the broker) wrote: any 64-bit value, Kafka's `-1` (no
    /// timestamp) among them.
    public var timestamp: Int64?
    /// Who set ``timestamp``.
    public var timestampType: KafkaTimestampType = .createTime
    /// The consumer's ``KafkaConsumer/rebalanceGeneration`` when `poll` returned this message:
    /// a message whose partition was revoked at a later generation was fetched before the
    /// revocation, and belongs to the partition's next owner.
    public var rebalanceGeneration: UInt64 = 0

    /// The offset to commit once this message is processed.
    public var nextOffset: TopicPartitionOffset {
        TopicPartitionOffset(topic: topic, partition: partition, offset: offset + 1)
    }
}

/// A change of a consumer's assignment, delivered after librdkafka applied it.
public enum KafkaRebalanceEvent: Sendable, Hashable {
    case assigned([TopicPartition])
    /// The group takes these partitions away, at this rebalance generation; they are paused and
    /// still this member's until ``KafkaConsumer/completeRevocation(_:)`` (only with
    /// ``KafkaConsumer/Revocation/deferred``). `lost`: the assignment was lost rather than
    /// handed over (librdkafka's `rd_kafka_assignment_lost`: the session timed out, or the member
    /// was fenced), so the group has already given them to another member and this one can no
    /// longer commit them.
    case revoking([TopicPartition], generation: UInt64, lost: Bool)
    case revoked([TopicPartition])
}

/// When each partition was last revoked, by rebalance generation (see
/// ``KafkaConsumer/rebalanceGeneration``): which messages, fetched before, are their
/// partition's next owner's.
public struct RevocationMarks: Sendable {
    public private(set) var at: [TopicPartition: UInt64] = [:]
    /// The newest revocation's generation (0: none yet).
    public private(set) var latest: UInt64 = 0

    public init() {}

    public mutating func revoke(_ partitions: some Sequence<TopicPartition>, at generation: UInt64) {
        for partition in partitions { at[partition] = generation }
        latest = max(latest, generation)
    }

    /// `messages` without those fetched before their partition's latest revocation.
    public func current(_ messages: [KafkaMessage]) -> (current: [KafkaMessage], dropped: Int) {
        guard !at.isEmpty else { return (messages, 0) }
        let current = messages.filter { message in
            guard let revokedAt = at[TopicPartition(topic: message.topic, partition: message.partition)] else {
                return true
            }
            return message.rebalanceGeneration >= revokedAt
        }
        return (current, messages.count - current.count)
    }
}

// MARK: - C list conversion

typealias CPartitionList = UnsafeMutablePointer<rd_kafka_topic_partition_list_t>

/// Builds a list the caller must free with `rd_kafka_topic_partition_list_destroy`.
func makePartitionList(_ entries: [(topic: String, partition: Int32, offset: Int64?)]) -> CPartitionList {
    let list = rd_kafka_topic_partition_list_new(Int32(clamping: entries.count))!
    for entry in entries {
        let element = rd_kafka_topic_partition_list_add(list, entry.topic, entry.partition)!
        if let offset = entry.offset { element.pointee.offset = offset }
    }
    return list
}

func makePartitionList(_ partitions: [TopicPartition]) -> CPartitionList {
    makePartitionList(partitions.map { ($0.topic, $0.partition, nil) })
}

func makePartitionList(_ offsets: [TopicPartitionOffset]) -> CPartitionList {
    makePartitionList(offsets.map { ($0.topic, $0.partition, $0.offset) })
}

/// The list's elements as Swift values.
func partitionElements(
    _ list: UnsafePointer<rd_kafka_topic_partition_list_t>
) -> [(TopicPartitionOffset, rd_kafka_resp_err_t)] {
    let count = Int(list.pointee.cnt)
    guard count > 0, let elements = list.pointee.elems else { return [] }
    return (0..<count).map { index in
        let element = elements[index]
        return (
            TopicPartitionOffset(
                topic: String(cString: element.topic),
                partition: element.partition,
                offset: element.offset
            ), element.err
        )
    }
}

/// Throws the first per-partition error in the list.
func checkPartitionErrors(
    _ list: UnsafePointer<rd_kafka_topic_partition_list_t>,
    _ operation: String
) throws(KafkaError) {
    if let (entry, err) = partitionElements(list).first(where: { $0.1 != RD_KAFKA_RESP_ERR_NO_ERROR }) {
        throw KafkaError(err, context: "\(operation) \(entry.topicPartition)")
    }
}

/// Counts of what happened to a ``KafkaConsumer`` since it was made.
public struct KafkaConsumerStatistics: Sendable, Hashable {
    /// Rebalances that gave this member partitions.
    public var assignments = 0
    /// Rebalances that took partitions away.
    public var revocations = 0
    /// Offset commits the group coordinator accepted (automatic ones included).
    public var commits = 0
    /// Offset commits that failed.
    public var commitFailures = 0

    public init() {}
}
