import APNSCore
import APNSHTTP2
import APNSHTTP2Core
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
        /// Messages skipped because their results are written (``Handoffs``).
        var skipped = 0
    }

    /// How intake keeps what it expands within `maxInFlight`: the budget is charged as each job
    /// is expanded into notifications and results, not per message, so a batch of jobs with
    /// 10,000 tokens each stops at the budget instead of bringing millions into memory. At most
    /// one job's worth passes the budget: the job that spends it is parsed whole.
    struct Admission: Sendable {
        /// Places left under the budget now (``PipelineLedger/room``).
        var room: @Sendable () -> Int
        /// Waits until there is room again; `false` when the worker is stopping instead.
        var wait: @Sendable () async -> Bool
        /// Whether a message was fetched before its partition was revoked.
        var revoked: @Sendable (KafkaMessage) -> Bool

        /// The admission of a worker's pipeline.
        static func of(_ ledger: SharedLedger, _ control: PipelineControl) -> Admission {
            Admission(
                room: { ledger.read(\.room) },
                wait: {
                    await ledger.waitForRoom()
                    return !control.isStopping && !Task.isCancelled
                },
                revoked: { message in
                    let partition = TopicPartition(topic: message.topic, partition: message.partition)
                    return (control.revocations()[partition] ?? 0) > message.rebalanceGeneration
                }
            )
        }
    }

    /// How long parsing may go on before what is parsed is handed on, so the results of a
    /// batch's first messages (of any partition) never wait for the parsing of many large ones.
    static let handOverInterval: Duration = .milliseconds(20)

    let parser: JobParser
    /// The configured apps, each boxed: a lookup per job hands on a reference rather than a
    /// copy of the app's settings (a struct of many strings).
    let apps: [String: AppSettings]

    final class AppSettings: Sendable {
        let app: WorkerConfiguration.App
        init(_ app: WorkerConfiguration.App) { self.app = app }
    }
    let factory: ResultFactory
    let logger: Logger
    /// The topics read, in priority order (``WorkerConfiguration/Kafka/consumedTopics``): the
    /// priority lanes, then the parked topic.
    let lanes: Int
    /// The part of `maxInFlight` that only the highest lane may take: a tenth.
    static func laneReserve(_ configuration: WorkerConfiguration) -> Int {
        max(1, configuration.worker.maxInFlight / 10)
    }

    /// The highest lane, when there are several: its notifications are urgent in the pools.
    let urgentTopic: String?
    /// `worker.maxStopsPerMessage` (``StopGuard/limit``; 0: the stop guard is off).
    let stopLimit: Int
    /// How long stop records are kept after their last write: two dedupe TTLs, as long as the
    /// written positions they are read with.
    let stopRecordTTLSeconds: Int
    /// The part of `maxInFlight` that only the highest lane may take: a tenth.
    let laneReserve: Int
    /// `kafka.parkedTopic`: its records are notifications that moved aside, coming back.
    let parkedTopic: String?

    /// The Live Activity updates in this worker, newest per activity (latest wins).
    let latestWins: APNSLatestWins

    init(
        configuration: WorkerConfiguration,
        factory: ResultFactory,
        logger: Logger,
        latestWins: APNSLatestWins = APNSLatestWins()
    ) {
        self.latestWins = latestWins
        self.lanes = configuration.kafka.consumedTopics.count
        self.parkedTopic = configuration.kafka.parkedTopic
        self.urgentTopic = configuration.kafka.highestLane
        self.laneReserve = Self.laneReserve(configuration)
        self.stopLimit = configuration.worker.maxStopsPerMessage
        self.stopRecordTTLSeconds = 2 * configuration.worker.dedupeTTLSeconds
        var parser = JobParser()
        parser.http2Apps = Set(
            configuration.apps.filter { $0.value.transport == .http2 }.keys
        )
        parser.defaultExpiry = configuration.apps.compactMapValues {
            $0.defaultExpiry == .immediately ? nil : $0.defaultExpiry
        }
        parser.defaultStaleAfter = configuration.apps.compactMapValues(\.staleAfter)
        self.parser = parser
        self.apps = configuration.apps.mapValues(AppSettings.init)
        self.factory = factory
        self.logger = logger
    }

    // MARK: Parsing (no I/O)

    /// Parses `messages` in order; `handOver` receives what is parsed at least every `interval`
    /// (``handOverInterval``), looked at once 32 messages or notifications are parsed, and once
    /// at the end.
    ///
    /// Each message's notifications carry the rebalance generation it was fetched at
    /// (``MessageRef/epoch``): which ownership of its partition they belong to.
    func parse(
        _ messages: [KafkaMessage],
        handOverEvery interval: Duration = handOverInterval,
        handOver: (Chunk) async -> Void
    ) async {
        var handoffs = Handoffs()
        await parse(messages, handoffs: &handoffs, handOverEvery: interval, handOver: handOver)
    }

    /// ``parse(_:handOverEvery:handOver:)``, skipping the messages that `handoffs` covers
    /// (registered with no result to wait for). With `admission`, the in-flight budget is
    /// charged as each job is expanded: once it is spent, what is parsed is handed on and
    /// parsing waits for room before the next message (``Admission``).
    func parse(
        _ messages: [KafkaMessage],
        handoffs: inout Handoffs,
        admission: Admission? = nil,
        handOverEvery interval: Duration = handOverInterval,
        handOver: (Chunk) async -> Void
    ) async {
        // Room for a notification per message: the lists grew by doubling, copying, as they filled.
        func newChunk(_ remaining: Int) -> Chunk {
            var chunk = Chunk()
            chunk.registrations.reserveCapacity(remaining)
            chunk.candidates.reserveCapacity(remaining)
            return chunk
        }
        var chunk = newChunk(messages.count)
        var parsed = 0
        var now = factory.now()
        var handedOver = ContinuousClock.now
        // The clock is read once 32 messages or notifications are parsed since it was last
        // read, which takes well under the interval (and after each job of many tokens).
        var sinceClock = 0
        var room = admission?.room() ?? .max
        var waited = false
        for message in messages {
            if room <= 0, let admission {
                // The budget is spent: what is parsed goes on (the ledger counts it from then),
                // and the rest of the batch waits for room, however many messages are left.
                await handOver(chunk)
                chunk = newChunk(messages.count - parsed)
                // Stopping: the messages not parsed are consumed again by the partitions' next owner.
                guard await admission.wait() else { return }
                room = admission.room()
                handedOver = .now
                now = factory.now()
                waited = true
            }
            // A partition revoked while intake waited is its next owner's.
            if waited, let admission, admission.revoked(message) { continue }
            if sinceClock >= 32 {
                sinceClock = 0
                if ContinuousClock.now - handedOver >= interval {
                    await handOver(chunk)
                    chunk = newChunk(messages.count - parsed)
                    handedOver = .now
                    now = factory.now()
                }
            }
            chunk.messages += 1
            parsed += 1
            let ref = MessageRef(
                partition: TopicPartition(topic: message.topic, partition: message.partition),
                offset: message.offset,
                epoch: message.rebalanceGeneration
            )
            if handoffs.covers(ref, timestamp: MessageTimestamp(message).known) {
                chunk.registrations.append((ref, 0))
                chunk.skipped += 1
                continue
            }
            let before = chunk.results.count + chunk.candidates.count
            let summaries = chunk.summaries.count
            parse(message, ref: ref, now: now, into: &chunk)
            let results = chunk.results.count + chunk.candidates.count - before
            sinceClock += max(1, results)
            room -= max(1, results)
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

    private func parse(_ message: KafkaMessage, ref: MessageRef, now: Int64, into chunk: inout Chunk) {
        var place: String { "\(message.topic)[\(message.partition)]@\(message.offset)" }
        guard message.topic == parkedTopic else {
            parseJob(message.value, from: JobSource(message: message, ref: ref, now: now), into: &chunk)
            return
        }
        // Notifications that moved aside, back: the job as it was consumed, and the tokens it owes.
        do throws(ParkedRecordError) {
            let record = try ParkedRecord(decoding: message.value)
            let source = JobSource(message: message, ref: ref, now: now, owed: Set(record.tokens))
            parseJob(record.job, from: source, into: &chunk)
        } catch {
            let reason = "a record of the parked topic that cannot be read: \(error.message)"
            logger.error("Rejected message \(place): \(reason).")
            chunk.results.append(factory.invalidJob(ref, jobId: nil, app: nil, reason: reason, at: now))
        }
    }

    /// Why a job's HTTP/2 fields cannot be served by its app and environment, or `nil`:
    /// `apnsId` needs an HTTP/2 app; a `topic` other than the bundle ID needs an HTTP/2 app with
    /// token authentication that lists it in `topics`.
    static func refusal(of job: Job, app: WorkerConfiguration.App, environment: APNSEnvironment) -> String? {
        if job.apnsId != nil && app.transport != .http2 {
            return "\"apnsId\" is for HTTP/2 apps; app \"\(app.name)\" uses the binary protocol, which has no apns-id"
        }
        guard let topic = job.topic, topic != app.bundleId else { return nil }
        if app.transport != .http2 {
            return
                "\"topic\" \"\(topic.abbreviated())\" is not app \"\(app.name)\"'s bundle ID \(app.bundleId); the binary protocol "
                + "sends to its certificate's one topic"
        }
        guard case .token = app.environments[environment]?.credentials else {
            return
                "\"topic\" \"\(topic.abbreviated())\" is not app \"\(app.name)\"'s bundle ID \(app.bundleId); other topics need "
                + "token authentication (signingKey), and its \(environment) environment authenticates with a certificate"
        }
        guard app.allowsTopic(topic) else {
            return "\"topic\" \"\(topic.abbreviated())\" is not one of app \"\(app.name)\"'s topics "
                + "(\(([app.bundleId] + app.topics.filter { $0 != app.bundleId }).joined(separator: ", "))); add it to apps.\(app.name).topics"
        }
        return nil
    }

    /// The request rules an HTTP/2 client applies to a notification before sending it (push type,
    /// its priority and authentication, MDM), as the sentence it would fail with; `nil` if none.
    static func http2Problem(
        of notification: APNSNotification,
        app: WorkerConfiguration.App,
        environment: APNSEnvironment
    ) -> String? {
        do throws(APNSError) {
            let pushType = try notification.resolvedPushType()
            var token = false
            if case .token = app.environments[environment]?.credentials { token = true }
            if pushType.requiresTokenAuthentication && !token {
                return
                    "push type \(pushType.rawValue) works only with token authentication; configure a signing key for this app"
            }
            try pushType.validate(priority: notification.priority)
            try APNSHTTP2Request.validateContent(of: notification, pushType: pushType)
            return nil
        } catch {
            return error.message
        }
    }

    // MARK: Consumption

    /// Consumes until the worker stops, its task is cancelled or the consumer is closed: waits for
    /// room, polls a batch, parses it and hands it on, in the steps the ``StopGuard`` plans.
    /// While Redis is unreachable the assigned partitions are paused and polling goes on, so the
    /// group keeps this member. `stuck` tells how many notifications of some partitions wait in
    /// pools that cannot reach their gateway (a careful step does not wait for those).
    func run(
        consumer: KafkaConsumer,
        batchSize: Int,
        window: Duration,
        control: PipelineControl,
        ledger: SharedLedger,
        results: ResultStage,
        claims: ClaimStage,
        store: NotificationStore,
        stuck: @escaping @Sendable (Set<TopicPartition>) -> Int = { _ in 0 }
    ) async throws {
        var paused = false
        var assignments = Assignments()
        var handoffs = Handoffs()
        var stops = Stops(limit: stopLimit, ttlSeconds: stopRecordTTLSeconds)
        var retention = RetentionWatch()
        var heldBack = HeldBack()
        let admission = Admission.of(ledger, control)
        let handOver = handingOver(to: claims, results: results, control: control)
        while true {
            await ledger.waitForRoom()
            if control.isStopping || Task.isCancelled { return }
            let redisDown = control.isRedisDown
            if redisDown || paused {
                paused = pauseOrResume(consumer, pause: redisDown, wasPaused: paused)
            }
            heldBack.resumeReachable(consumer, isUnavailable: claims.isUnavailable, logger: logger)
            heldBack.report(to: control.metrics, now: factory.now())
            // The lower lanes wait while only the highest lane's reserve is left.
            let readable = lanes > 1 && !ledger.read { $0.hasRoom(reserving: laneReserve) } ? 1 : lanes
            guard
                let messages = try await receive(
                    consumer,
                    batchSize: batchSize,
                    window: window,
                    lanes: readable,
                    heldBack: &heldBack,
                    claims: claims
                )
            else { return }
            if messages.isEmpty { continue }
            let suspects = retention.note(messages)
            if !suspects.isEmpty {
                for loss in await RetentionWatch.check(suspects, consumer: consumer, logger: logger) {
                    report(loss, metrics: control.metrics)
                }
            }
            let (fresh, revoked) = assignments.note(messages, control: control)
            handoffs.forget(revoked)
            stops.forget(revoked)
            await handoffs.lookUp(fresh, store: store, logger: logger)
            await stops.lookUp(fresh, store: store, metrics: control.metrics, logger: logger)
            for step in stops.state.plan(messages) {
                await process(
                    step,
                    stops: &stops,
                    handoffs: &handoffs,
                    context: StepContext(
                        ledger: ledger,
                        control: control,
                        store: store,
                        stuck: stuck,
                        admission: admission
                    ),
                    handOver: handOver
                )
            }
        }
    }

    /// What intake does with each chunk it parsed: registers its messages with the result
    /// stage, counts it, and hands its results and notifications on.
    private func handingOver(
        to claims: ClaimStage,
        results: ResultStage,
        control: PipelineControl
    ) -> (Chunk) async -> Void {
        { chunk in
            results.register(chunk.registrations, summaries: chunk.summaries)
            control.count { s in
                s.messages += chunk.messages
                s.notifications += chunk.candidates.count
                s.rejected += chunk.results.count
                s.skipped += chunk.skipped
            }
            results.submit(chunk.results)
            if let parkedTopic {
                countBroughtBack(chunk.candidates, parkedTopic: parkedTopic, metrics: control.metrics)
            }
            claims.handOver(chunk.candidates)
        }
    }

    /// The next batch to process: polled from the readable lanes, without the messages of
    /// partitions revoked meanwhile, at offsets no Kafka partition has, or of pools held back;
    /// `nil` once the consumer is closed or the task cancelled. A Kafka error that is not
    /// fatal is logged, and answers an empty batch.
    private func receive(
        _ consumer: KafkaConsumer,
        batchSize: Int,
        window: Duration,
        lanes readable: Int,
        heldBack: inout HeldBack,
        claims: ClaimStage
    ) async throws -> [KafkaMessage]? {
        let polled: [KafkaMessage]
        do {
            polled = try await Self.pollBatch(consumer, batchSize: batchSize, window: window, lanes: readable)
        } catch {
            if error.isFatal { throw WorkerError("Kafka consumer failed: \(error)") }
            if error.isClosed || error.isCancellation { return nil }
            logger.warning("Kafka consumer error", metadata: ["error": "\(error)"])
            return []
        }
        var (messages, dropped) = consumer.current(polled)
        if dropped > 0 {
            logger.info(
                "Messages fetched before their partition was revoked are left to its next owner",
                metadata: ["messages": "\(dropped)"]
            )
        }
        // Offsets are the broker's; one no broker gives could not be committed past.
        if messages.contains(where: { $0.offset < 0 || $0.offset == .max }) {
            let wrong = messages.filter { $0.offset < 0 || $0.offset == .max }
            logger.error(
                "The broker sent messages at offsets no Kafka partition has (\(wrong.prefix(3).map { "\($0.topic)[\($0.partition)]@\($0.offset)" }.joined(separator: ", "))); they are not processed",
                metadata: ["messages": "\(wrong.count)"]
            )
            messages.removeAll { $0.offset < 0 || $0.offset == .max }
        }
        if let parkedTopic {
            heldBack.holdBack(
                &messages,
                parkedTopic: parkedTopic,
                consumer: consumer,
                isUnavailable: claims.isUnavailable,
                now: factory.now(),
                logger: logger
            )
        }
        return messages
    }
}
