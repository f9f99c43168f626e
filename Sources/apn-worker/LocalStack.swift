import APNSBinary
import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Crypto
import Foundation
import PushKafka
import PushRedis
import Synchronization
import UnixSignals

/// The embedded stack that `demo` and `bench-worker` run on: the embedded Kafka, a redis-server
/// on a free port (or a given Redis), the APNs simulator, and worker processes.
///
/// `@unchecked Sendable`: a command drives it from one task at a time (bench-failover hands it
/// to its scenario task while the main task only reads results from Kafka).
final class LocalStack: @unchecked Sendable {
    let directory: String
    let kafka: EmbeddedKafkaCluster
    let redisURL: String
    /// The seed URLs of the Redis Cluster this stack started (``Options/redisClusterPrimaries``).
    let redisClusterURLs: [String]
    /// The binary gateway and feedback service (replaced by ``restartGateway()``).
    private(set) var simulator: APNSSimulator
    /// What gateways stopped by ``stopGateway()`` had accepted.
    private var retiredAccepted: [DeviceToken: Int] = [:]
    /// The HTTP/2 simulator of ``Options/http2App``, when there is one.
    let http2Simulator: APNSHTTP2Simulator?
    let configPath: String
    private var redisProcesses: [Process] = []
    private(set) var workers: [Process] = []

    struct Options {
        var redis: String?
        var redisServer = "redis-server"
        /// Instead of one redis-server: a Redis Cluster of this many primaries (no replicas),
        /// made with `redis-cli --cluster create`, which the workers use with `redis.urls`.
        var redisClusterPrimaries = 0
        var badTokens: Set<DeviceToken> = []
        var feedback: [FeedbackTuple] = []
        var errorDelay: Duration = .zero
        /// Extra librdkafka properties for the workers.
        var kafkaProperties: [String: String] = [:]
        /// The workers' `session.timeout.ms` (heartbeats every twelfth of it); `nil` keeps the
        /// worker's defaults.
        var sessionTimeoutMs: Int? = 6000
        /// Brokers of the embedded Kafka.
        var brokers = 1
        /// Extra YAML under `worker:`.
        var worker: [String: String] = [:]
        /// Extra YAML under the app.
        var app: [String: String] = [:]
        var keepDirectory = false
        /// A second app, delivered over HTTP/2 with a provider token to an HTTP/2 simulator
        /// that rejects the same `badTokens` (400 BadDeviceToken).
        var http2App: String?
    }

    static let app = "com.example.demo"

    init(_ options: Options) async throws {
        directory = NSTemporaryDirectory() + "apn-worker-\(getpid())-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if !options.keepDirectory { Self.started.withLock { [directory] in $0.directories.append(directory) } }
        kafka = try EmbeddedKafkaCluster(brokers: options.brokers)
        try kafka.createTopic("apn.requests", partitions: 12)
        try kafka.createTopic("apn.results", partitions: 12)

        if let redis = options.redis {
            redisURL = redis
            redisClusterURLs = []
        } else if options.redisClusterPrimaries > 0 {
            var urls: [String] = []
            for _ in 0..<options.redisClusterPrimaries {
                let port = try freeLoopbackPort()
                let bus = try freeLoopbackPort()
                redisProcesses.append(
                    try Self.startRedis(
                        options.redisServer, port: port, directory: directory,
                        extra: [
                            "--cluster-enabled", "yes", "--cluster-config-file", "nodes-\(port).conf", "--cluster-port", String(bus),
                        ]))
                urls.append("redis://127.0.0.1:\(port)")
                try await Self.waitForRedis(url: urls.last!, process: redisProcesses.last!)
            }
            try await Self.createCluster(urls)
            redisURL = urls[0]
            redisClusterURLs = urls
        } else {
            let port = try freeLoopbackPort()
            let process = try Self.startRedis(options.redisServer, port: port, directory: directory, extra: [])
            redisProcesses = [process]
            redisURL = "redis://127.0.0.1:\(port)/0"
            redisClusterURLs = []
            try await Self.waitForRedis(url: redisURL, process: process)
        }

        let certificates = try TestCertificates()
        try certificates.write(to: directory + "/certs")
        var configuration = APNSSimulator.Configuration(
            certificateChainPEM: certificates.server.certificatePEM, privateKeyPEM: certificates.server.keyPEM,
            clientCAPEM: certificates.ca.certificatePEM)
        configuration.badTokens = options.badTokens
        configuration.feedback = options.feedback
        configuration.errorDelay = options.errorDelay
        simulator = try await APNSSimulator.start(configuration: configuration)

        var http2Block = ""
        if let http2App = options.http2App {
            let key = P256.Signing.PrivateKey()
            try key.pemRepresentation.write(toFile: directory + "/certs/AuthKey.p8", atomically: false, encoding: .utf8)
            var config = APNSHTTP2Simulator.Configuration(
                certificateChainPEM: certificates.server.certificatePEM, privateKeyPEM: certificates.server.keyPEM,
                clientCAPEM: nil)
            config.verifier = APNSJWTVerifier(teamID: "DEMOTEAM01", keys: ["DEMOKEY001": key.publicKey])
            config.badTokens = options.badTokens
            config.maxConcurrentStreams = 100
            let started = try await APNSHTTP2Simulator.start(configuration: config)
            http2Simulator = started
            http2Block = """
                  \(http2App):
                    transport: http2
                    poolSize: \(options.app["poolSize"] ?? "2")
                    environments:
                      production:
                        signingKey: \(directory)/certs/AuthKey.p8
                        keyId: DEMOKEY001
                        teamId: DEMOTEAM01
                        ca: \(directory)/certs/ca.pem
                        gateway: 127.0.0.1:\(started.port)

                """
        } else {
            http2Simulator = nil
        }

        configPath = directory + "/worker.yaml"
        // Each worker's status server on a free port, unless the options say otherwise.
        let worker = options.worker.merging(["statusAddress": "\"127.0.0.1:0\""]) { given, _ in given }
            .sorted { $0.key < $1.key }.map { "  \($0.key): \($0.value)\n" }.joined()
        let app = options.app.sorted { $0.key < $1.key }.map { "    \($0.key): \($0.value)\n" }.joined()
        try """
        kafka:
          bootstrapServers: "\(kafka.bootstrapServers)"
          groupId: apn-local
          properties:
        \(sessionProperties(options.sessionTimeoutMs))\(options.kafkaProperties.sorted { $0.key < $1.key }.map { "    \($0.key): \"\($0.value)\"\n" }.joined())redis:
          \(redisClusterURLs.isEmpty ? "url: \"\(redisURL)\"" : "urls: [\(redisClusterURLs.map { "\"\($0)\"" }.joined(separator: ", "))]\n  cluster: true")
        worker:
          logFormat: json
        \(worker)apps:
          \(Self.app):
        \(app)    environments:
              production:
                certificate: \(directory)/certs/client.pem
                key: \(directory)/certs/client-key.pem
                ca: \(directory)/certs/ca.pem
                gateway: 127.0.0.1:\(simulator.binaryPort)
                feedback: 127.0.0.1:\(simulator.feedbackPort ?? 0)
        \(http2Block)
        """.write(toFile: configPath, atomically: false, encoding: .utf8)
    }

