import CRdKafka
import Dispatch
import Synchronization

/// Owns the pointer of one `rd_kafka_t`. Safe to share: librdkafka handles are thread-safe.
final class RdKafkaHandle: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

/// Creates a client from `conf`, which it always consumes.
package func makeClient(_ type: rd_kafka_type_t, _ conf: OpaquePointer) throws(KafkaError) -> OpaquePointer {
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

    /// ``run(_:)`` that stops waiting when the calling task is cancelled (throwing
    /// ``KafkaError/cancelled(_:)``) or, with a `timeout`, when that passes (throwing
    /// `_TIMED_OUT`). The work itself still runs to its end on this queue; its result is then
    /// dropped. For blocking librdkafka calls whose answer may never come (a broker that is
    /// gone), so that a caller that stops is not held by them.
    func run<T: Sendable>(
        what: String,
        abandoningAfter timeout: Duration? = nil,
        _ body: @escaping @Sendable () throws(KafkaError) -> T
    ) async throws(KafkaError) -> T {
        let answer = OneAnswer<T>()
        let result: Result<T, KafkaError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                guard answer.wait(continuation) else { return }
                self.async { answer.give(Result(catching: body)) }
                if let timeout {
                    DispatchQueue.global().asyncAfter(
                        deadline: .now() + .nanoseconds(Int(clamping: timeout.nanoseconds))
                    ) {
                        answer.give(
                            .failure(
                                KafkaError(
                                    RD_KAFKA_RESP_ERR__TIMED_OUT,
                                    "\(what) did not finish within \(timeout)",
                                    isRetriable: false
                                )
                            )
                        )
                    }
                }
            }
        } onCancel: {
            answer.give(.failure(.cancelled(what)))
        }
        return try result.get()
    }
}

extension Duration {
    /// Whole nanoseconds, saturating.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? (seconds < 0 ? .min : .max) : scaled &+ attoseconds / 1_000_000_000
    }
}

/// The first of several possible answers to one waiter: the work's result, a cancellation or a
/// timeout. Later answers are dropped.
final class OneAnswer<T: Sendable>: Sendable {
    private enum State {
        case idle
        case waiting(CheckedContinuation<Result<T, KafkaError>, Never>)
        /// Answered before anyone waited (a task cancelled before it suspended).
        case answered(Result<T, KafkaError>)
        case done
    }

    private let state = Mutex<State>(.idle)

    /// Installs the waiter; `false` if an answer came first (the waiter is resumed with it).
    func wait(_ continuation: CheckedContinuation<Result<T, KafkaError>, Never>) -> Bool {
        let early = state.withLock { state -> Result<T, KafkaError>? in
            if case .answered(let result) = state {
                state = .done
                return result
            }
            state = .waiting(continuation)
            return nil
        }
        guard let early else { return true }
        continuation.resume(returning: early)
        return false
    }

    func give(_ result: Result<T, KafkaError>) {
        let waiter = state.withLock { state -> CheckedContinuation<Result<T, KafkaError>, Never>? in
            switch state {
            case .idle:
                state = .answered(result)
                return nil
            case .waiting(let continuation):
                state = .done
                return continuation
            case .answered, .done:
                return nil
            }
        }
        waiter?.resume(returning: result)
    }
}
