import APNSBinary
import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import PushKafka
import PushKafkaEmbedded
import PushLocalStack
import PushRedis
import PushStatus
import PushTestSupport
import Testing

/// The worker's world for one test: a ``LocalStack`` (the embedded Kafka, a redis-server, the
/// APNs simulators, `apn-worker run` processes) with a producer of jobs and a reader of results.
final class WorkerStack: @unchecked Sendable {
    // Only used from the test that owns it.
    static let app = "com.example.e2e"
    /// The app on the HTTP/2 transport, when the stack has one.
    static let http2App = "com.example.h2"
    let local: LocalStack
    let groupId: String
    private var running: [String: LocalWorker] = [:]
    /// Each running worker's status server, from its ready line.
    private(set) var statusServers: [String: StatusClient] = [:]
    private var producedPerPartition: [Int32: Int64] = [:]
    private var produced = 0
    private let producer: KafkaProducer
    private var reader: KafkaConsumer?
    /// Every result read so far, in order.
    private(set) var results: [[String: JSONValue]] = []
    /// The next offset the reader reads of each partition of `apn.results`.
    private var readPositions: [Int32: Int64] = [:]

    private init(local: LocalStack, groupId: String) throws {
        self.local = local
        self.groupId = groupId
        // Jobs of up to 1 MiB and one byte are produced, over librdkafka's default of 1,000,000.
        producer = try KafkaProducer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": local.kafka.bootstrapServers, "message.max.bytes": "4194304",
            ])
        )
    }

    var kafka: EmbeddedKafkaCluster { local.kafka }
    /// The redis-server (a stack without ``redisCluster``).
    var redis: RedisServerProcess { local.redis! }
    /// The Redis Cluster the workers use when started with `redisCluster`.
    var redisCluster: RedisClusterProcess? { local.redisCluster }
    var simulator: APNSSimulator { local.simulator }
    /// The HTTP/2 simulator of ``http2App``.
    var http2Simulator: APNSHTTP2Simulator? { local.http2Simulator }
    var broadcastHTTP2Simulator: APNSHTTP2Simulator? { local.broadcastHTTP2Simulator }
    /// The sandbox simulators (`sandboxBadTokens`, `http2SandboxBadTokens`).
    var sandboxSimulator: APNSSimulator? { local.sandboxSimulator }
    var sandboxHTTP2Simulator: APNSHTTP2Simulator? { local.sandboxHTTP2Simulator }
    var directory: String { local.directory }
    var configPath: String { local.configPath }
    /// The running workers by id.
    var workers: [String: ChildProcess] { running.mapValues(\.child) }

    /// Starts Kafka (12 partitions per topic), Redis (with an append-only file, so it keeps its
    /// data across a restart) and the simulator rejecting `badTokens` with status 8.
    ///
    /// With `http2`, a second app, ``http2App``, is delivered over HTTP/2 with token
    /// authentication to an ``APNSHTTP2Simulator`` that answers 400 `BadDeviceToken` for
    /// `http2.badTokens` and 410 `Unregistered` for `http2.unregistered`; with
    /// `http2CertificateAuth`, by client certificate instead of a provider token.
    /// `kafkaProperties` are added to the workers' librdkafka properties. `appSettings` and
    /// `http2AppSettings` are further `key: value` settings of each app (`dryRun: true`); with
    /// `http2Sandbox` the HTTP/2 app's one environment is `sandbox` (whose answers carry
    /// `apns-unique-id`); with `binaryRecord` the binary simulator writes a line per accepted
    /// notification (see ``binaryRecord()``).
    /// With `redisTLS`, redis-server listens with TLS only and the workers connect with
    /// `rediss://`, trusting the test CA. `http2Status429Every` makes the HTTP/2 simulator answer
    /// every Nth request with 429 `TooManyRequests`. With `redisCluster`, the workers use a
    /// Redis Cluster of 3 primaries with a replica each (`redis.urls`, every node a seed).
    /// `requestsTopics` are the workers' priority lanes (made beside `apn.requests`), and
    /// `maxInFlight` their `worker.maxInFlight`. `parkedTopic` is made and set as the workers'
    /// `kafka.parkedTopic`; `worker` are further settings of the workers' `worker` section.
    /// `sandboxBadTokens` (binary app) and `http2SandboxBadTokens` (HTTP/2 app) add the app's
    /// `sandbox` environment, served by a simulator of its own that refuses those tokens.
    /// `http2AnswerFirst` makes the HTTP/2 simulator answer its first requests with a reason.
    /// `confirmationWindowMs` is the binary app's, by default 200 ms, or 2 s with bad tokens:
    /// the binary protocol confirms nothing but errors, so a simulator starved of CPU by the
    /// tests around it for longer than the window has the notifications after a bad token (which
    /// it discards unread) taken as transmitted. 2 s covers a full parallel run on two slow
    /// cores; 200 ms did not (hundreds of a batch reported transmitted, never read). Without bad
    /// tokens nothing is discarded, and the short window keeps draining quick.
    static func start(
        badTokens: Set<DeviceToken> = [],
        feedback: [FeedbackTuple] = [],
        confirmationWindowMs: Int? = nil,
        devicePerHour: Int = 0,
        appPerSecond: Int = 0,
        http2: (badTokens: Set<DeviceToken>, unregistered: [DeviceToken: Date])? = nil,
        http2CertificateAuth: Bool = false,
        kafkaProperties: [String: String] = [:],
        appSettings: [String] = [],
        http2AppSettings: [String] = [],
        http2Sandbox: Bool = false,
        binaryRecord: Bool = false,
        redisTLS: Bool = false,
        http2Status429Every: Int? = nil,
        redisCluster: Bool = false,
        requestsTopics: [String] = [],
        maxInFlight: Int? = nil,
        sandboxBadTokens: Set<DeviceToken>? = nil,
        http2SandboxBadTokens: Set<DeviceToken>? = nil,
        http2AnswerFirst: (reason: APNSReason, count: Int)? = nil,
        parkedTopic: String? = nil,
        worker: [String: String] = [:],
        http2ResponseDelay: Duration = .zero,
        http2BroadcastGateway: Bool = false
    ) async throws -> WorkerStack {
        let groupId = "e2e-\(UUID().uuidString.prefix(8))"
        let window = confirmationWindowMs ?? (badTokens.isEmpty && (sandboxBadTokens ?? []).isEmpty ? 200 : 2000)
        var options = LocalStack.Options()
        options.appName = app
        options.groupId = groupId
        options.workerExecutable = Paths.executable
        options.redisServer = RedisServerProcess.executable
        options.redisArguments = ["--appendonly", "yes", "--appendfsync", "always"]
        options.redisTLS = redisTLS
        if redisCluster {
            options.redisClusterPrimaries = 3
            options.redisClusterReplicas = 1
        }
        options.redisSettings = ["connectTimeoutMs": "500", "commandTimeoutMs": "2000"]
        options.badTokens = badTokens
        options.feedback = feedback
        options.binaryRecord = binaryRecord
        options.sandboxBadTokens = sandboxBadTokens
        options.kafkaProperties = kafkaProperties
        options.worker = ["logLevel": "info", "statusAddress": "\"127.0.0.1:0\"", "shutdownTimeoutSeconds": "20"]
        if let maxInFlight { options.worker["maxInFlight"] = "\(maxInFlight)" }
        options.requestsTopics = requestsTopics
        options.parkedTopic = parkedTopic
        options.worker.merge(worker) { _, given in given }
        options.limits = ["devicePerHour": "\(devicePerHour)", "appPerSecond": "\(appPerSecond)"]
        options.app = settings(appSettings).merging(
            [
                "poolSize": "2", "confirmationWindowMs": "\(window)",
                "feedbackIntervalSeconds": feedback.isEmpty ? "0" : "1",
            ]
        ) { given, _ in given }
        options.keepDirectory = ProcessInfo.processInfo.environment["KEEP_E2E"] != nil
        if let http2 {
            var app = LocalStack.HTTP2App(name: http2App, badTokens: http2.badTokens)
            app.unregistered = http2.unregistered
            app.certificateAuthentication = http2CertificateAuth
            app.sandbox = http2Sandbox
            app.status429Every = http2Status429Every
            app.sandboxBadTokens = http2SandboxBadTokens
            app.answerFirst = http2AnswerFirst
            app.responseDelay = http2ResponseDelay
            app.broadcastGateway = http2BroadcastGateway
            app.settings = settings(http2AppSettings).merging(["poolSize": "2"]) { given, _ in given }
            options.http2App = app
        }
        return try WorkerStack(local: try await LocalStack.start(options), groupId: groupId)
    }

    /// `key: value` lines as settings.
    private static func settings(_ lines: [String]) -> [String: String] {
        Dictionary(
            lines.map { line in
                let colon = line.firstIndex(of: ":") ?? line.endIndex
                return (String(line[..<colon]), line[colon...].dropFirst().trimmingCharacters(in: .whitespaces))
            }
        ) { _, last in last }
    }

    /// Starts `apn-worker run` (with `environment` added to its variables) and waits for its ready line.
    @discardableResult
    func startWorker(_ id: String, environment: [String: String] = [:]) async throws -> ChildProcess {
        let worker = try await local.startWorker(id: id, environment: environment)
        running[id] = worker
        if let address = worker.statusAddress, let colon = address.lastIndex(of: ":"),
            let port = Int(address[address.index(after: colon)...])
        {
            statusServers[id] = StatusClient(host: String(address[..<colon]), port: port)
        }
        return worker.child
    }

    /// Kills a worker with SIGKILL, as a crash would.
    func killWorker(_ id: String) async {
        statusServers[id] = nil
        guard let worker = running.removeValue(forKey: id) else { return }
        await local.killWorker(worker)
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
        guard let worker = running.removeValue(forKey: id) else { return (-1, nil) }
        // A worker stops within its drain and join limits (docs/architecture.md, "Healing").
        let stopped = await local.stopWorker(worker, killAfter: .seconds(90))
        return (stopped.status, stopped.report.flatMap { try? JSONValue.parse($0) })
    }

    /// The binary simulator's record of accepted notifications (`binaryRecord`), one object per
    /// notification; complete once the simulator stopped.
    func binaryRecord() -> [[String: JSONValue]] {
        let text = (try? String(contentsOfFile: directory + "/binary-record.jsonl", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { (try? JSONValue.parse(String($0)))?.objectValue }
    }

    /// Stops the binary gateway and feedback service: connections are cut, new ones refused.
    func stopGateway() async { await local.stopGateway() }

    /// Starts the binary gateway and feedback service again on the same ports.
    func restartGateway() async throws { try await local.restartGateway() }

    /// Stops the HTTP/2 app's simulator, and starts it again on the same port.
    func stopHTTP2Gateway() async { await local.stopHTTP2Gateway() }
    func restartHTTP2Gateway() async throws { try await local.restartHTTP2Gateway() }

    /// How often each token was accepted by the binary gateway, over its restarts.
    var acceptedByToken: [DeviceToken: Int] { local.acceptedByToken }

    func log(of id: String) -> String {
        String(fullLog(of: id).suffix(4000))
    }

    /// Everything worker `id` wrote to standard error, across its runs: what assertions on its
    /// log read (``log(of:)`` is only its end, for failure messages).
    func fullLog(of id: String) -> String {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return files.filter { $0.hasPrefix(id) && $0.hasSuffix(".log") }.sorted().compactMap {
            try? String(contentsOfFile: directory + "/" + $0, encoding: .utf8)
        }.joined(separator: "\n")
    }

    func shutdown() async {
        for id in Array(running.keys) { await stopWorker(id) }
        try? await reader?.close()
        await producer.close()
        await local.shutdown()
    }

    // MARK: Jobs

    static func job(id: String, tokens: [DeviceToken], alert: String = "Hello", app: String = app) -> [UInt8] {
        let tokenField =
            tokens.count == 1
            ? #""token":"\#(tokens[0].hex)""#
            : #""tokens":[\#(tokens.map { "\"\($0.hex)\"" }.joined(separator: ","))]"#
        return Array(#"{"id":"\#(id)","app":"\#(app)",\#(tokenField),"alert":"\#(alert)"}"#.utf8)
    }

    /// Produces raw job messages, each with its own key, so they spread over the partitions (or
    /// all with `key`), each with its timestamp in `timestamps` when given (`nil`: the time it
    /// is produced). Returns where each message was stored, in order.
    @discardableResult
    func produce(
        _ values: [[UInt8]],
        key: String? = nil,
        topic: String = "apn.requests",
        timestamps: [Int64?]? = nil
    ) async throws -> [KafkaDeliveryReport] {
        var stored: [KafkaDeliveryReport] = []
        for chunk in stride(from: 0, to: values.count, by: 5000) {
            let range = chunk..<min(values.count, chunk + 5000)
            let reports = try await producer.send(
                range.map { index in
                    produced += 1
                    return KafkaOutgoingMessage(
                        topic: topic,
                        key: Array((key ?? "message-\(produced)").utf8),
                        value: values[index],
                        timestamp: timestamps?[index]
                    )
                }
            )
            for report in reports {
                let delivered = try report.get()
                // Only apn.requests is watched by ``waitForAllCommitted(timeout:)``.
                if topic == "apn.requests" {
                    producedPerPartition[delivered.partition] = max(
                        producedPerPartition[delivered.partition] ?? 0,
                        delivered.offset + 1
                    )
                }
                stored.append(delivered)
            }
        }
        return stored
    }

    // MARK: Results

    /// Reads `apn.results` until `done` holds for the results read so far, or the time is up;
    /// then it records an issue at the caller's line, so that a wait that fails is never silent,
    /// and returns what it read for the test's own checks to explain.
    @discardableResult
    func readResults(
        timeout: Duration = .seconds(90),
        sourceLocation: SourceLocation = #_sourceLocation,
        until done: ([[String: JSONValue]]) -> Bool
    ) async throws -> [[String: JSONValue]] {
        if reader == nil {
            let consumer = try KafkaConsumer(
                configuration: KafkaConfiguration([
                    "bootstrap.servers": kafka.bootstrapServers, "group.id": "reader-\(UUID().uuidString.prefix(8))",
                    "auto.offset.reset": "earliest", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
                ])
            )
            try consumer.subscribe(topics: ["apn.results"])
            reader = consumer
        }
        let deadline = ContinuousClock.now + timeout
        while !done(results) {
            guard ContinuousClock.now < deadline else {
                Issue.record(
                    "apn.results: what the test waits for was not read within \(timeout) (\(results.count) results read)",
                    sourceLocation: sourceLocation
                )
                break
            }
            try await pollResults()
        }
        return results
    }

    private func pollResults() async throws {
        for message in try await reader!.poll(maxMessages: 5000, timeout: .milliseconds(200)) {
            readPositions[message.partition] = max(readPositions[message.partition] ?? 0, message.offset + 1)
            if case .object(let fields) = try JSONValue.parse(message.value) { results.append(fields) }
        }
    }

    /// Reads `apn.results` up to its end as it is when called, and returns every result read: a
    /// check of "written once" made after ``waitForAllCommitted(timeout:)`` then counts every copy
    /// the workers wrote, not only those read before a test's condition was met. Records an issue
    /// and throws if the end is not reached within `timeout`.
    func readAllResults(timeout: Duration = .seconds(60)) async throws -> [[String: JSONValue]] {
        _ = try await readResults(timeout: .zero) { _ in true }
        let partitions = (0..<Int32(12)).map { TopicPartition(topic: "apn.results", partition: $0) }
        let marks = try await reader!.watermarks(partitions, timeout: .seconds(10))
        guard marks.count == partitions.count else {
            Issue.record("the results topic's end is known for \(marks.count) of \(partitions.count) partitions")
            throw CancellationError()
        }
        let end = Dictionary(uniqueKeysWithValues: marks.map { ($0.key.partition, $0.value.high) })
        let deadline = ContinuousClock.now + timeout
        func behind() -> [Int32] {
            end.filter { $0.value > (readPositions[$0.key] ?? 0) }.map(\.key).sorted()
        }
        while !behind().isEmpty {
            guard ContinuousClock.now < deadline else {
                let missing = behind().map { "partition \($0): read to \(readPositions[$0] ?? 0) of \(end[$0] ?? 0)" }
                Issue.record("apn.results not read to its end: \(missing.joined(separator: "; "))")
                throw CancellationError()
            }
            try await pollResults()
        }
        return results
    }

    /// Results by resultId (the last copy of each).
    var resultsById: [String: [String: JSONValue]] {
        Dictionary(
            results.compactMap { r in r["resultId"]?.stringValue.map { ($0, r) } },
            uniquingKeysWith: { _, b in b }
        )
    }

    /// Waits until the group has committed every produced message of every partition.
    func waitForAllCommitted(timeout: Duration = .seconds(30)) async throws -> Bool {
        let consumer = try KafkaConsumer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": kafka.bootstrapServers, "group.id": groupId,
            ])
        )
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
