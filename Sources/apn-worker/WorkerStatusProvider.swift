import PushStatus
import PushWorker

/// A worker as its status server shows it.
struct WorkerStatusProvider: StatusProvider {
    let worker: Worker

    func liveness() -> HealthCheck { Self.check(worker.liveness) }

    func readiness() -> HealthCheck { Self.check(worker.readiness) }

    func status() -> WorkerStatus {
        let snapshot = worker.snapshot
        return WorkerStatus(
            worker: snapshot.worker,
            group: snapshot.group,
            uptimeSeconds: Double(snapshot.uptime.components.seconds) + Double(snapshot.uptime.components.attoseconds)
                / 1e18,
            ready: snapshot.readiness.isHealthy,
            readyReason: snapshot.readiness.problem,
            inFlight: snapshot.inFlight,
            redis: .init(state: snapshot.redisUp ? .up : .down),
            partitions: snapshot.partitions.map {
                .init(topic: $0.partition.topic, partition: Int($0.partition.partition), lag: $0.lag.map { Int($0) })
            },
            pools: snapshot.pools.map {
                .init(
                    app: $0.app,
                    env: $0.environment.rawValue,
                    transport: $0.transport,
                    open: $0.snapshot.open,
                    connecting: $0.snapshot.connecting,
                    backingOff: $0.snapshot.backingOff,
                    cachedNotifications: $0.snapshot.cachedNotifications,
                    cachedBytes: $0.snapshot.cachedBytes,
                    streamsInUse: $0.snapshot.streamsInUse,
                    state: $0.condition,
                    held: $0.snapshot.admitted,
                    parked: $0.parked,
                    movedAside: $0.movedAside
                )
            }
        )
    }

    private static func check(_ health: WorkerHealth) -> HealthCheck {
        health.problem.map { .failing(reason: $0) } ?? .ok
    }
}
