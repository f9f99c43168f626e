import CRdKafka

/// Facts about the linked librdkafka. The rest of the Kafka layer builds on this module;
/// it is the only module that imports `CRdKafka`.
public enum RdKafkaLibrary {
    /// The version string of the librdkafka the process is linked against, e.g. `"2.0.2"`.
    public static var version: String {
        String(cString: rd_kafka_version_str())
    }

    /// Starts librdkafka's mock cluster (a Kafka-protocol broker on 127.0.0.1) with `brokers`
    /// brokers, asks it for its bootstrap servers and stops it again. Proves that the mock
    /// cluster API is present in the linked library.
    public static func probeMockCluster(brokers: Int32 = 1) throws -> String {
        var errstr = [CChar](repeating: 0, count: 512)
        let conf = rd_kafka_conf_new()
        rd_kafka_conf_set(conf, "log_level", "0", &errstr, errstr.count)
        guard let handle = rd_kafka_new(RD_KAFKA_PRODUCER, conf, &errstr, errstr.count) else {
            throw RdKafkaProbeError(message: String(decoding: errstr.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        defer { rd_kafka_destroy(handle) }
        guard let cluster = rd_kafka_mock_cluster_new(handle, brokers) else {
            throw RdKafkaProbeError(message: "librdkafka could not start its mock cluster")
        }
        defer { rd_kafka_mock_cluster_destroy(cluster) }
        return String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }
}

public struct RdKafkaProbeError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
