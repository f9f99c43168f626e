import PushKafka
import PushKafkaEmbedded
import PushTestSupport
import Synchronization
import Testing

func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(UInt32.random(in: 0...UInt32.max))"
}

func bytes(_ string: String) -> [UInt8] { Array(string.utf8) }

func producerConfiguration(_ cluster: EmbeddedKafkaCluster, _ extra: [String: String] = [:]) -> KafkaConfiguration {
    var configuration = KafkaConfiguration(extra)
    configuration.bootstrapServers = cluster.bootstrapServers
    configuration.clientId = "push-kafka-tests"
    return configuration
}

/// Consumer settings that make mock-cluster group rebalances fast.
func consumerConfiguration(_ cluster: EmbeddedKafkaCluster, group: String) -> KafkaConfiguration {
    var configuration = KafkaConfiguration([
        "heartbeat.interval.ms": "500",
        "topic.metadata.refresh.interval.ms": "500",
    ])
    configuration.bootstrapServers = cluster.bootstrapServers
    configuration.groupId = group
    configuration.autoOffsetReset = "earliest"
    configuration.sessionTimeout = .seconds(6)
    return configuration
}

/// A topic of four partitions on `cluster`, a group name, and the topic's partitions: what the
/// consumer-group tests start from.
func fourPartitionTopic(
    on cluster: EmbeddedKafkaCluster,
    _ name: String
) throws -> (topic: String, group: String, partitions: Set<TopicPartition>) {
    let topic = uniqueName(name)
    try cluster.createTopic(topic, partitions: 4)
    return (topic, uniqueName("group"), Set((0..<4).map { TopicPartition(topic: topic, partition: $0) }))
}

/// Polls `consumer` until it owns exactly `partitions`.
func pollUntil(
    _ consumer: KafkaConsumer,
    owns partitions: Set<TopicPartition>,
    _ condition: Comment,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    try await waitUntil(condition, sourceLocation: sourceLocation) {
        _ = try await consumer.poll(timeout: .milliseconds(100))
        return Set(try consumer.assignment()) == partitions
    }
}

/// Polls until `count` messages arrived (or the deadline passed).
func consume(_ consumer: KafkaConsumer, count: Int) async throws -> [KafkaMessage] {
    var messages: [KafkaMessage] = []
    try await waitUntil("\(count) messages consumed") {
        messages += try await consumer.poll(maxMessages: 500, timeout: .milliseconds(200))
        return messages.count >= count
    }
    return messages
}

/// Thread-safe append-only log for callbacks and event streams.
final class Recorder<Element: Sendable>: Sendable {
    private let items = Mutex<[Element]>([])
    func append(_ item: Element) { items.withLock { $0.append(item) } }
    var all: [Element] { items.withLock { $0 } }
}

/// Repeats `attempt`, which itself waits (a consumer's poll), until it returns true, with the
/// suite's one polling helper (``eventually(_:within:every:sourceLocation:_:)``); when the
/// time is up the issue is recorded and the test goes no further.
func waitUntil(
    _ condition: Comment,
    within deadline: Duration = .seconds(60),
    sourceLocation: SourceLocation = #_sourceLocation,
    _ attempt: () async throws -> Bool
) async throws {
    let done = try await eventually(condition, within: deadline, every: .zero, sourceLocation: sourceLocation, attempt)
    if !done { throw CancellationError() }
}
