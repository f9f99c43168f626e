import PushKafka
import PushRedis

/// The pipeline's stages, made in the order each needs the others (`docs/architecture.md`, "The
/// worker pipeline"): the two stores, then results and summaries, delivery, claims, intake, and
/// the feedback pollers.
extension Worker {
    /// The stages ``runStages()`` runs, and what it hands them.
    struct Pipeline {
        var stages: Stages
        var intake: IntakeStage
        var feedback: [FeedbackStage]
    }

    /// Makes the pipeline on the worker's Kafka clients and its two Redis connections: claims
    /// on their own (`claimRedis`), everything else of the store on `stateRedis`.
    func makePipeline(
        _ producer: KafkaProducer,
        _ consumer: KafkaConsumer,
        claims claimRedis: RedisClient,
        state stateRedis: RedisClient
    ) -> Pipeline {
        let expiries = SharedFingerprintExpiries()
        let claimStore = makeStore(claimRedis, expiries: expiries)
        let store = makeStore(stateRedis, expiries: expiries)
        var factory = ResultFactory(worker: configuration.worker.id)
        factory.namesTopics = configuration.kafka.highestLane != nil
        let localClaims = LocalClaims(capacity: configuration.worker.maxInFlight)
        let summaries = SummaryStage(
            store: store,
            producer: producer,
            control: control,
            factory: factory,
            configuration: configuration,
            logger: logger
        )
        let results = ResultStage(
            store: store,
            producer: producer,
            consumer: consumer,
            localClaims: localClaims,
            ledger: ledger,
            control: control,
            configuration: configuration,
            summaries: summaries,
            logger: logger
        )
        let signals = AsyncStream<ClaimStage.Signal>.makeStream()
        let delivery = DeliveryStage(
            pools: settings,
            drainTimeout: configuration.worker.shutdownTimeout,
            results: results,
            claimSignals: signals.continuation,
            ledger: ledger,
            factory: factory,
            control: control,
            logger: logger,
            fallbackApps: Set(configuration.apps.values.filter(\.environmentFallback).map(\.name)),
            environments: store,
            stallBound: PoolStallJudge.least(forMaxInFlight: configuration.worker.maxInFlight)
        )
        let claims = ClaimStage(
            store: claimStore,
            results: results,
            delivery: delivery,
            localClaims: localClaims,
            control: control,
            ledger: ledger,
            factory: factory,
            configuration: configuration,
            signals: signals,
            parking: configuration.kafka.parkedTopic.map {
                ClaimStage.Parking(producer: producer, topic: $0, after: configuration.worker.moveAsideAfter)
            },
            logger: logger
        )
        return Pipeline(
            stages: Stages(
                consumer: consumer,
                claims: claims,
                delivery: delivery,
                results: results,
                summaries: summaries,
                redis: [claimRedis, stateRedis],
                store: store
            ),
            intake: IntakeStage(configuration: configuration, factory: factory, logger: logger),
            feedback: feedbackStages(store: store, producer: producer, factory: factory)
        )
    }

    /// The store on one of the worker's Redis connections; both share the buckets' expiries.
    private func makeStore(_ redis: RedisClient, expiries: SharedFingerprintExpiries) -> NotificationStore {
        NotificationStore(
            redis: redis,
            prefix: Worker.redisKeyPrefix,
            owner: owner,
            metrics: control.metrics,
            invalidTokenTTL: configuration.worker.invalidTokenTTL,
            fingerprintBuckets: configuration.worker.dedupeBuckets,
            fingerprintExpiries: expiries
        )
    }

    /// A feedback poller per app environment that polls (binary apps with `feedbackInterval`).
    private func feedbackStages(
        store: NotificationStore,
        producer: KafkaProducer,
        factory: ResultFactory
    ) -> [FeedbackStage] {
        pools.compactMap { key, pool in
            pool.feedback.map { _ in
                FeedbackStage(
                    app: key.app,
                    environment: key.environment,
                    configuration: { [settings] in settings[key]?.feedback },
                    interval: pool.feedbackInterval,
                    store: store,
                    producer: producer,
                    factory: factory,
                    control: control,
                    resultsTopic: configuration.kafka.resultsTopic,
                    dedupeTTLSeconds: configuration.worker.dedupeTTLSeconds,
                    logger: logger
                )
            }
        }
    }
}
