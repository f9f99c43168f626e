import APNSBinary
import APNSCore
import Logging
import PushKafka

/// Polls the feedback service of one (app, environment) (§2): one worker at a time, chosen by a
/// Redis lock that lasts one interval. Tokens go to the unregistered store and become `feedback`
/// results.
struct FeedbackStage: Sendable {
    var app: String
    var environment: APNSEnvironment
    /// The feedback service and the credentials in force (they follow a credential reload).
    var configuration: @Sendable () -> APNSFeedbackClient.Configuration?
    var interval: Duration
    var store: NotificationStore
    var producer: KafkaProducer
    var factory: ResultFactory
    var control: PipelineControl
    var resultsTopic: String
    var dedupeTTLSeconds: Int
    var logger: Logger

    func run() async {
        let lockTTL = Int(interval / .milliseconds(1))
        while !Task.isCancelled {
            do {
                if try await store.tryFeedbackLock(
                    app: app,
                    environment: environment.rawValue,
                    ttlMilliseconds: max(1000, lockTTL)
                ) {
                    try await poll()
                }
            } catch {
                logger.warning(
                    "Feedback polling failed",
                    metadata: ["app": "\(app)", "env": "\(environment)", "error": "\(error)"]
                )
            }
            do { try await Task.sleep(for: interval) } catch { return }
        }
    }

    /// The unregistered tokens to store and the `feedback` results to produce for what the
    /// service read (token, UNIX seconds); no I/O.
    static func results(
        of tuples: [(token: DeviceToken, timestamp: Int64)],
        app: String,
        environment: String,
        topic: String,
        factory: ResultFactory
    ) -> (
        unregistered: [(app: String, environment: String, token: String, since: Int64, reason: String)],
        messages: [KafkaOutgoingMessage]
    ) {
        let now = factory.now()
        let unregistered = tuples.map {
            (
                app: app, environment: environment, token: $0.token.hex, since: $0.timestamp,
                reason: TokenVerdict.unregistered
            )
        }
        let messages = tuples.map { tuple in
            let message = factory.feedback(
                app: app,
                environment: environment,
                token: tuple.token.hex,
                timestamp: tuple.timestamp,
                at: now
            )
            return KafkaOutgoingMessage(topic: topic, key: message.key, value: message.value)
        }
        return (unregistered, messages)
    }

    private func poll() async throws {
        guard let configuration = configuration() else { return }
        let client = try APNSFeedbackClient(configuration: configuration, logger: logger)
        let tuples = try await client.fetch()
        guard !tuples.isEmpty else { return }
        let env = environment.rawValue
        let (unregistered, messages) = Self.results(
            of: tuples.map { ($0.token, Int64($0.timestamp)) },
            app: app,
            environment: env,
            topic: resultsTopic,
            factory: factory
        )
        try await store.write(records: [], unregistered: unregistered, released: [], ttlSeconds: dedupeTTLSeconds)
        var pending = messages
        while !pending.isEmpty {
            let reports = try await producer.send(pending)
            pending = zip(pending, reports).compactMap { message, report in
                if case .failure = report { message } else { nil }
            }
            control.metrics.increment(MetricCatalogue.produceErrors, by: pending.count)
            if !pending.isEmpty { try await Task.sleep(for: .milliseconds(200)) }
        }
        control.count { $0.feedback += tuples.count }
        control.metrics.increment(MetricCatalogue.feedbackTokens, [app, env], by: tuples.count)
        control.metrics.produced(
            Array(repeating: ResultMetric(kind: .feedback, environment: environment, app: app), count: tuples.count),
            transports: [app: "binary"],
            now: factory.now()
        )
        logger.info("Feedback read", metadata: ["app": "\(app)", "env": "\(env)", "tokens": "\(tuples.count)"])
    }
}
