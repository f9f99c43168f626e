import Logging
import PushKafka

extension KafkaProducer {
    /// Produces `messages` until Kafka has acknowledged each, retrying the others with back-off
    /// (50 ms doubling to 2 s). A message the producer refuses as too large is logged and
    /// skipped: retrying could never write it, and it would hold up everything behind it.
    /// `what` names the messages in log lines (`"result"`, `"job summary"`); `attempted` is
    /// called after every attempt. Returns `false` when the task is cancelled meanwhile.
    func produceAll(
        _ messages: [KafkaOutgoingMessage],
        what: String,
        control: PipelineControl,
        logger: Logger,
        attempted: () -> Void = {}
    ) async -> Bool {
        var pending = messages
        var delay: Duration = .milliseconds(50)
        while !pending.isEmpty {
            if Task.isCancelled { return false }
            var failed: [KafkaOutgoingMessage] = []
            do {
                let reports = try await send(pending)
                var retriable: KafkaError?
                for (message, report) in zip(pending, reports) {
                    guard case .failure(let error) = report else { continue }
                    control.metrics.increment(MetricCatalogue.produceErrors)
                    if error.isMessageTooLarge {
                        logger.error(
                            "A \(what) is over the producer's message.max.bytes and is not written; raise kafka.properties.message.max.bytes",
                            metadata: [
                                "bytes": "\(message.value.count + (message.key?.count ?? 0))", "error": "\(error)",
                            ]
                        )
                        continue
                    }
                    failed.append(message)
                    retriable = retriable ?? error
                }
                if let retriable {
                    logger.warning(
                        "Some \(what)s were not written; retrying",
                        metadata: ["count": "\(failed.count)", "error": "\(retriable)"]
                    )
                }
            } catch {
                logger.error("Cannot write \(what)s to Kafka; retrying", metadata: ["error": "\(error)"])
                control.metrics.increment(MetricCatalogue.produceErrors, by: pending.count)
                failed = pending
            }
            pending = failed
            attempted()
            if !pending.isEmpty {
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
        return true
    }
}
