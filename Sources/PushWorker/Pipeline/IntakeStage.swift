import APNSCore
import Logging
import PushConfiguration
import PushKafka

/// The first stage: Kafka messages in, jobs parsed, notifications out to the claim stage and
/// error results out to the result stage. It waits for room under `maxInFlight` before it polls,
/// so a slow stage anywhere behind it slows consumption instead of growing a queue.
struct IntakeStage: Sendable {
    /// What parsing part of a batch produced, handed on as one piece.
    struct Chunk: Sendable {
        /// Each message, with how many results it waits for (0: nothing to do, e.g. no tokens).
        var registrations: [(MessageRef, Int)] = []
        var results: [ResultItem] = []
        var candidates: [Candidate] = []
        var messages = 0
        /// The messages whose jobs asked for a summary (each registered with one result more).
        var summaries: [(MessageRef, PendingSummary)] = []
    }

    /// How long parsing may go on before what is parsed is handed on, so the results of a
    /// batch's first messages (of any partition) never wait for the parsing of many large ones.
    static let handOverInterval: Duration = .milliseconds(20)

    let parser: JobParser
    let apps: [String: WorkerConfiguration.App]
    let factory: ResultFactory
    let logger: Logger

    init(configuration: WorkerConfiguration, factory: ResultFactory, logger: Logger) {
        var parser = JobParser()
        parser.http2Apps = Set(
            configuration.apps.filter { $0.value.transport == .http2 }.keys)
        self.parser = parser
        self.apps = configuration.apps
        self.factory = factory
        self.logger = logger
    }

    // MARK: Parsing (no I/O)

    /// Parses `messages` in order; `handOver` receives what is parsed at least every
    /// ``handOverInterval`` and once at the end.
    func parse(_ messages: [KafkaMessage], epoch: UInt64, handOver: (Chunk) async -> Void) async {
        var chunk = Chunk()
        var now = factory.now()
        var handedOver = ContinuousClock.now
        for message in messages {
            if ContinuousClock.now - handedOver >= Self.handOverInterval {
                await handOver(chunk)
                chunk = Chunk()
                handedOver = .now
                now = factory.now()
            }
            chunk.messages += 1
            let ref = MessageRef(partition: TopicPartition(topic: message.topic, partition: message.partition), offset: message.offset)
            let before = chunk.results.count + chunk.candidates.count
            let summaries = chunk.summaries.count
            parse(message, ref: ref, epoch: epoch, now: now, into: &chunk)
            let results = chunk.results.count + chunk.candidates.count - before
            if chunk.summaries.count > summaries {
                // The job asked for a summary: one result more, the summary's place.
                chunk.summaries[summaries].1.remaining = results
                chunk.registrations.append((ref, results + 1))
            } else {
                chunk.registrations.append((ref, results))
            }
        }
        await handOver(chunk)
    }

