import CRdKafka

/// An error reported by librdkafka or by this wrapper.
///
/// `code` is librdkafka's `rd_kafka_resp_err_t` value and `name` its symbolic
/// name (for example `_MSG_TIMED_OUT`, `UNKNOWN_TOPIC_OR_PART`); both are stable
/// across releases and safe to match on. Negative codes are client-local
/// errors, positive codes come from the broker.
public struct KafkaError: Error, Sendable, Hashable, CustomStringConvertible {
    public let code: Int32
    public let name: String
    /// What went wrong, including the librdkafka detail text.
    public let message: String
    /// The operation may succeed if retried unchanged.
    public let isRetriable: Bool
    /// The client instance is unusable and must be recreated.
    public let isFatal: Bool

    public var description: String { "KafkaError(\(name) [\(code)]): \(message)" }

    /// The record is over `message.max.bytes` (the producer's or the broker's): sending it again
    /// unchanged can never succeed.
    public var isMessageTooLarge: Bool { code == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE.rawValue }

    package init(_ err: rd_kafka_resp_err_t, _ message: String, isRetriable: Bool? = nil, isFatal: Bool? = nil) {
        code = err.rawValue
        name = String(cString: rd_kafka_err2name(err))
        self.message = message
        self.isRetriable = isRetriable ?? Self.retriableCodes.contains(err.rawValue)
        self.isFatal = isFatal ?? (err == RD_KAFKA_RESP_ERR__FATAL)
    }

    /// An error whose message is librdkafka's description of `err`, optionally prefixed with context.
    package init(_ err: rd_kafka_resp_err_t, context: String? = nil) {
        let text = String(cString: rd_kafka_err2str(err))
        self.init(err, context.map { "\($0): \(text)" } ?? text)
    }

    /// Copies and destroys an `rd_kafka_error_t`.
    init(consuming error: OpaquePointer, context: String? = nil) {
        defer { rd_kafka_error_destroy(error) }
        let text = String(cString: rd_kafka_error_string(error))
        self.init(
            rd_kafka_error_code(error),
            context.map { "\($0): \(text)" } ?? text,
            isRetriable: rd_kafka_error_is_retriable(error) != 0,
            isFatal: rd_kafka_error_is_fatal(error) != 0
        )
    }

    package static func closed(_ what: String) -> KafkaError {
        KafkaError(RD_KAFKA_RESP_ERR__DESTROY, "\(what) is closed")
    }

    /// The caller's task was cancelled while it waited for `what`; the operation may still
    /// complete in the background.
    static func cancelled(_ what: String) -> KafkaError {
        KafkaError(RD_KAFKA_RESP_ERR__INTR, "\(what): stopped waiting, the task was cancelled", isRetriable: false)
    }

    /// The caller stopped waiting because its task was cancelled (see ``cancelled(_:)``).
    public var isCancellation: Bool { code == RD_KAFKA_RESP_ERR__INTR.rawValue }

    /// The client was closed: nothing more can be done with it.
    public var isClosed: Bool { code == RD_KAFKA_RESP_ERR__DESTROY.rawValue }

    /// Errors that are transient by nature (librdkafka only flags retriability on `rd_kafka_error_t`).
    private static let retriableCodes: Set<Int32> = Set(
        [
            RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__TIMED_OUT, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT,
            RD_KAFKA_RESP_ERR__QUEUE_FULL, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR__RESOLVE,
            RD_KAFKA_RESP_ERR__WAIT_COORD, RD_KAFKA_RESP_ERR__IN_PROGRESS, RD_KAFKA_RESP_ERR__RETRY,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION,
            RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR,
            RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS, RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS,
            RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH, RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH,
            RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_THROTTLING_QUOTA_EXCEEDED,
        ].map(\.rawValue)
    )
}
