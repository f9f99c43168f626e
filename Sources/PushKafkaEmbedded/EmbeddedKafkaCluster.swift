import CRdKafka
import PushKafka
import Synchronization

/// An in-process Kafka cluster (librdkafka's mock cluster) listening on 127.0.0.1,
/// speaking the real Kafka protocol. Meant for tests and local development: data
/// lives in memory and is gone after `shutdown()`.
///
/// librdkafka 2.0.2's mock cluster supports idempotent producing, consumer groups
/// (including cooperative-sticky) and offset commits, but offsets sent in a
/// transaction never become visible as committed: do not use transactions with it.
/// It auto-creates unknown topics (4 partitions) on first metadata request.
/// Group joins take about 3 s; later rebalances wait up to
/// `session.timeout.ms` − 1 s for members to rejoin.
public final class EmbeddedKafkaCluster: Sendable {
    /// Comma-separated `host:port` list for `bootstrap.servers`.
    public let bootstrapServers: String

    private struct Handles {
        let client: OpaquePointer  // dummy producer the mock cluster is attached to
        let cluster: OpaquePointer
    }

    private let handles: Mutex<Handles?>

    public init(brokers: Int = 1) throws(KafkaError) {
        guard brokers > 0 else {
            throw KafkaError(
                RD_KAFKA_RESP_ERR__INVALID_ARG,
                "EmbeddedKafkaCluster needs at least one broker, got \(brokers)"
            )
        }
        let conf = try KafkaConfiguration().makeConf(defaults: [
            "client.id": "embedded-kafka-cluster",
            "log_level": "4",  // the dummy client's missing bootstrap.servers is expected
            // The brokers' connections inherit this client's socket settings: without it a
            // response written in two segments waits for the client's delayed ACK (~40 ms).
            "socket.nagle.disable": "true",
        ])
        let client = try makeClient(RD_KAFKA_PRODUCER, conf)
        guard let cluster = rd_kafka_mock_cluster_new(client, Int32(clamping: brokers)) else {
            rd_kafka_destroy(client)
            throw KafkaError(
                RD_KAFKA_RESP_ERR__FAIL,
                "Cannot start the embedded Kafka cluster (rd_kafka_mock_cluster_new failed)"
            )
        }
        bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
        handles = Mutex(Handles(client: client, cluster: cluster))
    }

    deinit { shutdown() }

    /// Creates a topic. Without this, the cluster auto-creates topics on first use
    /// with its default partition count.
    public func createTopic(_ name: String, partitions: Int32, replicationFactor: Int32 = 1) throws(KafkaError) {
        try call("Cannot create topic '\(name)' with \(partitions) partitions") {
            rd_kafka_mock_topic_create($0, name, partitions, replicationFactor)
        }
    }

    /// Delays every answer of broker `id` (1-based; `nil` for every broker) by `delay`, as a slow
    /// or distant broker would; `.zero` restores it. For tests of timeouts.
    public func setRoundTripTime(broker id: Int32?, _ delay: Duration) throws(KafkaError) {
        let milliseconds = Int32(clamping: delay.wholeMilliseconds)
        try call("Cannot set broker \(Self.describe(id))'s round-trip time") {
            rd_kafka_mock_broker_set_rtt($0, id ?? -1, milliseconds)
        }
    }

    /// Takes broker `id` (1-based; `nil` for every broker) down: its connections are cut and new
    /// ones refused, as when a broker's host goes away, until ``setBrokerUp(_:)``. Neither
    /// partition leadership nor group coordination moves (a real cluster's controller would
    /// move leadership to another replica): see ``setPartitionLeader(topic:partition:broker:)``
    /// and ``setGroupCoordinator(group:broker:)``.
    public func setBrokerDown(_ id: Int32?) throws(KafkaError) {
        try call("Cannot take broker \(Self.describe(id)) down") { rd_kafka_mock_broker_set_down($0, id ?? -1) }
    }

    /// Brings broker `id` (`nil` for every broker) back after ``setBrokerDown(_:)``.
    public func setBrokerUp(_ id: Int32?) throws(KafkaError) {
        try call("Cannot bring broker \(Self.describe(id)) up") { rd_kafka_mock_broker_set_up($0, id ?? -1) }
    }

