import APNSBinary
import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Crypto
import Foundation
import PushKafka
import PushRedis
import PushStatus
import PushTestSupport
import Testing

/// The worker's world for one test: the embedded Kafka, a redis-server, the APNs simulator, and
/// `apn-worker run` processes.
final class WorkerStack: @unchecked Sendable {
    // Only used from the test that owns it.
    static let app = "com.example.e2e"
    /// The app on the HTTP/2 transport, when the stack has one.
    static let http2App = "com.example.h2"
    let kafka: EmbeddedKafkaCluster
    let redis: RedisServerProcess
    /// The Redis Cluster the workers use instead of ``redis`` when started with `redisCluster`.
    private(set) var redisCluster: RedisClusterProcess?
    /// The binary gateway and feedback service (replaced by ``restartGateway()``).
    private(set) var simulator: APNSSimulator
    /// What gateways stopped by ``stopGateway()`` had accepted.
    private var retiredAccepted: [DeviceToken: Int] = [:]
    /// The HTTP/2 simulator of ``http2App``.
    private(set) var http2Simulator: APNSHTTP2Simulator?
    let directory: String
    let configPath: String
    let groupId = "e2e-\(UUID().uuidString.prefix(8))"
    private(set) var workers: [String: ChildProcess] = [:]
    /// Each running worker's status server, from its ready line.
    private(set) var statusServers: [String: StatusClient] = [:]
    private var producedPerPartition: [Int32: Int64] = [:]
    private var produced = 0
    private let producer: KafkaProducer
    private var reader: KafkaConsumer?
    /// Every result read so far, in order.
    private(set) var results: [[String: JSONValue]] = []