    /// Stops the binary gateway and feedback service, cutting their connections: an outage.
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

    /// Runs `body` on a new stack and shuts the stack down afterwards, whether `body` succeeded.
    /// A SIGINT or SIGTERM meanwhile kills the processes the stack started (workers and
    /// redis-servers, which would otherwise outlive this one), removes its working directory
    /// unless it is kept, and ends this process with status 128 + the signal.
    static func with(_ options: Options, _ body: (LocalStack) async throws -> Void) async throws {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let trap = Task {
            for await signal in signals {
                cleanUpStarted()
                FileHandle.standardError.write(
                    Data("apn-worker: stopped by \(signal); the workers and redis-server it started are stopped too\n".utf8))
                _exit(128 + signal.rawValue)
            }
        }
        defer { trap.cancel() }
        let stack: LocalStack
        do {
            stack = try await LocalStack(options)
        } catch {
            cleanUpStarted()
            throw error
        }
        do {
            try await body(stack)
        } catch {
            await stack.shutdown()
            throw error
        }
        await stack.shutdown()
    }

    /// What the stack of this process started and has not cleaned up yet: the processes, and the
    /// working directory unless it is kept. A process runs one stack at a time (``with(_:_:)``
    /// returns after its stack's shutdown), so this is that stack's.
    private static let started = Mutex<(processes: [Process], directories: [String])>(([], []))

    private static func register(_ process: Process) {
        started.withLock { $0.processes.append(process) }
    }

