import Logging
import PushConfiguration
import PushKafka
import PushRedis
import ServiceLifecycle
import Synchronization

/// One member of the `apn-worker` consumer group: jobs in from Kafka, dedupe and rates in Redis,
/// delivery through one pool per (app, environment), one result per notification out.
///
/// A coordinator over six stages (see `docs/architecture.md`), each a child task of ``run()``:
/// ``IntakeStage`` (Kafka messages → notifications) → ``ClaimStage`` (Redis dedupe, rates,
/// unregistered tokens) → ``DeliveryStage`` (pools and their events) → ``ResultStage`` (record,
/// produce, offsets) → ``SummaryStage`` (job summaries, for jobs that ask for one);
/// ``FeedbackStage`` polls the feedback service. A `Service`: a graceful
/// shutdown of its `ServiceGroup` stops it as ``stop()`` does.
public final class Worker: Service, Sendable {
    public let configuration: WorkerConfiguration
    /// Every (app, environment)'s pool settings, credentials loaded: those of the start, then
    /// those of each credential reload (``checkCredentials(forced:delivery:)``).
    let settings: PoolSettingsStore
    /// What the credential reload remembers between its checks.
    let reload: Mutex<CredentialReloadState>
    /// Checks of the credentials: `true` asked for (SIGHUP), `false` the periodic ones.
    let reloadRequests = AsyncStream<Bool>.makeStream(bufferingPolicy: .bufferingNewest(4))
    /// Loads the configuration again (from the config file, as at start), for a credential
    /// reload to take the credential settings from; `nil`: only the credential files are read again.
    let loadConfiguration: (@Sendable () throws(ConfigurationError) -> WorkerConfiguration)?
    let logger: Logger
    /// This incarnation: the worker id plus a random suffix, so a restarted worker with the same
    /// id does not mistake the claims of its dead predecessor for its own.
    let owner: String
    let control: PipelineControl
    let ledger: SharedLedger
    /// The stages once ``run()`` built them, for the status server.
    let stages = Mutex<Stages?>(nil)
    /// The services ``services()`` made, which ``run()`` uses.
    private let made = Mutex<(producer: KafkaProducer, consumer: KafkaConsumer, redis: WorkerRedis)?>(nil)

    struct Stages: Sendable {
        var consumer: KafkaConsumer
        var claims: ClaimStage
        var delivery: DeliveryStage
        var results: ResultStage
        var summaries: SummaryStage
        var redis: [RedisClient]
        /// The store of hand-off marks, stop records and liveness.
        var store: NotificationStore
    }
    /// What the status server and the metrics read (see `Worker+Status.swift`).
    let observed = Mutex(Observed())
    let started = ContinuousClock.now

    /// Prefix of every Redis key.
    static let redisKeyPrefix = "apn:"
    /// A worker incarnation whose liveness key is older than this counts as dead and its claims
    /// are taken over.
    static let livenessTTL: Duration = .seconds(5)
    /// How long a revoked partition's in-flight notifications may take to finish before the
    /// partition is handed back anyway.
    static let revokeTimeout: Duration = .seconds(20)
    /// How long a worker stopped before its first assignment waits for its join to finish, so
    /// that it can leave the group cleanly.
    static let joinWaitOnStop: Duration = .seconds(15)
    /// How long the commit of revoked partitions is retried while the coordinator is busy.
    static let revokeCommitTimeout: Duration = .seconds(1)

    /// A worker for a loaded configuration (``WorkerConfiguration/load(overrides:environment:hostname:pid:)``).
    ///
    /// `loadConfiguration`, when given, loads the configuration again as it was loaded: a
    /// credential reload then follows changes of the config file's credential settings (a new
    /// `keyId`, a `passphrase`) too; without it, only the credential files are read again.
    ///
    /// - Throws: a ``ConfigurationError`` naming the setting when an app's credentials cannot be
    ///   loaded (a file that is not a certificate or key, a wrong passphrase, a bad signing key).
    public init(
        configuration: WorkerConfiguration,
        metrics: WorkerMetrics = WorkerMetrics(),
        logger: Logger = Logger(label: "apn-worker"),
        loadConfiguration: (@Sendable () throws(ConfigurationError) -> WorkerConfiguration)? = nil
    ) throws(ConfigurationError) {
        self.configuration = configuration
        self.control = PipelineControl(metrics: metrics)
        self.settings = PoolSettingsStore(try PoolSettings.all(for: configuration))
        self.reload = Mutex(CredentialReloadState(configuration: configuration))
        self.loadConfiguration = loadConfiguration
        var logger = logger
        logger[metadataKey: "worker"] = "\(configuration.worker.id)"
        self.logger = logger
        let suffix = (0..<6).map { _ in "0123456789abcdefghijklmnopqrstuvwxyz".randomElement()! }
        self.owner = "\(configuration.worker.id)#\(String(suffix))"
        self.ledger = SharedLedger(
            maximum: configuration.worker.maxInFlight,
            highestLane: configuration.kafka.highestLane,
            laneReserve: IntakeStage.laneReserve(configuration)
        )
        exportInsecureTLS()
    }

