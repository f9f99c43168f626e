import APNSBinary
import APNSCore
import APNSSimulator
import ArgumentParser
import Foundation
import PushKafka
import PushRedis

/// `apn-worker demo`: the whole pipeline on one machine.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the worker end to end on an embedded stack and print what happened.",
        discussion: """
            Starts the embedded Kafka, the APNs simulator, a redis-server from PATH on a free port (unless \
            --redis is given) and two workers; produces sample jobs, some with tokens the simulator rejects, \
            some duplicated, some malformed; shows progress; summarises the results read back from \
            apn.results; and stops everything it started.
            """
    )

    @Option(help: "Number of jobs to produce.")
    var jobs = 5000
    @Option(help: "Number of worker processes.")
    var workers = 2
    @Option(help: "Use this Redis (URL) instead of starting redis-server.")
    var redis: String?
    @Option(help: "The redis-server executable to start.")
    var redisServer = "redis-server"
    @Option(help: "Keep the working directory (configuration, certificates, logs) instead of deleting it.")
    var keep = false

    func run() async throws {
        try await reportingFailures {
            guard (10...1_000_000).contains(jobs) else { throw UsageFailure(message: "--jobs must be from 10 to 1000000") }
            guard (1...8).contains(workers) else { throw UsageFailure(message: "--workers must be from 1 to 8") }
            try await runDemo()
        }
    }

    private func say(_ text: String) {
        print(text)
        fflush(nil)
    }

    private func runDemo() async throws {
        let started = ContinuousClock.now
        let directory = NSTemporaryDirectory() + "apn-worker-demo-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var children: [Process] = []
        defer {
            for child in children where child.isRunning { kill(child.processIdentifier, SIGKILL) }
            if !keep { try? FileManager.default.removeItem(atPath: directory) }
        }

        // Kafka
        let kafka = try EmbeddedKafkaCluster(brokers: 1)
        defer { kafka.shutdown() }
        try kafka.createTopic("apn.requests", partitions: 12)
        try kafka.createTopic("apn.results", partitions: 12)
        say("Kafka (embedded)     \(kafka.bootstrapServers)")

        // Redis
        let redisURL: String
        if let redis {
            redisURL = redis
        } else {
            let port = try freeLoopbackPort()
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [redisServer, "--port", String(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", directory]
            process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            process.standardError = FileHandle(forWritingAtPath: "/dev/null")
            do { try process.run() } catch {
                throw UsageFailure(message: "cannot start \(redisServer): \(error); install redis-server or pass --redis URL")
            }
            children.append(process)
            redisURL = "redis://127.0.0.1:\(port)/0"
            try await waitForRedis(url: redisURL, process: process)
        }
        say("Redis                \(redisURL)")

        // Simulator: 1% of tokens are rejected with status 8; a few are on the feedback list.
        let certificates = try TestCertificates()
        try certificates.write(to: directory + "/certs")
        let tokens = (0..<jobs).map { i in try! DeviceToken(hex: String(format: "%064x", 0xA000_0000 + i)) }
        let badTokens = Set(tokens.enumerated().filter { $0.offset % 100 == 7 }.map(\.element))
        let feedbackTokens = tokens.enumerated().filter { $0.offset % 500 == 3 }.map(\.element)
        var simulatorConfig = APNSSimulator.Configuration(
            certificateChainPEM: certificates.server.certificatePEM, privateKeyPEM: certificates.server.keyPEM,
            clientCAPEM: certificates.ca.certificatePEM)
        simulatorConfig.badTokens = badTokens
        simulatorConfig.feedback = feedbackTokens.map { FeedbackTuple(timestamp: UInt32(Date().timeIntervalSince1970), token: $0) }
        simulatorConfig.errorDelay = .milliseconds(20)
        let simulator = try await APNSSimulator.start(configuration: simulatorConfig)
        say("APNs simulator       gateway 127.0.0.1:\(simulator.binaryPort), feedback 127.0.0.1:\(simulator.feedbackPort ?? 0)")

        // Workers
        let configPath = directory + "/worker.yaml"
        try """
            kafka:
              bootstrapServers: "\(kafka.bootstrapServers)"
              groupId: apn-demo
              properties:
                session.timeout.ms: "6000"
                heartbeat.interval.ms: "500"
            redis:
              url: "\(redisURL)"
            worker:
              logFormat: json
              logLevel: notice
            apps:
              com.example.demo:
                poolSize: 2
                confirmationWindowMs: 300
                feedbackIntervalSeconds: 2
                environments:
                  production:
                    certificate: \(directory)/certs/client.pem
                    key: \(directory)/certs/client-key.pem
                    ca: \(directory)/certs/ca.pem
                    gateway: 127.0.0.1:\(simulator.binaryPort)
                    feedback: 127.0.0.1:\(simulator.feedbackPort ?? 0)
            """.write(toFile: configPath, atomically: true, encoding: .utf8)
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        for index in 1...workers {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = ["run", "--config", configPath, "--worker-id", "demo-\(index)"]
            process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            FileManager.default.createFile(atPath: directory + "/worker-\(index).log", contents: nil)
            process.standardError = FileHandle(forWritingAtPath: directory + "/worker-\(index).log")
            try process.run()
            children.append(process)
        }
        say("Workers              \(workers) (logs in \(directory)/worker-N.log)")

        // Jobs: most valid, one in 20 sent twice, 1% malformed in assorted ways.
        var messages: [KafkaOutgoingMessage] = []
        var expectedNotifications = 0
        var malformed = 0
        var duplicates = 0
        for (i, token) in tokens.enumerated() {
            if i % 100 == 50 {
                let samples = ["this is not JSON", "[1,2,3]", #"{"app":"com.example.demo","token":"\#(token.hex)"}"#,
                               #"{"id":"bad-\#(i)","app":"com.example.nope","token":"\#(token.hex)","alert":"x"}"#,
                               #"{"id":"bad-\#(i)","app":"com.example.demo","token":"xyz","alert":"x"}"#]
                messages.append(KafkaOutgoingMessage(topic: "apn.requests", key: nil, value: Array(samples[(i / 100) % samples.count].utf8)))
                malformed += 1
                continue
            }
            let job = #"{"id":"demo-\#(i)","app":"com.example.demo","token":"\#(token.hex)","alert":"Hello \#(i)","badge":\#(i % 10)}"#
            let message = KafkaOutgoingMessage(topic: "apn.requests", key: Array("demo-\(i)".utf8), value: Array(job.utf8))
            messages.append(message)
            expectedNotifications += 1
            if i % 20 == 0 {
                messages.append(message)
                duplicates += 1
            }
        }
        let producer = try KafkaProducer(configuration: KafkaConfiguration(["bootstrap.servers": kafka.bootstrapServers]))
        for chunk in stride(from: 0, to: messages.count, by: 5000) {
            for report in try await producer.send(Array(messages[chunk..<min(messages.count, chunk + 5000)])) {
                if case .failure(let error) = report { throw UsageFailure(message: "cannot produce a job: \(error)") }
            }
        }
        await producer.close()
        say("Produced             \(messages.count) messages: \(expectedNotifications) jobs, \(duplicates) of them twice, \(malformed) malformed")

        // Read results until every notification and malformed message has one.
        let reader = try KafkaConsumer(configuration: KafkaConfiguration([
            "bootstrap.servers": kafka.bootstrapServers, "group.id": "apn-demo-reader-\(getpid())",
            "auto.offset.reset": "earliest", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
        ]))
        try reader.subscribe(topics: ["apn.results"])
        var byType: [String: Int] = [:]
        var byStatus: [String: Int] = [:]
        var seen = Set<String>()
        var copies = 0
        let expected = expectedNotifications + malformed
        var lastReport = ContinuousClock.now
        let deadline = ContinuousClock.now + .seconds(120)
        while seen.subtracting([]).count < expected + feedbackTokens.count, ContinuousClock.now < deadline {
            for message in try await reader.poll(maxMessages: 5000, timeout: .milliseconds(200)) {
                guard let result = try? JSONValue.parse(message.value), let id = result["resultId"]?.stringValue,
                      let type = result["type"]?.stringValue else { continue }
                guard seen.insert(id).inserted else { copies += 1; continue }
                byType[type, default: 0] += 1
                if let name = result["statusName"]?.stringValue { byStatus[name, default: 0] += 1 }
            }
            if ContinuousClock.now - lastReport > .seconds(1) {
                lastReport = .now
                say("  results so far     \(seen.count) of about \(expected + feedbackTokens.count)")
            }
        }
        try? await reader.close()

        // Stop the workers gracefully.
        for child in children.dropFirst(redis == nil ? 1 : 0) { kill(child.processIdentifier, SIGTERM) }
        for child in children.dropFirst(redis == nil ? 1 : 0) { child.waitUntilExit() }
        let accepted = simulator.statistics.accepted
        await simulator.stop()

        say("")
        say("Summary (\(String(format: "%.1f", Double((ContinuousClock.now - started).components.seconds))) s)")
        for (type, count) in byType.sorted(by: { $0.key < $1.key }) {
            say("  \(type.padding(toLength: 19, withPad: " ", startingAt: 0)) \(count)")
        }
        for (status, count) in byStatus.sorted(by: { $0.key < $1.key }) {
            say("    status \(status.padding(toLength: 17, withPad: " ", startingAt: 0)) \(count)")
        }
        say("  duplicate jobs      \(duplicates) produced twice, sent once (simulator accepted \(accepted) for \(expectedNotifications - badTokens.count) valid notifications)")
        if copies > 0 { say("  repeated results    \(copies) (same resultId; consumers drop them)") }
        let complete = seen.count >= expected
        say(complete ? "Every notification and every malformed message has its result."
                     : "Missing results: \(expected - min(seen.count, expected)) (see the worker logs in \(directory))")
        if !complete { throw ExitCode(1) }
    }

    private func waitForRedis(url: String, process: Process) async throws {
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
