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
            worker: snapshot.worker, group: snapshot.group,
            uptimeSeconds: Double(snapshot.uptime.components.seconds) + Double(snapshot.uptime.components.attoseconds) / 1e18,
            ready: snapshot.readiness.isHealthy, readyReason: snapshot.readiness.problem, inFlight: snapshot.inFlight,
            redis: .init(state: snapshot.redisUp ? .up : .down),
            partitions: snapshot.partitions.map {
                .init(topic: $0.partition.topic, partition: Int($0.partition.partition), lag: $0.lag.map { Int($0) })
            })
    }

    private static func check(_ health: WorkerHealth) -> HealthCheck {
        health.problem.map { .failing(reason: $0) } ?? .ok
    }
}
