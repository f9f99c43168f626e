import CRdKafka
import Dispatch

/// Owns the pointer of one `rd_kafka_t`. Safe to share: librdkafka handles are thread-safe.
final class RdKafkaHandle: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

/// Creates a client from `conf`, which it always consumes.
func makeClient(_ type: rd_kafka_type_t, _ conf: OpaquePointer) throws(KafkaError) -> OpaquePointer {
    var errstr = [CChar](repeating: 0, count: 512)
    guard let rk = rd_kafka_new(type, conf, &errstr, errstr.count) else {
        rd_kafka_conf_destroy(conf)
        let detail = errstr.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        throw KafkaError(RD_KAFKA_RESP_ERR__INVALID_ARG, "Cannot create Kafka client: \(detail)")
    }
    return rk
}

extension DispatchQueue {
    /// Runs blocking librdkafka work on this queue, keeping it off Swift's cooperative pool.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws(KafkaError) -> T) async throws(KafkaError) -> T {
        let result: Result<T, KafkaError> = await withCheckedContinuation { continuation in
            self.async { continuation.resume(returning: Result(catching: body)) }
        }
        return try result.get()
    }
}
