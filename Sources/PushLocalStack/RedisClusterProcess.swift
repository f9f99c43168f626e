import APNSCore
import Foundation
import PushRedis

/// A throw-away Redis Cluster on 127.0.0.1, for one test or one local stack: `primaries` primaries with
/// `replicas` replicas each, every node a ``RedisServerProcess`` with `--cluster-enabled yes`
/// on a free port, joined by `redis-cli --cluster create`, and ready when every node reports
/// `cluster_state:ok` (polled against a deadline).
public final class RedisClusterProcess: Sendable {
    public let nodes: [RedisServerProcess]
    /// Arguments redis-cli needs to reach the nodes (the TLS ones for a TLS cluster).
    public let cliArguments: [String]
    /// The settings every node is reached with (TLS, timeouts); host and port are the first node's.
    public let template: RedisConfiguration

    private init(nodes: [RedisServerProcess], cliArguments: [String], template: RedisConfiguration) {
        self.nodes = nodes
        self.cliArguments = cliArguments
        self.template = template
    }

    /// Starts the nodes and creates the cluster. `nodeTimeout` is `cluster-node-timeout`:
    /// how long a primary may be unreachable before its replica is promoted. `executable` is
    /// the redis-server each node runs.
    public static func start(
        primaries: Int = 3,
        replicas: Int = 1,
        nodeTimeout: Duration = .milliseconds(1000),
        extraArguments: [String] = [],
        tls: RedisTLS? = nil,
        cliArguments: [String] = [],
        executable: String = RedisServerProcess.executable
    ) async throws -> RedisClusterProcess {
        let milliseconds = nodeTimeout.wholeMilliseconds
        let arguments =
            [
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", String(milliseconds), "--cluster-replica-validity-factor", "0",
            ] + extraArguments
        var nodes: [RedisServerProcess] = []
        do {
            for _ in 0..<(primaries * (1 + replicas)) {
                nodes.append(try await startNode(arguments, tls: tls != nil, executable: executable))
            }
            var template = nodes[0].configuration(commandTimeout: .seconds(5))
            template.tls = tls
            let cluster = RedisClusterProcess(nodes: nodes, cliArguments: cliArguments, template: template)
            try await cluster.create(replicas: replicas)
            try await cluster.waitUntilOK()
            return cluster
        } catch {
            for node in nodes { await node.stop() }
            throw error
        }
    }

    /// Starts one node with a bus port of its own. The port is given (the default, port + 10000,
    /// may be above 65535), and another process can take a free port before the node binds it
    /// (a connect is given one as its source port): the node then exits, and starts again with
    /// another.
    private static func startNode(
        _ arguments: [String],
        tls: Bool,
        executable: String
    ) async throws -> RedisServerProcess {
        var lastError: (any Error)?
        for _ in 0..<3 {
            let bus = try RedisServerProcess.freePort()
            do {
                return try await RedisServerProcess.start(
                    arguments + ["--cluster-port", String(bus)],
                    tls: tls,
                    executable: executable
                )
            } catch {
                lastError = error
            }
        }
        throw lastError!
    }

    /// A configuration for node `index`.
    public func configuration(_ index: Int) -> RedisConfiguration {
        var configuration = template
        configuration.port = nodes[index].port
        return configuration
    }

    /// Every node's configuration, to use as seeds.
    public var seeds: [RedisConfiguration] { nodes.indices.map(configuration) }

    public func stop() async {
        for node in nodes { await node.stop() }
    }

    private func create(replicas: Int) async throws {
        let arguments =
            cliArguments + ["--cluster", "create"] + nodes.map { "127.0.0.1:\($0.port)" }
            + ["--cluster-replicas", String(replicas), "--cluster-yes"]
        // Bounded: redis-cli waits forever for nodes that cannot reach each other.
        let output = try await Self.run("/usr/bin/timeout", ["30", "/usr/bin/redis-cli"] + arguments)
        guard output.status == 0, output.text.contains("[OK] All 16384 slots covered") else {
            throw ServerError("redis-cli --cluster create failed (status \(output.status)):\n\(output.text)")
        }
    }

    /// Waits until every node answers `cluster_state:ok` and knows every other node.
    public func waitUntilOK(timeout: Duration = .seconds(30)) async throws {
        let deadline = ContinuousClock.now + timeout
        var last = ""
        while ContinuousClock.now < deadline {
            var allOK = true
            for index in nodes.indices where nodes[index].isRunning {
                do {
                    let redis = try await RedisConnection.connect(configuration(index))
                    let info = try await redis.send(["CLUSTER", "INFO"]).string ?? ""
                    await redis.close()
                    if !info.contains("cluster_state:ok") || !info.contains("cluster_known_nodes:\(nodes.count)") {
                        allOK = false
                        last = info
                    }
                } catch {
                    allOK = false
                    last = "\(error)"
                }
            }
            if allOK { return }
            try await Task.sleep(for: .milliseconds(50))  // poll interval, not synchronisation
        }
        throw ServerError("the cluster did not reach cluster_state:ok within \(timeout); last: \(last)")
    }

    /// Runs a program to its end and returns its status and combined output.
    public static func run(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, text: String) {
        try await offPool { try ChildProcess.runToEnd(executable, arguments) }
    }
}
