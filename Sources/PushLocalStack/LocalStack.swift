import APNSCore
import APNSSimulator
import Crypto
import Foundation
import NIOCore
import PushKafka
import PushKafkaEmbedded
import PushRedis

/// The worker's world on one machine: the embedded Kafka (`apn.requests` and `apn.results`, 12
/// partitions each), a redis-server on a free port (or a Redis Cluster, or a given Redis), the
/// APNs simulators, the worker's configuration file, and `apn-worker run` processes.
///
/// `apn-worker demo`, the benchmarks of `apn-bench` and the end-to-end tests run on it. A stack
/// is started by ``start(_:cleanup:)`` (or ``with(_:_:)``, which also traps SIGINT and SIGTERM)
/// and ended by ``shutdown()``.
///
/// `@unchecked Sendable`: one task drives it at a time (bench-failover hands it to its scenario
/// task while the main task only reads results from Kafka; a test owns its stack).
public final class LocalStack: @unchecked Sendable {
    /// The app delivered over the binary protocol, unless ``Options/appName`` names another.
    public static let app = "com.example.demo"

    public let options: Options
    /// The working directory: the configuration file, certificates and worker logs.
    public let directory: String
    public let kafka: EmbeddedKafkaCluster
    /// The redis-server this stack started, unless it uses a given Redis or a cluster.
    public let redis: RedisServerProcess?
    /// The Redis Cluster this stack started (``Options/redisClusterPrimaries``).
    public let redisCluster: RedisClusterProcess?
    /// The Redis the workers use (the first node of a cluster).
    public let redisURL: String
    /// The seed URLs of the Redis Cluster, every node one.
    public let redisClusterURLs: [String]
    /// The binary gateway and feedback service (replaced by ``restartGateway()``).
    public private(set) var simulator: APNSSimulator
    /// What gateways stopped by ``stopGateway()`` had accepted.
    private var retiredAccepted: [DeviceToken: Int] = [:]
    /// The HTTP/2 simulator of ``Options/http2App``, when there is one.
    public private(set) var http2Simulator: APNSHTTP2Simulator?
    /// The sandbox environments' simulators (``Options/sandboxBadTokens``,
    /// ``HTTP2App/sandboxBadTokens``), when there are.
    public private(set) var sandboxSimulator: APNSSimulator?
    public private(set) var sandboxHTTP2Simulator: APNSHTTP2Simulator?
    /// The gateway of the HTTP/2 app's broadcasts (``HTTP2App/broadcastGateway``), when it has one.
    public private(set) var broadcastHTTP2Simulator: APNSHTTP2Simulator?
    /// The workers' configuration file.
    public let configPath: String
    /// Every worker started, in order, running or not.
    public private(set) var workers: [LocalWorker] = []
    /// The networks of partitionable workers, by id (``Options/partitionable``).
    var networks: [String: WorkerNetwork] = [:]
    let cleanup: Cleanup

    private init(
        options: Options,
        directory: String,
        kafka: EmbeddedKafkaCluster,
        redis: RedisSetup,
        simulator: APNSSimulator,
        http2Simulator: APNSHTTP2Simulator?,
        configPath: String,
        cleanup: Cleanup
    ) {
        self.options = options
        self.directory = directory
        self.kafka = kafka
        self.redis = redis.server
        self.redisCluster = redis.cluster
        self.redisURL = redis.url
        self.redisClusterURLs = redis.clusterURLs
        self.simulator = simulator
        self.http2Simulator = http2Simulator
        self.configPath = configPath
        self.cleanup = cleanup
    }