    /// The services of one worker, in the order a `ServiceGroup` starts them: its Redis
    /// connections, the Kafka producer, the Kafka consumer, the worker. A graceful shutdown stops
    /// them in reverse: the worker finishes what it sent, writes the results and commits its
    /// offsets; then the consumer leaves the group; then the producer flushes and closes; then
    /// the Redis connections close. The worker runs only as one of these services.
    ///
    /// - Throws: a ``WorkerError`` when the Kafka clients cannot be set up.
    public func services() throws -> [any Service] {
        let (producer, consumer, redis) = try made.withLock { made in
            if let made { return made }
            let (producer, consumer) = try makeKafkaClients()
            let services = (producer, consumer, WorkerRedis(configuration: configuration, owner: owner, logger: logger))
            made = services
            return services
        }
        return [redis, producer, consumer, self]
    }

    /// Every (app, environment)'s pool settings in force.
    var pools: [PoolKey: PoolSettings] { settings.all }

    /// Counters for logs, tests and benchmarks.
    public var statistics: WorkerStatistics { control.statistics }

    /// Asks ``run()`` to stop: consumption ends, in-flight notifications are finished, their
    /// results written and offsets committed, then everything is closed.
    public func stop() {
        control.stop()
        ledger.update { $0.close() }
    }

    // MARK: Run

