import APNSCore
import PushKafka
import PushRedis
import Synchronization

/// Whether a worker is healthy, and why not.
public struct WorkerHealth: Sendable, Hashable {
    /// `nil` when healthy; otherwise a short sentence for the probe's answer.
    public var problem: String?

    public var isHealthy: Bool { problem == nil }

    public static let healthy = WorkerHealth(problem: nil)
}

/// One assigned partition of the requests topic and how far behind it is.
public struct PartitionLag: Sendable, Hashable {
    public var partition: TopicPartition
    /// Messages between the high watermark and the group's committed offset; `nil` until known.
    public var lag: Int64?
}

/// What `/status` shows of a worker.
public struct WorkerSnapshot: Sendable {
    public var worker: String
    public var group: String
    public var uptime: Duration
    public var readiness: WorkerHealth
    public var liveness: WorkerHealth
    public var inFlight: Int
    public var redisUp: Bool
    public var partitions: [PartitionLag]
    /// Each open delivery pool: its app, environment, transport and state.
    public var pools: [PoolState]
}

/// One delivery pool as `/status` shows it.
public struct PoolState: Sendable {
    public var app: String
    public var environment: APNSEnvironment
    public var transport: String
    public var snapshot: APNSPoolSnapshot
    /// `delivering`, `unreachable` or `stalled` (`docs/delivery.md`, "A slow app").
    public var condition: String
    /// Notifications waiting, unclaimed, for the pool to take them again.
    public var parked: Int
    /// Notifications moved aside for the pool since the worker started.
    public var movedAside: Int
}

extension Worker {
    /// What the worker learnt about itself in the background (lag), for the status server.
    struct Observed: Sendable {
        var lag: [TopicPartition: Int64] = [:]
        /// Partitions whose lag gauge is exported, to remove the ones no longer assigned.
        var exported: Set<TopicPartition> = []
    }

    /// How often the lag of the assigned partitions is measured.
    static let lagInterval: Duration = .seconds(2)
    /// How long the result writer may go without trying to write pending results before the
    /// worker counts as stuck.
    static let stuckAfter: Duration = .seconds(60)

    /// Ready while the worker is a consuming member of its group with Redis reachable: not
    /// before its first assignment, not while Redis is down, not once it is stopping.
    public var readiness: WorkerHealth {
        if control.isStopping { return WorkerHealth(problem: "shutting down") }
        guard let consumer = stages.withLock({ $0?.consumer }) else { return WorkerHealth(problem: "starting") }
        if control.isRedisDown { return WorkerHealth(problem: "redis unreachable") }
        if !consumer.hasJoined { return WorkerHealth(problem: "waiting for the first partition assignment") }
        return .healthy
    }

    /// Live while the worker's loops make progress: the result writer has results waiting and
    /// has not tried to write them for ``stuckAfter``, it is stuck (a Redis or Kafka outage
    /// does not count: the writer keeps retrying, and an attempt to produce may wait for
    /// Kafka's acknowledgements for the producer's `message.timeout.ms`).
    public var liveness: WorkerHealth {
        guard let results = stages.withLock({ $0?.results }) else { return .healthy }
        let acknowledgementWait = KafkaConfiguration(configuration.kafka.properties).messageTimeout ?? .seconds(300)
        if let stuck = results.stuck(for: Self.stuckAfter, acknowledgementWait: acknowledgementWait) {
            return WorkerHealth(
                problem: "the result writer has not written for \(stuck.components.seconds) s with results pending"
            )
        }
        return .healthy
    }