    /// Makes broker `id` the leader of `topic`'s `partition`, as a controller does when it moves
    /// leadership; `nil` leaves the partition without a leader. The old leader answers requests
    /// for the partition with "not leader", and clients find the new one in fresh metadata.
    public func setPartitionLeader(topic: String, partition: Int32, broker id: Int32?) throws(KafkaError) {
        try call("Cannot make broker \(id.map(String.init) ?? "none") the leader of \(topic) [\(partition)]") {
            rd_kafka_mock_partition_set_leader($0, topic, partition, id ?? -1)
        }
    }

    /// Makes broker `id` the coordinator of consumer group `group` (by default the cluster picks
    /// one by hashing the group's name). The other brokers answer the group's requests with "not
    /// coordinator" and the members look it up again; the group's members, generation and
    /// committed offsets belong to the cluster, so they move with it.
    public func setGroupCoordinator(group: String, broker id: Int32) throws(KafkaError) {
        try call("Cannot make broker \(id) the coordinator of group '\(group)'") {
            rd_kafka_mock_coordinator_set($0, "group", group, id)
        }
    }

    /// Makes the next `errors.count` requests of type `request`, to any broker, fail: the first
    /// with `errors[0]`, and so on. A request failed this way changes nothing (a produce appends
    /// nothing, a commit commits nothing). ``KafkaErrorCode/transport`` cuts the connection instead.
    public func pushRequestErrors(_ request: KafkaRequestType, _ errors: [KafkaErrorCode]) {
        let codes = errors.map { rd_kafka_resp_err_t($0.code) }
        handles.withLock { handles in
            guard let handles else { return }
            codes.withUnsafeBufferPointer {
                rd_kafka_mock_push_request_errors_array(handles.cluster, request.rawValue, $0.count, $0.baseAddress)
            }
        }
    }

    /// Like ``pushRequestErrors(_:_:)`` for broker `id` alone, each answer after its delay
    /// (``KafkaErrorCode/noError`` answers normally, only late). These come before the cluster's.
    public func pushRequestErrors(
        broker id: Int32,
        _ request: KafkaRequestType,
        _ errors: [(error: KafkaErrorCode, delay: Duration)]
    ) throws(KafkaError) {
        for (error, delay) in errors {
            let milliseconds = Int32(clamping: delay.wholeMilliseconds)
            try call("Cannot push errors on broker \(id)'s \(request.name) requests") {
                apn_mock_broker_push_request_error_rtt(
                    $0,
                    id,
                    request.rawValue,
                    rd_kafka_resp_err_t(error.code),
                    milliseconds
                )
            }
        }
    }

    /// Drops the cluster-wide errors still waiting for requests of type `request`.
    public func clearRequestErrors(_ request: KafkaRequestType) {
        handles.withLock { handles in
            guard let handles else { return }
            rd_kafka_mock_clear_request_errors(handles.cluster, request.rawValue)
        }
    }

    /// Makes the brokers refuse every offset commit with "Group rebalance in progress", as a
    /// coordinator does while a rebalance is under way, until ``acceptOffsetCommits()``. For
    /// tests of hand-overs whose commit fails.
    public func refuseOffsetCommits() {
        // Each refused request takes one error off the stack.
        pushRequestErrors(.offsetCommit, Array(repeating: .rebalanceInProgress, count: 100_000))
    }

    /// Ends ``refuseOffsetCommits()``.
    public func acceptOffsetCommits() {
        clearRequestErrors(.offsetCommit)
    }

    /// Stops the brokers and frees the cluster. Idempotent; also done on deinit.
    /// Clients still connected see their connections refused.
    public func shutdown() {
        guard let handles = handles.withLock({ $0.take() }) else { return }
        rd_kafka_mock_cluster_destroy(handles.cluster)
        rd_kafka_destroy(handles.client)
    }

    /// Runs one mock-cluster call that answers an error code, under the lock.
    private func call(
        _ context: @autoclosure () -> String,
        _ body: @Sendable (OpaquePointer) -> rd_kafka_resp_err_t
    ) throws(KafkaError) {
        let err = handles.withLock { handles in handles.map { body($0.cluster) } }
        guard let err else { throw KafkaError.closed("EmbeddedKafkaCluster") }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: context()) }
    }

    private static func describe(_ broker: Int32?) -> String { broker.map(String.init) ?? "all" }
}

extension Duration {
    /// Whole milliseconds, rounded down.
    fileprivate var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