    /// Starts a stack. What it starts is recorded in `cleanup`, which kills and removes it when
    /// the start fails half-way or ``shutdown()`` runs (or a signal trap runs it).
    public static func start(_ options: Options, cleanup: Cleanup = Cleanup()) async throws -> LocalStack {
        let directory = NSTemporaryDirectory() + "apn-worker-\(getpid())-\(UUID().uuidString.prefix(6))"
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            if !options.keepDirectory { cleanup.add(directory: directory) }
            let kafka = try EmbeddedKafkaCluster(brokers: options.brokers)
            let replicationFactor = Int32(options.replicationFactor)
            try kafka.createTopic("apn.requests", partitions: 12, replicationFactor: replicationFactor)
            try kafka.createTopic("apn.results", partitions: 12, replicationFactor: replicationFactor)
            for topic in options.requestsTopics + (options.parkedTopic.map { [$0] } ?? []) where topic != "apn.requests"
            {
                try kafka.createTopic(topic, partitions: 12, replicationFactor: replicationFactor)
            }
            let certificates = try TestCertificates()
            try certificates.write(to: directory + "/certs")
            let redis = try await startRedis(options, certificates: directory + "/certs", cleanup: cleanup)

            var configuration = APNSSimulator.Configuration(
                certificateChainPEM: certificates.server.certificatePEM,
                privateKeyPEM: certificates.server.keyPEM,
                clientCAPEM: certificates.ca.certificatePEM
            )
            configuration.badTokens = options.badTokens
            configuration.feedback = options.feedback
            configuration.errorDelay = options.errorDelay
            if options.binaryRecord { configuration.recordPath = directory + "/binary-record.jsonl" }
            let simulator = try await Self.startBinarySimulator(configuration)
            var http2Simulator: APNSHTTP2Simulator?
            var sandboxHTTP2Simulator: APNSHTTP2Simulator?
            var broadcastHTTP2Simulator: APNSHTTP2Simulator?
            if let app = options.http2App {
                let key = P256.Signing.PrivateKey()
                // Readable by its owner only, as the worker wants its keys (no warning at start).
                try Data(key.pemRepresentation.utf8).write(to: URL(fileURLWithPath: directory + "/certs/AuthKey.p8"))
                try FileManager.default.setAttributes(
                    [.posixPermissions: 0o600],
                    ofItemAtPath: directory + "/certs/AuthKey.p8"
                )
                http2Simulator = try await startHTTP2Simulator(app, certificates: certificates, key: key)
                if let bad = app.sandboxBadTokens {
                    var sandboxApp = app
                    sandboxApp.badTokens = bad
                    sandboxApp.unregistered = [:]
                    sandboxApp.answerFirst = nil
                    sandboxApp.sandbox = true
                    sandboxHTTP2Simulator = try await startHTTP2Simulator(
                        sandboxApp,
                        certificates: certificates,
                        key: key
                    )
                }
                if app.broadcastGateway {
                    var broadcastApp = app
                    broadcastApp.badTokens = []
                    broadcastApp.unregistered = [:]
                    broadcastApp.answerFirst = nil
                    broadcastHTTP2Simulator = try await startHTTP2Simulator(
                        broadcastApp,
                        certificates: certificates,
                        key: key
                    )
                }
            }
            var sandboxSimulator: APNSSimulator?
            if let bad = options.sandboxBadTokens {
                var sandboxConfiguration = configuration
                sandboxConfiguration.badTokens = bad
                sandboxConfiguration.feedback = []
                sandboxConfiguration.recordPath = nil
                sandboxSimulator = try await Self.startBinarySimulator(sandboxConfiguration)
            }

            let configPath = directory + "/worker.yaml"
            try workerConfiguration(
                options,
                directory: directory,
                kafka: kafka.bootstrapServers,
                redis: redis,
                simulator: simulator,
                http2Port: http2Simulator?.port,
                sandbox: (sandboxSimulator, sandboxHTTP2Simulator?.port),
                broadcastPort: broadcastHTTP2Simulator?.port
            ).write(toFile: configPath, atomically: false, encoding: .utf8)
            let stack = LocalStack(
                options: options,
                directory: directory,
                kafka: kafka,
                redis: redis,
                simulator: simulator,
                http2Simulator: http2Simulator,
                configPath: configPath,
                cleanup: cleanup
            )
            stack.sandboxSimulator = sandboxSimulator
            stack.sandboxHTTP2Simulator = sandboxHTTP2Simulator
            stack.broadcastHTTP2Simulator = broadcastHTTP2Simulator
            return stack
        } catch {
            cleanup.run()
            throw error
        }
    }

    /// The redis-server of `options`, the cluster, or the given URL.
    private static func startRedis(
        _ options: Options,
        certificates certs: String,
        cleanup: Cleanup
    ) async throws -> RedisSetup {
        if let url = options.redis { return RedisSetup(url: url) }
        if options.redisClusterPrimaries > 0 {
            let cluster = try await RedisClusterProcess.start(
                primaries: options.redisClusterPrimaries,
                replicas: options.redisClusterReplicas,
                executable: options.redisServer
            )
            for node in cluster.nodes { cleanup.add(node) }
            let urls = cluster.nodes.map { "redis://127.0.0.1:\($0.port)" }
            return RedisSetup(url: urls[0], cluster: cluster, clusterURLs: urls)
        }
        let tlsArguments = [
            "--tls-cert-file", "\(certs)/server.pem", "--tls-key-file", "\(certs)/server-key.pem",
            "--tls-ca-cert-file", "\(certs)/ca.pem", "--tls-auth-clients", "no",
        ]
        let server = try await RedisServerProcess.start(
            options.redisArguments + (options.redisTLS ? tlsArguments : []),
            tls: options.redisTLS,
            executable: options.redisServer
        )
        cleanup.add(server)
        let scheme = options.redisTLS ? "rediss" : "redis"
        return RedisSetup(
            url: "\(scheme)://127.0.0.1:\(server.port)/0",
            server: server,
            caFile: options.redisTLS ? "\(certs)/ca.pem" : nil
        )
    }

    /// An HTTP/2 simulator of ``Options/http2App``; with a provider token, it knows `key`.
    private static func startHTTP2Simulator(
        _ app: HTTP2App,
        certificates: TestCertificates,
        key: P256.Signing.PrivateKey
    ) async throws -> APNSHTTP2Simulator {
        var config = APNSHTTP2Simulator.Configuration(
            certificateChainPEM: certificates.server.certificatePEM,
            privateKeyPEM: certificates.server.keyPEM,
            clientCAPEM: app.certificateAuthentication ? certificates.ca.certificatePEM : nil
        )
        if app.certificateAuthentication {
            config.allowedTopics = [app.name]
        } else {
            config.verifier = APNSJWTVerifier(teamID: HTTP2App.teamID, keys: [HTTP2App.keyID: key.publicKey])
        }
        config.maxConcurrentStreams = 100
        config.badTokens = app.badTokens
        config.unregistered = app.unregistered
        if app.sandbox { config.environment = .sandbox }
        config.status429Every = app.status429Every
        config.responseDelay = app.responseDelay
        config.answerFirst = app.answerFirst
        return try await ServerPorts.start { port in
            config.port = port
            return try await APNSHTTP2Simulator.start(configuration: config)
        }
    }

    /// Starts a binary gateway and its feedback service on ports below the ephemeral range
    /// (``ServerPorts``), where ``restartGateway()`` finds them free again.
    private static func startBinarySimulator(_ configuration: APNSSimulator.Configuration) async throws -> APNSSimulator
    {
        var configuration = configuration
        return try await ServerPorts.start { port in
            configuration.binaryPort = port
            if configuration.feedbackPort != nil {
                configuration.feedbackPort = try port == 0 ? 0 : RedisServerProcess.freePort()
            }
            return try await APNSSimulator.start(configuration: configuration)
        }
    }

    // MARK: The gateway

    /// Stops the binary gateway and feedback service, cutting their connections: an outage.
    public func stopGateway() async {
        for (token, count) in simulator.acceptedByToken { retiredAccepted[token, default: 0] += count }
        await simulator.stop()
    }

    /// Starts the binary gateway and feedback service again on the same ports.
    public func restartGateway() async throws {
        var configuration = simulator.configuration
        configuration.binaryPort = simulator.binaryPort
        configuration.feedbackPort = simulator.feedbackPort
        simulator = try await Self.onTheSamePort { try await APNSSimulator.start(configuration: configuration) }
    }

    /// Starts a server again on the port it had, retrying for up to 5 s while the port is in use.
    /// A client that keeps connecting to the closed port (a worker reconnecting every few
    /// milliseconds) can take it for a moment: the port is in the ephemeral range, and a connect
    /// to 127.0.0.1 may be given that same port as its source and connect to itself (TCP's
    /// simultaneous open) until it fails.
    static func onTheSamePort<Server>(_ start: () async throws -> Server) async throws -> Server {
        let deadline = ContinuousClock.now + .seconds(5)
        while true {
            do {
                return try await start()
            } catch let error as IOError where error.errnoCode == EADDRINUSE && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// Stops the HTTP/2 simulator, cutting its connections: an outage of the HTTP/2 app's
    /// gateway. (What it accepted before is forgotten with it.)
    public func stopHTTP2Gateway() async {
        await http2Simulator?.stop()
    }

    /// Starts the HTTP/2 simulator again, as it was configured, on the same port.
    public func restartHTTP2Gateway() async throws {
        guard let stopped = http2Simulator else { return }
        var configuration = stopped.configuration
        configuration.port = stopped.port
        http2Simulator = try await Self.onTheSamePort {
            try await APNSHTTP2Simulator.start(configuration: configuration)
        }
    }

    /// How often each token was accepted by the binary gateway, over its restarts.
    public var acceptedByToken: [DeviceToken: Int] {
        retiredAccepted.merging(simulator.acceptedByToken, uniquingKeysWith: +)
    }

    // MARK: Redis

    /// Restarts the stack's redis-server as an operator would: `SHUTDOWN`
    /// (``RedisServerProcess/shutdown(timeout:)``), then the server again on the same port and
    /// directory. What it keeps depends on its persistence (``Options/redisArguments``, e.g.
    /// `--appendonly yes`); without any it starts empty. Returns once it answers again, having
    /// loaded what it kept (up to `readyWithin`).
    public func restartRedis(readyWithin: Duration = .seconds(120)) async throws {
        guard let redis else { throw ServerError("this stack did not start a redis-server of its own") }
        try await redis.shutdown()
        try await redis.start(readyWithin: readyWithin)
    }

    // MARK: Kafka clients

    /// A producer of jobs for this stack's Kafka.
    public func loadProducer() throws -> KafkaProducer {
        try KafkaProducer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": kafka.bootstrapServers, "linger.ms": "2", "socket.nagle.disable": "true",
            ])
        )
    }

    /// The consumer group of ``resultReader(group:fetchWaitMs:)``: `group` made unique to this process.
    public func readerGroup(_ group: String) -> String { "\(group)-\(getpid())" }

    /// A consumer of `apn.results` from the start, in a group of its own (``readerGroup(_:)``).
    public func resultReader(group: String, fetchWaitMs: Int = 5) throws -> KafkaConsumer {
        let reader = try KafkaConsumer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": kafka.bootstrapServers, "group.id": readerGroup(group),
                "auto.offset.reset": "earliest", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
                "fetch.wait.max.ms": "\(fetchWaitMs)", "socket.nagle.disable": "true",
            ])
        )
        try reader.subscribe(topics: ["apn.results"])
        return reader
    }

    // MARK: Workers

    /// Starts `apn-worker run` (``Options/workerExecutable``) with this stack's configuration and
    /// `environment` added to its variables, its log in the working directory; returns once it
    /// has printed its ready line. Everything of the stack is on this machine, so a proxy that
    /// the caller's own environment names (`HTTPS_PROXY`) is not passed on unless `environment`
    /// names it again.
    @discardableResult
    public func startWorker(id: String, environment: [String: String] = [:]) async throws -> LocalWorker {
        let starts = workers.filter { $0.id == id }.count
        let log = "\(directory)/\(id)\(starts > 0 ? "-\(starts)" : "").log"
        let noProxy = ["https_proxy": "", "HTTPS_PROXY": ""]
        var command = (options.workerExecutable, ["run", "--config", configPath, "--worker-id", id])
        if options.partitionable { command = try await network(for: id).namespace.command(command.0, command.1) }
        let child = try ChildProcess(
            command.0,
            command.1,
            stderrFile: log,
            environment: noProxy.merging(environment) { _, given in given }
        )
        cleanup.add(child.process)
        let line = await child.readLine()
        let address = line.flatMap { try? JSONValue.parse($0) }?["status"]?.stringValue
        let worker = LocalWorker(id: id, child: child, log: log, statusAddress: address)
        workers.append(worker)
        guard let line, line.contains("\"ready\"") else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw ServerError(
                "worker \(id) did not start: \(line ?? "no output"); the end of its log \(log):\n\(text.suffix(4000))"
            )
        }
        return worker
    }

    /// Whether a worker has logged that it was assigned partitions (what a readiness probe
    /// would wait for).
    public func hasBeenAssigned(_ worker: LocalWorker) -> Bool {
        guard let text = try? String(contentsOfFile: worker.log, encoding: .utf8) else { return false }
        return text.contains("\"Partitions assigned\"")
    }

    /// Stops a worker with SIGTERM and returns its exit status and its last line on stdout (what
    /// it did, as `apn-worker run` prints when it stops). One still running after `killAfter` is
    /// killed (SIGKILL; status 9).
    @discardableResult
    public func stopWorker(
        _ worker: LocalWorker,
        killAfter: Duration = .seconds(90)
    ) async -> (status: Int32, report: String?) {
        worker.signal(SIGTERM)
        let finished = await worker.child.finish(killAfter: killAfter)
        return (finished.status, finished.stdout.split(separator: "\n").last.map(String.init))
    }

    /// Kills a worker with SIGKILL, as a crash would, and waits until it has exited.
    public func killWorker(_ worker: LocalWorker) async {
        worker.signal(SIGKILL)
        await worker.waitForExit()
    }

    // MARK: Processes

    /// Every redis-server this stack started and that runs (one, or each node of a cluster).
    public var redisPIDs: [Int32] {
        ((redis.map { [$0] } ?? []) + (redisCluster?.nodes ?? [])).compactMap(\.processIdentifier)
    }

    /// The redis-server this stack started, if any (the first node of a cluster).
    public var redisPID: Int32? { redisPIDs.first }

    /// Kills the workers still running and the redis-servers (SIGKILL), stops the simulators and
    /// the embedded Kafka, and removes the working directory unless it is kept.
    public func shutdown() async {
        // The processes first, the directory they and the simulators write to last.
        cleanup.run(removingDirectories: false)
        for network in networks.values { await network.close() }
        await simulator.stop()
        await http2Simulator?.stop()
        await sandboxHTTP2Simulator?.stop()
        await broadcastHTTP2Simulator?.stop()
        await sandboxSimulator?.stop()
        await redis?.stop()
        await redisCluster?.stop()
        // librdkafka joins the brokers' thread: blocking work, kept off the cooperative pool.
        _ = try? await offPool { [kafka] in kafka.shutdown() }
        cleanup.run()
    }
}

/// The Redis a stack's workers use.
struct RedisSetup {
    var url: String
    var server: RedisServerProcess? = nil
    var cluster: RedisClusterProcess? = nil
    var clusterURLs: [String] = []
    /// The CA the workers trust for `rediss://`.
    var caFile: String? = nil
}

/// An `apn-worker run` process of a ``LocalStack``.
public final class LocalWorker: Sendable {
    /// Its `--worker-id`.
    public let id: String
    public let child: ChildProcess
    /// The file its standard error (its log) goes to.
    public let log: String
    /// The `host:port` its status server listens on, from its ready line.
    public let statusAddress: String?

    init(id: String, child: ChildProcess, log: String, statusAddress: String?) {
        self.id = id
        self.child = child
        self.log = log
        self.statusAddress = statusAddress
    }

    public var processIdentifier: Int32 { child.process.processIdentifier }
    public var isRunning: Bool { child.isRunning }
    public func signal(_ signal: Int32) { child.signal(signal) }

    /// Waits until the process has exited, off the cooperative pool.
    public func waitForExit() async {
        _ = try? await offPool { [child] in child.process.waitUntilExit() }
    }
}