    /// The worker as `/status` shows it.
    public var snapshot: WorkerSnapshot {
        let (stages, lag) = (self.stages.withLock { $0 }, observed.withLock { $0.lag })
        let assigned = (try? stages?.consumer.assignment()) ?? []
        let conditions = stages?.delivery.conditions() ?? [:]
        let waiting = stages?.claims.waiting() ?? (parked: [:], movedAside: [:])
        return WorkerSnapshot(
            worker: configuration.worker.id,
            group: configuration.kafka.groupId,
            uptime: .now - started,
            readiness: readiness,
            liveness: liveness,
            inFlight: ledger.inFlight,
            redisUp: stages != nil && !control.isRedisDown,
            partitions: assigned.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }.map {
                PartitionLag(partition: $0, lag: lag[$0])
            },
            pools: (stages?.delivery.snapshots() ?? []).map {
                PoolState(
                    app: $0.key.app,
                    environment: $0.key.environment,
                    transport: $0.transport,
                    snapshot: $0.snapshot,
                    condition: conditions[$0.key] ?? "delivering",
                    parked: waiting.parked[$0.key] ?? 0,
                    movedAside: waiting.movedAside[$0.key] ?? 0
                )
            }
        )
    }

    /// Brings the metrics that are read rather than counted up to date; the status server calls
    /// it before each scrape.
    public func updateMetrics() {
        let metrics = control.metrics
        let statistics = control.statistics
        metrics.advance(MetricCatalogue.messagesConsumed, to: statistics.messages)
        metrics.advance(MetricCatalogue.messagesSkipped, to: statistics.skipped)
        metrics.set(MetricCatalogue.inFlight, to: ledger.inFlight)
        metrics.set(MetricCatalogue.ready, to: readiness.isHealthy ? 1 : 0)
        exportCredentialExpiry()
        guard let stages = stages.withLock({ $0 }) else { return }
        metrics.set(MetricCatalogue.redisUp, to: control.isRedisDown ? 0 : 1)
        metrics.advance(MetricCatalogue.redisRoundTrips, to: stages.redis.reduce(0) { $0 + $1.roundTrips })
        metrics.advance(MetricCatalogue.redisRedirects, to: stages.redis.reduce(0) { $0 + $1.redirects })
        let kafka = stages.consumer.statistics
        metrics.advance(MetricCatalogue.offsetsCommitted, to: kafka.commits)
        metrics.advance(MetricCatalogue.rebalances, ["assign"], to: kafka.assignments)
        metrics.advance(MetricCatalogue.rebalances, ["revoke"], to: kafka.revocations)
        let conditions = stages.delivery.conditions()
        let parked = stages.claims.waiting().parked
        // Per app environment: an environment's broadcasts may have a pool of their own
        // (`broadcastGateway`); either blocked blocks the environment, and their waiting add up.
        var blocked: [[String]: Set<String>] = [:]
        var waiting: [[String]: Int] = [:]
        for pool in stages.delivery.snapshots() {
            let appEnvironment = [pool.key.app, pool.key.environment.rawValue]
            update(pool.snapshot, of: appEnvironment + [pool.transport])
            let condition = conditions[pool.key]
            blocked[appEnvironment, default: []].formUnion(condition.map { [$0] } ?? [])
            waiting[appEnvironment, default: 0] +=
                condition == nil ? 0 : (parked[pool.key] ?? 0) + pool.snapshot.admitted
        }
        for (appEnvironment, reasons) in blocked {
            for reason in ["unreachable", "stalled"] {
                metrics.set(
                    MetricCatalogue.poolBlocked,
                    appEnvironment + [reason],
                    to: reasons.contains(reason) ? 1 : 0
                )
            }
            metrics.set(MetricCatalogue.notificationsWaiting, appEnvironment, to: waiting[appEnvironment] ?? 0)
        }
        let assigned = Set((try? stages.consumer.assignment()) ?? [])
        metrics.set(MetricCatalogue.assignedPartitions, to: assigned.count)
        let (lag, gone) = observed.withLock { o in
            let lag = o.lag.filter { assigned.contains($0.key) }
            let gone = o.exported.subtracting(lag.keys)
            o.exported = Set(lag.keys)
            return (lag, gone)
        }
        for partition in gone {
            metrics.remove(MetricCatalogue.consumerLag, [partition.topic, "\(partition.partition)"])
        }
        for (partition, value) in lag {
            metrics.set(MetricCatalogue.consumerLag, [partition.topic, "\(partition.partition)"], to: Int(value))
        }
    }

    /// One pool's gauges and counters; `labels` are its app, environment and transport.
    private func update(_ pool: APNSPoolSnapshot, of labels: [String]) {
        let metrics = control.metrics
        let appEnvironment = Array(labels.prefix(2))
        metrics.set(MetricCatalogue.poolConnections, labels + ["open"], to: pool.open)
        metrics.set(MetricCatalogue.poolConnections, labels + ["connecting"], to: pool.connecting)
        metrics.set(MetricCatalogue.poolConnections, labels + ["backoff"], to: pool.backingOff)
        if let cached = pool.cachedNotifications {
            metrics.set(MetricCatalogue.sentCacheNotifications, appEnvironment, to: cached)
        }
        if let streams = pool.streamsInUse {
            metrics.set(MetricCatalogue.http2StreamsInUse, appEnvironment, to: streams)
        }
        metrics.advance(MetricCatalogue.connectionsOpened, labels, to: pool.connectionsOpened)
        for (reason, count) in pool.connectFailures {
            metrics.advance(MetricCatalogue.connectFailures, labels + [reason.rawValue], to: count)
        }
        for (reason, count) in pool.connectionsClosed {
            metrics.advance(MetricCatalogue.connectionsClosed, labels + [reason.rawValue], to: count)
        }
        metrics.advance(MetricCatalogue.deliveryAttempts, labels, to: pool.writes)
        metrics.advance(MetricCatalogue.retransmissions, labels, to: pool.retransmissions)
        metrics.advance(MetricCatalogue.backpressureWaits, labels, to: pool.backpressureWaits)
        if labels[2] == "http2" {
            metrics.advance(MetricCatalogue.providerTokenRefreshes, appEnvironment, to: pool.providerTokenRefreshes)
            metrics.advance(MetricCatalogue.tooManyRequests, appEnvironment, to: pool.tooManyRequests)
            metrics.advance(MetricCatalogue.malformedAnswers, appEnvironment, to: pool.malformedAnswers)
            if let acceptedAt = pool.providerTokenAcceptedAt {
                metrics.set(MetricCatalogue.providerTokenRefreshed, appEnvironment, to: Int(acceptedAt))
            }
        }
    }

    /// Measures the lag of the assigned partitions every ``lagInterval``: the high watermark
    /// minus the group's committed offset (or the low watermark, when nothing is committed).
    func trackLag(_ consumer: KafkaConsumer) async {
        var failing = false
        while !Task.isCancelled {
            do {
                let assigned = try consumer.assignment()
                if assigned.isEmpty {
                    observed.withLock { $0.lag = [:] }
                } else {
                    let marks = try await consumer.watermarks(assigned)
                    let committed = try await consumer.committed(assigned, timeout: .seconds(2))
                    let positions = Dictionary(committed.map { ($0.topicPartition, $0.offset) }, uniquingKeysWith: max)
                    let lag = marks.reduce(into: [TopicPartition: Int64]()) { lag, entry in
                        let position = positions[entry.key] ?? entry.value.low
                        // Watermarks are the broker's: a pair no broker sends counts as no lag.
                        let (behind, overflow) = entry.value.high.subtractingReportingOverflow(position)
                        lag[entry.key] = overflow ? 0 : max(0, behind)
                    }
                    observed.withLock { $0.lag = lag }
                }
                if failing { logger.info("Consumer lag can be read again") }
                failing = false
            } catch {
                if error.isCancellation { return }
                // Once per spell of failures: the lag metric keeps its last value meanwhile.
                if !failing {
                    logger.warning("Cannot read the consumer lag; retrying", metadata: ["error": "\(error)"])
                }
                failing = true
            }
            do { try await Task.sleep(for: Self.lagInterval) } catch { return }
        }
    }
}