    private init(
        kafka: EmbeddedKafkaCluster, redis: RedisServerProcess, simulator: APNSSimulator,
        directory: String, configPath: String
    ) throws {
        self.kafka = kafka
        self.redis = redis
        self.simulator = simulator
        self.directory = directory
        self.configPath = configPath
        // Jobs of up to 1 MiB and one byte are produced, over librdkafka's default of 1,000,000.
        producer = try KafkaProducer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": kafka.bootstrapServers, "message.max.bytes": "4194304",
            ]))
    }

    /// Starts Kafka (12 partitions per topic), Redis (with an append-only file, so it keeps its
    /// data across a restart) and the simulator rejecting `badTokens` with status 8.
    ///
    /// With `http2`, a second app, ``http2App``, is delivered over HTTP/2 with token
    /// authentication to an ``APNSHTTP2Simulator`` that answers 400 `BadDeviceToken` for
    /// `http2.badTokens` and 410 `Unregistered` for `http2.unregistered`; with
    /// `http2CertificateAuth`, by client certificate instead of a provider token.
    /// `kafkaProperties` are added to the workers' librdkafka properties. `appSettings` and
    /// `http2AppSettings` are further setting lines of each app (`dryRun: true`); with
    /// `http2Sandbox` the HTTP/2 app's one environment is `sandbox` (whose answers carry
    /// `apns-unique-id`); with `binaryRecord` the binary simulator writes a line per accepted
    /// notification (see ``binaryRecord()``).
    /// With `redisTLS`, redis-server listens with TLS only and the workers connect with
    /// `rediss://`, trusting the test CA. `http2Status429Every` makes the HTTP/2 simulator answer
    /// every Nth request with 429 `TooManyRequests`. With `redisCluster`, the workers use a
    /// Redis Cluster of 3 primaries with a replica each (`redis.urls`, every node a seed).
    static func start(
        badTokens: Set<DeviceToken> = [], feedback: [FeedbackTuple] = [],
        confirmationWindowMs: Int = 200, devicePerHour: Int = 0, appPerSecond: Int = 0,
        http2: (badTokens: Set<DeviceToken>, unregistered: [DeviceToken: Date])? = nil,
        http2CertificateAuth: Bool = false, kafkaProperties: [String: String] = [:],
        appSettings: [String] = [], http2AppSettings: [String] = [], http2Sandbox: Bool = false, binaryRecord: Bool = false,
        redisTLS: Bool = false, http2Status429Every: Int? = nil, redisCluster: Bool = false
    ) async throws -> WorkerStack {
        let directory = try Paths.temporaryDirectory()
        let kafka = try EmbeddedKafkaCluster(brokers: 1)
        try kafka.createTopic("apn.requests", partitions: 12)
        try kafka.createTopic("apn.results", partitions: 12)
        let certificates = try TestCertificates()
        try certificates.write(to: directory + "/certs")
        let certs = directory + "/certs"
        let redisTLSArguments = [
            "--tls-cert-file", "\(certs)/server.pem", "--tls-key-file", "\(certs)/server-key.pem",
            "--tls-ca-cert-file", "\(certs)/ca.pem", "--tls-auth-clients", "no",
        ]
        let redis = try await RedisServerProcess.start(
            ["--appendonly", "yes", "--appendfsync", "always"] + (redisTLS ? redisTLSArguments : []), tls: redisTLS)
        let cluster = redisCluster ? try await RedisClusterProcess.start(primaries: 3, replicas: 1) : nil
        let redisLines =
            if let cluster {
                "urls: [\(cluster.nodes.map { "\"redis://127.0.0.1:\($0.port)\"" }.joined(separator: ", "))]"
            } else if redisTLS {
                "url: \"rediss://127.0.0.1:\(redis.port)/0\"\n  caFile: \"\(certs)/ca.pem\""
            } else {
                "url: \"redis://127.0.0.1:\(redis.port)/0\""
            }
        var configuration = APNSSimulator.Configuration(
            certificateChainPEM: certificates.server.certificatePEM, privateKeyPEM: certificates.server.keyPEM,
            clientCAPEM: certificates.ca.certificatePEM)
        configuration.badTokens = badTokens
        configuration.feedback = feedback
        if binaryRecord { configuration.recordPath = directory + "/binary-record.jsonl" }
        let simulator = try await APNSSimulator.start(configuration: configuration)
        var http2Simulator: APNSHTTP2Simulator?
        var http2Config = ""
        if let http2 {
            let key = P256.Signing.PrivateKey()
            try key.pemRepresentation.write(toFile: directory + "/certs/AuthKey.p8", atomically: false, encoding: .utf8)
            var config = APNSHTTP2Simulator.Configuration(
                certificateChainPEM: certificates.server.certificatePEM, privateKeyPEM: certificates.server.keyPEM,
                clientCAPEM: http2CertificateAuth ? certificates.ca.certificatePEM : nil)
            if http2CertificateAuth {
                config.allowedTopics = [http2App]
            } else {
                config.verifier = APNSJWTVerifier(teamID: "TEAM123456", keys: ["KEY1234567": key.publicKey])
            }
            // Continuation lines carry the 8 spaces the block below gives its keys.
            let credentials =
                http2CertificateAuth
                ? "certificate: \(directory)/certs/client.pem\n        key: \(directory)/certs/client-key.pem"
                : "signingKey: \(directory)/certs/AuthKey.p8\n        keyId: KEY1234567\n        teamId: TEAM123456"
            config.maxConcurrentStreams = 100
            config.badTokens = http2.badTokens
            config.unregistered = http2.unregistered
            if http2Sandbox { config.environment = .sandbox }
            config.status429Every = http2Status429Every
            let started = try await APNSHTTP2Simulator.start(configuration: config)
            http2Simulator = started
            http2Config = """

                  \(http2App):
                    transport: http2
                    poolSize: 2\(http2AppSettings.map { "\n    \($0)" }.joined())
                    environments:
                      \(http2Sandbox ? "sandbox" : "production"):
                        \(credentials)
                        ca: \(directory)/certs/ca.pem
                        gateway: 127.0.0.1:\(started.port)
                """
        }
        let configPath = directory + "/worker.yaml"
        try """
        kafka:
          bootstrapServers: "\(kafka.bootstrapServers)"
          properties:
            session.timeout.ms: "6000"
            heartbeat.interval.ms: "500"
        \(kafkaProperties.sorted { $0.key < $1.key }.map { "    \($0.key): \"\($0.value)\"\n" }.joined())redis:
          \(redisLines)
          connectTimeoutMs: 500
          commandTimeoutMs: 2000
        worker:
          logFormat: json
          logLevel: info
          statusAddress: "127.0.0.1:0"
          shutdownTimeoutSeconds: 20
        limits:
          devicePerHour: \(devicePerHour)
          appPerSecond: \(appPerSecond)
        apps:
          \(app):
            poolSize: 2
            confirmationWindowMs: \(confirmationWindowMs)
            feedbackIntervalSeconds: \(feedback.isEmpty ? 0 : 1)\(appSettings.map { "\n    \($0)" }.joined())
            environments:
              production:
                certificate: \(directory)/certs/client.pem
                key: \(directory)/certs/client-key.pem
                ca: \(directory)/certs/ca.pem
                gateway: 127.0.0.1:\(simulator.binaryPort)
                feedback: 127.0.0.1:\(simulator.feedbackPort ?? 0)\(http2Config)
        """.write(toFile: configPath, atomically: false, encoding: .utf8)
        let stack = try WorkerStack(kafka: kafka, redis: redis, simulator: simulator, directory: directory, configPath: configPath)
        stack.http2Simulator = http2Simulator
        stack.redisCluster = cluster
        return stack
    }

    /// Stops the binary gateway and feedback service: connections are cut, new ones refused.
    func stopGateway() async {
        for (token, count) in simulator.acceptedByToken { retiredAccepted[token, default: 0] += count }
        await simulator.stop()
    }

    /// Starts the binary gateway and feedback service again on the same ports.
    func restartGateway() async throws {
        var configuration = simulator.configuration
        configuration.binaryPort = simulator.binaryPort
        configuration.feedbackPort = simulator.feedbackPort
        simulator = try await APNSSimulator.start(configuration: configuration)
    }

    /// How often each token was accepted by the binary gateway, over its restarts.
    var acceptedByToken: [DeviceToken: Int] {
        retiredAccepted.merging(simulator.acceptedByToken, uniquingKeysWith: +)
    }

    /// Starts `apn-worker run` (with `environment` added to its variables) and waits for its ready line.
    @discardableResult
    func startWorker(_ id: String, environment: [String: String] = [:]) async throws -> ChildProcess {
        let process = try ChildProcess(
            Paths.executable, ["run", "--config", configPath, "--worker-id", id, "--group", groupId],
            stderrFile: "\(directory)/\(id)-\(workers.count).log", environment: environment)
        workers[id] = process
        let line = await process.readLine()
        guard let line, line.contains("\"ready\"") else {
            throw ServerError("worker \(id) did not start: \(line ?? "no output"); log: \(log(of: id))")
        }
        if let address = (try? JSONValue.parse(line))?["status"]?.stringValue, let colon = address.lastIndex(of: ":"),
            let port = Int(address[address.index(after: colon)...])
        {
            statusServers[id] = StatusClient(host: String(address[..<colon]), port: port)
        }
        return process
    }

    /// Kills a worker with SIGKILL, as a crash would.
    func killWorker(_ id: String) async {
        statusServers[id] = nil
        guard let process = workers.removeValue(forKey: id) else { return }
        process.signal(SIGKILL)
        _ = await process.finish(killAfter: .seconds(10))
    }

    /// Stops a worker with SIGTERM and returns its exit status.
    @discardableResult
    func stopWorker(_ id: String) async -> Int32 {
        await stopWorkerReporting(id).status
    }

    /// Stops a worker with SIGTERM and returns its exit status and its last line on stdout
    /// (what it did, as `apn-worker run` prints when it stops).
    func stopWorkerReporting(_ id: String) async -> (status: Int32, report: JSONValue?) {
        statusServers[id] = nil
        guard let process = workers.removeValue(forKey: id) else { return (-1, nil) }
        process.signal(SIGTERM)
        // A worker stops within its drain and join limits (docs/architecture.md, "Healing").
        let finished = await process.finish(killAfter: .seconds(90))
        let last = finished.stdout.split(separator: "\n").last.map(String.init)
        return (finished.status, last.flatMap { try? JSONValue.parse($0) })
    }

    /// The binary simulator's record of accepted notifications (`binaryRecord`), one object per
    /// notification; complete once the simulator stopped.
    func binaryRecord() -> [[String: JSONValue]] {
        let text = (try? String(contentsOfFile: directory + "/binary-record.jsonl", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { (try? JSONValue.parse(String($0)))?.objectValue }
    }

    func log(of id: String) -> String {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return files.filter { $0.hasPrefix(id) && $0.hasSuffix(".log") }.sorted().compactMap {
            try? String(contentsOfFile: directory + "/" + $0, encoding: .utf8)
        }.joined(separator: "\n").suffix(4000).description
    }

    func shutdown() async {
        for id in Array(workers.keys) { await stopWorker(id) }
        try? await reader?.close()
        await producer.close()
        await simulator.stop()
        await http2Simulator?.stop()
        await redis.stop()
        await redisCluster?.stop()
        // librdkafka joins the brokers' thread: blocking work, kept off the cooperative pool.
        _ = try? await offPool { [kafka] in kafka.shutdown() }
        if ProcessInfo.processInfo.environment["KEEP_E2E"] == nil { try? FileManager.default.removeItem(atPath: directory) }
    }

    // MARK: Jobs

    static func job(id: String, tokens: [DeviceToken], alert: String = "Hello", app: String = app) -> [UInt8] {
        let tokenField =
            tokens.count == 1
            ? #""token":"\#(tokens[0].hex)""#
            : #""tokens":[\#(tokens.map { "\"\($0.hex)\"" }.joined(separator: ","))]"#
        return Array(#"{"id":"\#(id)","app":"\#(app)",\#(tokenField),"alert":"\#(alert)"}"#.utf8)
    }

    /// Produces raw job messages, each with its own key, so they spread over the partitions.
    /// Returns where each message was stored, in order.
    @discardableResult
    func produce(_ values: [[UInt8]]) async throws -> [KafkaDeliveryReport] {
        var stored: [KafkaDeliveryReport] = []
        for chunk in stride(from: 0, to: values.count, by: 5000) {
            let slice = values[chunk..<min(values.count, chunk + 5000)]
            let reports = try await producer.send(
                slice.map { value in
                    produced += 1
                    return KafkaOutgoingMessage(topic: "apn.requests", key: Array("message-\(produced)".utf8), value: value)
                })
            for report in reports {
                let delivered = try report.get()
                producedPerPartition[delivered.partition] = max(producedPerPartition[delivered.partition] ?? 0, delivered.offset + 1)
                stored.append(delivered)
            }
        }
        return stored
    }

    // MARK: Results

    /// Reads `apn.results` until `done` holds for the results read so far, or the time is up.
    @discardableResult
    func readResults(timeout: Duration = .seconds(90), until done: ([[String: JSONValue]]) -> Bool) async throws -> [[String: JSONValue]] {
        if reader == nil {
            let consumer = try KafkaConsumer(
                configuration: KafkaConfiguration([
                    "bootstrap.servers": kafka.bootstrapServers, "group.id": "reader-\(UUID().uuidString.prefix(8))",
                    "auto.offset.reset": "earliest", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
                ]))
            try consumer.subscribe(topics: ["apn.results"])
            reader = consumer
        }
        let deadline = ContinuousClock.now + timeout
        while !done(results), ContinuousClock.now < deadline {
            for message in try await reader!.poll(maxMessages: 5000, timeout: .milliseconds(200)) {
                if case .object(let fields) = try JSONValue.parse(message.value) { results.append(fields) }
            }
        }
        return results
    }

    /// Results by resultId (the last copy of each).
    var resultsById: [String: [String: JSONValue]] {
        Dictionary(results.compactMap { r in r["resultId"]?.stringValue.map { ($0, r) } }, uniquingKeysWith: { _, b in b })
    }

    /// Waits until the group has committed every produced message of every partition.
    func waitForAllCommitted(timeout: Duration = .seconds(30)) async throws -> Bool {
        let consumer = try KafkaConsumer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": kafka.bootstrapServers, "group.id": groupId,
            ]))
        defer { Task { try? await consumer.close() } }
        let partitions = producedPerPartition.keys.map { TopicPartition(topic: "apn.requests", partition: $0) }
        let deadline = ContinuousClock.now + timeout
        var last: [Int32: Int64] = [:]
        while ContinuousClock.now < deadline {
            let committed = try await consumer.committed(partitions)
            last = Dictionary(committed.map { ($0.partition, $0.offset) }, uniquingKeysWith: max)
            if producedPerPartition.allSatisfy({ last[$0.key] == $0.value }) { return true }
            try await Task.sleep(for: .milliseconds(200))
        }
        let behind = producedPerPartition.filter { last[$0.key] != $0.value }
            .map { "partition \($0.key): committed \(last[$0.key].map(String.init) ?? "none") of \($0.value)" }
        Issue.record("offsets not committed to the end: \(behind.sorted().joined(separator: "; "))")
        return false
    }
}

extension DeviceToken {
    /// A distinct 32-byte token for test number `n`.
    static func numbered(_ n: Int, salt: Int = 0) -> DeviceToken {
        try! DeviceToken(hex: String(format: "%016lx%048lx", salt, n))
    }
}