    private func parse(_ message: KafkaMessage, ref: MessageRef, epoch: UInt64, now: Int64, into chunk: inout Chunk) {
        var place: String { "\(message.topic)[\(message.partition)]@\(message.offset)" }
        switch parser.parse(message.value) {
        case .unreadable(let jobId, let app, let reason):
            logger.warning("Rejected message \(place): \(reason).")
            chunk.results.append(factory.invalidJob(ref, jobId: jobId, app: app, reason: reason, at: now))
        case .rejected(let jobId, let app, let tokens, let reason):
            logger.warning("Rejected job \(jobId) at \(place): \(reason).")
            for token in tokens {
                chunk.results.append(
                    factory.rejected(
                        ref, jobId: jobId, app: app, environment: nil, token: token,
                        status: .invalidJob, reason: reason, at: now))
            }
        case .job(let job):
            func expectSummary(environment: String?) {
                if job.summary { chunk.summaries.append((ref, PendingSummary(job: job, environment: environment, ref: ref))) }
            }
            func reject(_ reason: String, environment: String?) {
                expectSummary(environment: environment)
                logger.warning("Rejected job \(job.id) at \(place): \(reason).")
                for token in job.tokens {
                    chunk.results.append(
                        factory.rejected(
                            ref, jobId: job.id, app: job.app, environment: environment,
                            token: token.text, status: .invalidJob, reason: reason, at: now))
                }
            }
            guard let app = apps[job.app] else {
                let configured = apps.keys.sorted().joined(separator: ", ")
                reject("app \"\(job.app.abbreviated())\" is not configured; configured apps: \(configured)", environment: job.environment)
                return
            }
            let environment = job.environment.flatMap(APNSEnvironment.init(rawValue:)) ?? app.defaultEnvironment
            guard app.environments[environment] != nil else {
                reject("app \"\(job.app)\" has no \(environment) environment configured", environment: environment.rawValue)
                return
            }
            let shared = SharedJob(job, environment: environment, app: app, producedAt: message.timestamp ?? now)
            expectSummary(environment: environment.rawValue)
            for token in job.tokens {
                switch token {
                case .malformed(let text, let reason):
                    chunk.results.append(
                        factory.rejected(
                            ref, jobId: job.id, app: job.app, environment: environment.rawValue,
                            token: text, status: .malformedToken, reason: reason, at: now))
                case .valid(let deviceToken):
                    let hex = deviceToken.hex
                    if let payloadError = job.payloadError {
                        chunk.results.append(
                            factory.rejected(
                                ref, jobId: job.id, app: job.app, environment: environment.rawValue,
                                token: hex, status: .invalidPayload, reason: payloadError, at: now))
                    } else {
                        chunk.candidates.append(
                            Candidate(
                                ref: ref, job: shared, token: deviceToken, tokenHex: hex,
                                resultId: WorkerResult.notificationId(jobId: job.id, token: hex), epoch: epoch))
                    }
                }
            }
            if let payloadError = job.payloadError {
                logger.warning("Job \(job.id) at \(place) cannot be sent: \(payloadError).")
            }
        }
    }

    // MARK: Consumption

    /// Consumes until the worker stops: waits for room, polls a batch, parses it and hands it on.
    /// While Redis is unreachable the assigned partitions are paused and polling goes on, so the
    /// group keeps this member.
    func run(
        consumer: KafkaConsumer, batchSize: Int, window: Duration, control: PipelineControl, limit: InFlightLimit,
        results: ResultStage, claims: ClaimStage
    ) async throws {
        var paused = false
        while true {
            await limit.waitForRoom()
            if control.isStopping { return }
            let redisDown = control.isRedisDown
            if redisDown || paused {
                if let assigned = try? consumer.assignment(), !assigned.isEmpty {
                    if redisDown { try? consumer.pause(assigned) } else { try? consumer.resume(assigned) }
                }
                if redisDown != paused {
                    logger.notice(redisDown ? "Redis is unreachable: consumption paused" : "Redis is back: consumption resumed")
                }
                paused = redisDown
            }
            let messages: [KafkaMessage]
            do {
                messages = try await Self.pollBatch(consumer, batchSize: batchSize, window: window)
            } catch {
                if error.isFatal { throw WorkerError("Kafka consumer failed: \(error)") }
                logger.warning("Kafka consumer error", metadata: ["error": "\(error)"])
                continue
            }
            if messages.isEmpty { continue }
            await parse(messages, epoch: control.epoch) { chunk in
                results.register(chunk.registrations)
                results.registerSummaries(chunk.summaries)
                control.count { s in
                    s.messages += chunk.messages
                    s.notifications += chunk.candidates.count
                    s.rejected += chunk.results.count
                }
                results.submit(chunk.results)
                claims.handOver(chunk.candidates)
            }
        }
    }

    /// Polls a batch: up to `batchSize` messages, gathered for at most `window` once the first
    /// arrived.
    static func pollBatch(_ consumer: KafkaConsumer, batchSize: Int, window: Duration) async throws(KafkaError) -> [KafkaMessage] {
        var messages = try await consumer.poll(maxMessages: batchSize, timeout: .milliseconds(100))
        guard !messages.isEmpty else { return messages }
        let deadline = ContinuousClock.now + window
        while messages.count < batchSize {
            let remaining = deadline - .now
            if remaining <= .zero { break }
            let more = try await consumer.poll(maxMessages: batchSize - messages.count, timeout: remaining)
            if more.isEmpty { break }
            messages += more
        }
        return messages
    }
}
