import Logging
import ServiceLifecycle

/// The consumer as a service: it runs until its group shuts down (or is cancelled), then leaves
/// the consumer group, waiting for that at most 5 s (``KafkaConsumer/close(timeout:)``). Whoever
/// polls it (the worker) is a later service of the same group, so it has stopped polling and
/// stored its offsets by then; librdkafka commits them on close.
///
/// A close that cannot finish (a coordinator that is gone, or the group's cancellation of a
/// stop that took too long) is logged, not thrown: the member has stopped consuming either way,
/// and the group drops it after its session timeout.
extension KafkaConsumer: Service {
    public func run() async throws {
        try? await gracefulShutdown()
        do {
            try await close()
        } catch {
            logger.warning("Left the consumer group without a clean close", metadata: ["error": "\(error)"])
        }
    }
}

/// The producer as a service: it runs until its group shuts down (or is cancelled), then
/// waits up to 2 s for the messages it holds and closes. (Whoever sends through it waited for
/// their acknowledgements before it stopped: what is left is what a Kafka that is gone did not
/// acknowledge, and whose input the sender did not commit.)
extension KafkaProducer: Service {
    public func run() async throws {
        try? await gracefulShutdown()
        await close(timeout: .seconds(2))
    }
}