    /// Runs, as the last of ``services()`` in their `ServiceGroup`, until ``stop()`` or a graceful
    /// shutdown; returns after its drain.
    ///
    /// - Throws: a ``WorkerError`` when Kafka fails fatally, or when it is run without
    ///   ``services()``.
    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await runStages()
        } onGracefulShutdown: {
            self.logger.info("Stopping: graceful shutdown requested")
            self.stop()
        }
    }

    private func runStages() async throws {
        guard let services = made.withLock({ $0 }) else {
            throw WorkerError("the worker runs as one of the services of Worker.services(), in their ServiceGroup")
        }
        let (producer, consumer, redisService) = services
        warnOfExpiringCredentials()
        // Redis may not answer before the worker is stopped: the wait ends with the stop.
        let connections = await cancelWhenGracefulShutdown { await redisService.connections() }
        // Stopped (or cancelled) before Redis answered: nothing was consumed.
        guard let claimRedis = connections?.claims, let stateRedis = connections?.state else { return }
        let pipeline = makePipeline(producer, consumer, claims: claimRedis, state: stateRedis)
        let stages = pipeline.stages
        let (claims, delivery, results, summaries, store) = (
            stages.claims, stages.delivery, stages.results, stages.summaries, stages.store
        )
        self.stages.withLock { $0 = stages }
        logger.info(
            "Worker started",
            metadata: [
                "owner": "\(owner)", "group": "\(configuration.kafka.groupId)",
                "topics": "\(configuration.kafka.consumedTopics.joined(separator: ","))",
            ]
        )

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.heartbeat(store) }
            group.addTask { await self.warnOfExpiringCredentialsDaily() }
            group.addTask { await self.watchCredentials(delivery) }
            if control.metrics.isEnabled { group.addTask { await self.trackLag(consumer) } }
            group.addTask { await results.run() }
            group.addTask { await results.recordAheadWhileProducing() }
            group.addTask { await summaries.run(results: results) }
            group.addTask { await summaries.runTimers() }
            group.addTask { await claims.run() }
            group.addTask { await claims.runTimers() }
            group.addTask { await claims.runSweeps() }
            group.addTask { await delivery.run() }
            group.addTask { await self.followRebalances(consumer, stages) }
            for feedback in pipeline.feedback { group.addTask { await feedback.run() } }

            var failure: (any Error)? = nil
            do {
                try await pipeline.intake.run(
                    consumer: consumer,
                    batchSize: configuration.worker.batchSize,
                    window: configuration.worker.batchWindow,
                    control: control,
                    ledger: ledger,
                    results: results,
                    claims: claims,
                    store: store,
                    stuck: { delivery.stuck(in: $0) }
                )
            } catch {
                failure = error
                logger.error("Consumption failed; shutting down", metadata: ["error": "\(error)"])
            }
            stop()
            await drain(consumer: consumer, claims: claims, delivery: delivery, results: results, store: store)
            claims.finish()
            results.finish()
            summaries.finish()
            group.cancelAll()
            _ = try? await group.waitForAll()
            if let failure { throw failure }
        }

        control.count {
            $0.redisRoundTrips = claimRedis.roundTrips + stateRedis.roundTrips
            $0.redisRedirects = claimRedis.redirects + stateRedis.redirects
        }
        do { try await store.retire() } catch {
            logger.notice("Cannot remove the liveness key", metadata: ["error": "\(error)"])
        }
        logger.info("Worker stopped", metadata: ["statistics": "\(statistics)"])
    }

    /// Logs assignments and carries out revocations, one after another, until the consumer
    /// closes or the worker stops: each revoked partition's work is finished and committed
    /// (``revoke(_:generation:lost:_:)``), then the revocation is completed, so that the group's
    /// rebalance goes on.
    private func followRebalances(_ consumer: KafkaConsumer, _ stages: Stages) async {
        for await event in consumer.rebalanceEvents {
            switch event {
            case .assigned(let partitions):
                logger.info("Partitions assigned", metadata: ["partitions": "\(partitions)"])
            case .revoking(let partitions, let generation, let lost):
                await revoke(partitions, generation: generation, lost: lost, stages)
                await consumer.completeRevocation(partitions)
            case .revoked:
                break
            }
        }
    }

    // MARK: Shutdown

    /// Stop consuming, finish what was sent, write results, store positions and commit; the
    /// consumer's own service leaves the group once the worker returned.
    private func drain(
        consumer: KafkaConsumer,
        claims: ClaimStage,
        delivery: DeliveryStage,
        results: ResultStage,
        store: NotificationStore
    ) async {
        let deadline = ContinuousClock.now + configuration.worker.shutdownTimeout
        // Held and parked notifications are not claimed: hand them back.
        claims.handBack(unclaimedToo: true) { _ in true }
        logger.info("Draining", metadata: ["inFlight": "\(ledger.inFlight)", "pools": "\(delivery.poolCount)"])
        await delivery.shutdown(gracePeriod: max(.seconds(1), deadline - .now))
        // Wait for the writer to write what the pools reported.
        if !(await ledger.waitUntilEmpty(deadline: max(deadline, .now + .milliseconds(100)))) {
            logger.warning(
                "Shutdown timeout reached with notifications in flight; their messages will be consumed again",
                metadata: ["inFlight": "\(ledger.inFlight)"]
            )
        }
        // The written positions of everything finished, before the partitions are handed on;
        // then their offsets, committed (or hand-off marks left) while they are this member's.
        await results.storePositions()
        results.commit()
        do {
            let assigned = Set(try consumer.assignment())
            await commitForHandover(consumer, results, ledger.read { $0.positions(in: assigned) })
            // A stop by choice: no message of these partitions is charged for it.
            await removeStopRecords(Array(assigned), store)
        } catch {
            logger.warning("Cannot read the assignment to commit it before leaving", metadata: ["error": "\(error)"])
        }
        await finishJoining(consumer, deadline: deadline + .seconds(3))
    }

    // MARK: Liveness

    private func heartbeat(_ store: NotificationStore) async {
        let ttl = Int(Worker.livenessTTL / .milliseconds(1))
        while !Task.isCancelled {
            do {
                let sentAt = ContinuousClock.now
                try await store.heartbeat(ttlMilliseconds: ttl)
                control.liveness.renewed(sentAt: sentAt)
                control.setRedisDown(false)
            } catch {
                logger.warning("Cannot refresh the liveness key", metadata: ["error": "\(error.message)"])
                control.metrics.increment(MetricCatalogue.redisErrors)
                control.setRedisDown(true)
                await store.reconnect(logger: logger)
            }
            do { try await Task.sleep(for: Worker.livenessTTL / 5) } catch { return }
        }
    }
}
