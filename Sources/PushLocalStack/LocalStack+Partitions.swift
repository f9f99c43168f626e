import Foundation

/// A worker's path to one kind of server, which ``LocalStack/cut(_:from:_:)`` cuts on its own.
public enum WorkerPath: String, Sendable, CaseIterable {
    /// Every broker of the embedded Kafka.
    case kafka
    /// The stack's redis-server.
    case redis
    /// The APNs simulators: the binary gateway, its feedback service and the HTTP/2 gateway.
    case apns
}

/// The network of a worker started with ``LocalStack/Options/partitionable``: its namespace and
/// a forwarder per path.
final class WorkerNetwork: Sendable {
    let namespace: NetworkNamespace
    let paths: [WorkerPath: PathForwarder]

    init(namespace: NetworkNamespace, paths: [WorkerPath: PathForwarder]) {
        self.namespace = namespace
        self.paths = paths
    }

    func close() async {
        for forwarder in paths.values { await forwarder.close() }
    }
}

extension LocalStack {
    /// The ports of each path that a partitionable worker reaches through its forwarders.
    func pathPorts() throws -> [WorkerPath: [Int]] {
        guard let redis else {
            throw ServerError("partitionable workers need the stack's own redis-server (not a cluster or a given URL)")
        }
        let kafkaPorts = kafka.bootstrapServers.split(separator: ",").compactMap { $0.split(separator: ":").last }
            .compactMap { Int($0) }
        let apnsPorts =
            [simulator.binaryPort] + [simulator.feedbackPort, http2Simulator?.port].compactMap { $0 }.filter { $0 > 0 }
        return [.kafka: kafkaPorts, .redis: [redis.port], .apns: apnsPorts]
    }

    /// The network of worker `id`: made at its first start (a namespace, recorded for cleanup,
    /// and a forwarder per path), the same at a restart.
    func network(for id: String) async throws -> WorkerNetwork {
        if let network = networks[id] { return network }
        let ports = try pathPorts()
        let namespace = try NetworkNamespace()
        cleanup.add(namespace: namespace)
        var paths: [WorkerPath: PathForwarder] = [:]
        for (path, pathPorts) in ports {
            paths[path] = try await PathForwarder(namespace: namespace, ports: pathPorts)
        }
        let network = WorkerNetwork(namespace: namespace, paths: paths)
        networks[id] = network
        return network
    }

    /// Cuts `worker`'s `paths` (``Options/partitionable``): its connections there are held
    /// (`drop`) or reset and refused (`reject`) until ``heal(_:_:)``; the other workers' are not
    /// touched.
    public func cut(_ worker: LocalWorker, from paths: Set<WorkerPath>, _ how: PathCut) async throws {
        for path in paths.sorted(by: { $0.rawValue < $1.rawValue }) {
            try await forwarder(worker, path).cut(how)
        }
    }

    /// Heals `worker`'s `paths` cut by ``cut(_:from:_:)``.
    public func heal(_ worker: LocalWorker, _ paths: Set<WorkerPath> = Set(WorkerPath.allCases)) async throws {
        for path in paths.sorted(by: { $0.rawValue < $1.rawValue }) {
            try await forwarder(worker, path).heal()
        }
    }

    private func forwarder(_ worker: LocalWorker, _ path: WorkerPath) throws -> PathForwarder {
        guard let forwarder = networks[worker.id]?.paths[path] else {
            throw ServerError("worker \(worker.id) was not started in a network of its own (Options.partitionable)")
        }
        return forwarder
    }
}
