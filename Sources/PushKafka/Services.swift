import ServiceLifecycle

/// The consumer as a service: it runs until its group shuts down (or is cancelled), then leaves
/// the consumer group. Whoever polls it (the worker) is a later service of the same group, so it
/// has stopped polling and stored its offsets by then; librdkafka commits them on close.
extension KafkaConsumer: Service {
    public func run() async throws {
        try? await gracefulShutdown()
        try await close()
    }
}

/// The producer as a service: it runs until its group shuts down (or is cancelled), then
/// waits up to 10 s for the messages it holds and closes.
extension KafkaProducer: Service {
    public func run() async throws {
        try? await gracefulShutdown()
        await close(timeout: .seconds(10))
    }
}