    /// Kills (SIGKILL) and reaps every process the stack started and removes its directory.
    private static func cleanUpStarted() {
        let (processes, directories) = started.withLock { started in
            defer { started = ([], []) }
            return started
        }
        for process in processes where process.isRunning { kill(process.processIdentifier, SIGKILL) }
        for process in processes { process.waitUntilExit() }
        for directory in directories { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// A producer of jobs for this stack's Kafka.
    func loadProducer() throws -> KafkaProducer {
        try KafkaProducer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": kafka.bootstrapServers, "linger.ms": "2", "socket.nagle.disable": "true",
            ]))
    }

    /// A consumer of `apn.results` from the start, in a group of its own.
    func resultReader(group: String, fetchWaitMs: Int = 5) throws -> KafkaConsumer {
        let reader = try KafkaConsumer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": kafka.bootstrapServers, "group.id": "\(group)-\(getpid())",
                "auto.offset.reset": "earliest", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
                "fetch.wait.max.ms": "\(fetchWaitMs)", "socket.nagle.disable": "true",
            ]))
        try reader.subscribe(topics: ["apn.results"])
        return reader
    }

    /// Starts `apn-worker run` with its log in the working directory; returns once it is ready.
    @discardableResult
    func startWorker(id: String) throws -> Process {
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["run", "--config", configPath, "--worker-id", id]
        let stdout = Pipe()
        process.standardOutput = stdout
        let starts = workers.filter { $0.arguments?.last == id }.count
        let log = "\(directory)/\(id)\(starts > 0 ? "-\(starts)" : "").log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: log)
        try process.run()
        Self.register(process)
        workers.append(process)
        let reader = LineReader(stdout.fileHandleForReading)
        guard let line = reader.next(), line.contains("\"ready\"") else {
            throw UsageFailure(message: "worker \(id) did not start; see \(log)")
        }
        workerOutputs[process.processIdentifier] = reader
        workerLogs[process.processIdentifier] = log
        if let address = (try? JSONValue.parse(line))?["status"]?.stringValue {
            statusAddresses[process.processIdentifier] = address
        }
        return process
    }

    private var statusAddresses: [Int32: String] = [:]

    /// The `host:port` a worker's status server listens on, from its ready line.
    func statusAddress(of process: Process) -> String? { statusAddresses[process.processIdentifier] }

    private var workerLogs: [Int32: String] = [:]

    /// Whether a worker has logged that it was assigned partitions (what a readiness probe
    /// would wait for).
    func hasBeenAssigned(_ process: Process) -> Bool {
        guard let log = workerLogs[process.processIdentifier],
            let text = try? String(contentsOfFile: log, encoding: .utf8)
        else { return false }
        return text.contains("\"Partitions assigned\"")
    }

    private var workerOutputs: [Int32: LineReader] = [:]

    /// Stops a worker with SIGTERM and returns its last line of output (its statistics).
    func stopWorker(_ process: Process) -> String? {
        kill(process.processIdentifier, SIGTERM)
        let reader = workerOutputs[process.processIdentifier]
        var last: String?
        while let line = reader?.next() { last = line }
        process.waitUntilExit()
        return last
    }

    /// CPU time (user + system) a process has used, in seconds.
    static func cpuSeconds(of pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The redis-server this stack started, if any (the first node of a cluster).
    var redisPID: Int32? { redisProcesses.first?.processIdentifier }

    /// Every redis-server this stack started.
    var redisPIDs: [Int32] { redisProcesses.map(\.processIdentifier) }

    /// Peak resident memory of a process, in bytes (VmHWM).
    static func peakRSS(of pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return nil }
        return kb * 1024
    }

    /// Kills the workers and redis-servers, removes the working directory unless it is kept, and
    /// stops the simulators and the embedded Kafka.
    func shutdown() async {
        Self.cleanUpStarted()
        await simulator.stop()
        await http2Simulator?.stop()
        kafka.shutdown()
    }

    private static func startRedis(_ server: String, port: Int, directory: String, extra: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments =
            [server, "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory] + extra
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        do { try process.run() } catch {
            throw UsageFailure(message: "cannot start \(server): \(error); install redis-server or pass --redis URL")
        }
        register(process)
        return process
    }

    /// Joins the nodes into a cluster with `redis-cli --cluster create` and waits until every
    /// node reports `cluster_state:ok`.
    private static func createCluster(_ urls: [String]) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments =
            ["timeout", "30", "redis-cli", "--cluster", "create"] + urls.map { String($0.dropFirst("redis://".count)) }
            + ["--cluster-replicas", "0", "--cluster-yes"]
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw UsageFailure(message: "redis-cli --cluster create failed with status \(process.terminationStatus)")
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            var ok = true
            for url in urls {
                let connection = try await RedisConnection.connect(try RedisConfiguration(url: url))
                let info = (try? await connection.send(["CLUSTER", "INFO"]).string) ?? ""
                await connection.close()
                ok = ok && info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:\(urls.count)")
            }
            if ok { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw UsageFailure(message: "the Redis Cluster did not reach cluster_state:ok within 30 s")
    }

    private static func waitForRedis(url: String, process: Process) async throws {
        let configuration = try RedisConfiguration(url: url, connectTimeout: .milliseconds(500))
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            guard process.isRunning else { throw UsageFailure(message: "redis-server exited at start; is the port free?") }
            if let connection = try? await RedisConnection.connect(configuration) {
                await connection.close()
                return
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw UsageFailure(message: "redis-server did not answer within 10 s")
    }
}

private func sessionProperties(_ timeoutMs: Int?) -> String {
    guard let timeoutMs else { return "" }
    return """
            session.timeout.ms: "\(timeoutMs)"
            heartbeat.interval.ms: "\(max(100, timeoutMs / 12))"

        """
}

/// Reads lines from a pipe (blocking).
final class LineReader {
    private let handle: FileHandle
    private var buffer = Data()
    init(_ handle: FileHandle) { self.handle = handle }

    func next() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                buffer = Data(buffer[buffer.index(after: newline)...])
                return line
            }
            let chunk = handle.availableData
            if chunk.isEmpty {
                defer { buffer = Data() }
                return buffer.isEmpty ? nil : String(decoding: buffer, as: UTF8.self)
            }
            buffer.append(chunk)
        }
    }
}

/// A loopback port that was free a moment ago.
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw UsageFailure(message: "cannot open a socket to find a free port") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard ok else { throw UsageFailure(message: "cannot find a free port on 127.0.0.1") }
    return Int(UInt16(bigEndian: address.sin_port))
}
