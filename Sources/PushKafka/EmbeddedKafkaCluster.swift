import CRdKafka
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
        let err = handles.withLock { handles in
            handles.map { rd_kafka_mock_topic_create($0.cluster, name, partitions, replicationFactor) }
        }
        guard let err else { throw KafkaError.closed("EmbeddedKafkaCluster") }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(err, context: "Cannot create topic '\(name)' with \(partitions) partitions")
        }
    }

    /// Delays every answer of broker `id` (1-based) by `delay`, as a slow or distant broker
    /// would; `.zero` restores it. For tests of timeouts.
    public func setRoundTripTime(broker id: Int32, _ delay: Duration) throws(KafkaError) {
        let milliseconds = Int32(
            clamping: delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000
        )
        let err = handles.withLock { handles in
            handles.map { rd_kafka_mock_broker_set_rtt($0.cluster, id, milliseconds) }
        }
        guard let err else { throw KafkaError.closed("EmbeddedKafkaCluster") }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(err, context: "Cannot set broker \(id)'s round-trip time")
        }
    }

    /// Takes broker `id` (1-based) down: its connections are cut and new ones refused, as when a
    /// broker's host goes away, until ``setBrokerUp(_:)``. Leadership does not move.
    public func setBrokerDown(_ id: Int32) throws(KafkaError) {
        let err = handles.withLock { handles in handles.map { rd_kafka_mock_broker_set_down($0.cluster, id) } }
        guard let err else { throw KafkaError.closed("EmbeddedKafkaCluster") }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: "Cannot take broker \(id) down") }
    }

    /// Brings broker `id` back after ``setBrokerDown(_:)``.
    public func setBrokerUp(_ id: Int32) throws(KafkaError) {
        let err = handles.withLock { handles in handles.map { rd_kafka_mock_broker_set_up($0.cluster, id) } }
        guard let err else { throw KafkaError.closed("EmbeddedKafkaCluster") }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: "Cannot bring broker \(id) up") }
    }

    /// Makes the brokers refuse every offset commit with "Group rebalance in progress", as a
    /// coordinator does while a rebalance is under way, until ``acceptOffsetCommits()``. For
    /// tests of hand-overs whose commit fails.
    public func refuseOffsetCommits() {
        // OffsetCommit is Kafka API key 8; each refused request takes one error off the stack.
        let errors = [rd_kafka_resp_err_t](repeating: RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, count: 100_000)
        handles.withLock { handles in
            guard let handles else { return }
            errors.withUnsafeBufferPointer {
                rd_kafka_mock_push_request_errors_array(handles.cluster, 8, $0.count, $0.baseAddress)
            }
        }
    }

    /// Ends ``refuseOffsetCommits()``.
    public func acceptOffsetCommits() {
        handles.withLock { handles in
            guard let handles else { return }
            rd_kafka_mock_clear_request_errors(handles.cluster, 8)
        }
    }

    /// Stops the brokers and frees the cluster. Idempotent; also done on deinit.
    /// Clients still connected see their connections refused.
    public func shutdown() {
        guard let handles = handles.withLock({ $0.take() }) else { return }
        rd_kafka_mock_cluster_destroy(handles.cluster)
        rd_kafka_destroy(handles.client)
    }
}
