import APNSBinary
import APNSCore
import APNSSimulator
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack
import PushRedis
import PushSecrets
import PushStatus

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
            guard (10...1_000_000).contains(jobs) else {
                throw UsageFailure(message: "--jobs must be from 10 to 1000000")
            }
            guard (1...8).contains(workers) else { throw UsageFailure(message: "--workers must be from 1 to 8") }
            try await runDemo()
        }
    }

    /// Every other block of 100 jobs goes to this app, delivered over HTTP/2.
    static let http2App = "com.example.demo.h2"

    private func say(_ text: String) {
        print(text)
        fflush(nil)
    }

    private func runDemo() async throws {
        let started = ContinuousClock.now
        // Sample devices: 1% are rejected by the simulator (status 8), a few are reported by its
        // feedback service.
        let tokens = (0..<jobs).map { i in try! DeviceToken(hex: String(format: "%064lx", 0xA000_0000 + i)) }
        let badTokens = Set(tokens.enumerated().filter { $0.offset % 100 == 7 }.map(\.element))
        let feedbackTokens = tokens.enumerated().filter { $0.offset % 500 == 3 }.map(\.element)
        var options = LocalStack.Options()
        options.redis = redis
        options.redisServer = redisServer
        options.badTokens = badTokens
        options.feedback = feedbackTokens.map {
            FeedbackTuple(timestamp: UInt32(Date().timeIntervalSince1970), token: $0)
        }
        options.errorDelay = .milliseconds(20)
        options.worker = ["logLevel": "notice"]
        options.app = ["poolSize": "2", "confirmationWindowMs": "300", "feedbackIntervalSeconds": "2"]
        options.keepDirectory = keep
        options.http2App = LocalStack.HTTP2App(name: Self.http2App, badTokens: badTokens)
        try await LocalStack.with(options) { stack in
            try await runDemo(
                on: stack,
                tokens: tokens,
                badTokens: badTokens,
                feedbackTokens: feedbackTokens,
                started: started
            )
        }
    }

    private func runDemo(
        on stack: LocalStack,
        tokens: [DeviceToken],
        badTokens: Set<DeviceToken>,
        feedbackTokens: [DeviceToken],
        started: ContinuousClock.Instant
    ) async throws {
        say("Kafka (embedded)     \(stack.kafka.bootstrapServers)")
        say("Redis                \(URLUserInfo.redacted(stack.redisURL))")
        say(
            "APNs simulator       binary gateway 127.0.0.1:\(stack.simulator.binaryPort), feedback 127.0.0.1:\(stack.simulator.feedbackPort ?? 0), HTTP/2 127.0.0.1:\(stack.http2Simulator?.port ?? 0)"
        )
        say(
            "Apps                 \(LocalStack.app) (binary protocol), \(Self.http2App) (HTTP/2, provider token, one job in ten a Live Activity); jobs alternate in blocks of 100"
        )
        var workerProcesses: [LocalWorker] = []
        for index in 1...workers {
            workerProcesses.append(try await stack.startWorker(id: "demo-\(index)"))
        }
        say(
            "Workers              \(workers) (logs in \(stack.directory)\(keep ? "" : ", removed at the end; --keep keeps them"))"
        )
        let statusServers = workerProcesses.compactMap(\.statusAddress)
        say("Status servers       \(statusServers.map { "http://\($0)/status" }.joined(separator: ", "))")

        // Jobs: most valid, one in 20 produced twice, 1% malformed in assorted ways.
        let app = LocalStack.app
        var messages: [KafkaOutgoingMessage] = []
        var expectedNotifications = 0
        var malformed = 0
        var duplicates = 0
        for (i, token) in tokens.enumerated() {
            if i % 100 == 50 {
                let samples = [
                    "this is not JSON", "[1,2,3]", #"{"app":"\#(app)","token":"\#(token.hex)","alert":"x"}"#,
                    #"{"id":"bad-\#(i)","app":"com.example.nope","token":"\#(token.hex)","alert":"x"}"#,
                    #"{"id":"bad-\#(i)","app":"\#(app)","token":"xyz","alert":"x"}"#,
                ]
                messages.append(
                    KafkaOutgoingMessage(
                        topic: "apn.requests",
                        key: Array("bad-\(i)".utf8),
                        value: Array(samples[(i / 100) % samples.count].utf8)
                    )
                )
                malformed += 1
                continue
            }
            let http2 = (i / 100) % 2 == 1
            // One HTTP/2 job in ten is a Live Activity: a start, then updates.
            let liveActivity =
                i % 100 == 3
                ? #""liveActivity":{"event":"start","attributesType":"DeliveryAttributes","attributes":{"order":"\#(i)"},"contentState":{"stop":0},"alert":{"title":"On its way","body":"Order \#(i)"},"inputPushToken":true}"#
                : #""liveActivity":{"event":"update","contentState":{"stop":\#(i % 7)},"relevanceScore":\#(i % 100)}"#
            let fields = http2 && i % 10 == 3 ? liveActivity : #""alert":"Hello \#(i)","badge":\#(i % 10)"#
            let job =
                #"{"id":"demo-\#(i)","app":"\#(http2 ? Self.http2App : app)","token":"\#(token.hex)",\#(fields)}"#
            let message = KafkaOutgoingMessage(
                topic: "apn.requests",
                key: Array("demo-\(i)".utf8),
                value: Array(job.utf8)
            )
            messages.append(message)
            expectedNotifications += 1
            if i % 20 == 0 {
                messages.append(message)
                duplicates += 1
            }
        }
        // One broadcast: a Live Activity update to three channels of the HTTP/2 app (§7.3).
        let channels = (0..<3).compactMap { _ in
            stack.http2Simulator?.createChannel(bundleID: Self.http2App, storagePolicy: .noMessageStored)
        }
        if !channels.isEmpty {
            let list = channels.map { "\"\($0)\"" }.joined(separator: ",")
            let job =
                #"{"id":"demo-broadcast","app":"\#(Self.http2App)","channels":[\#(list)],"liveActivity":{"event":"update","contentState":{"stop":5}}}"#
            messages.append(
                KafkaOutgoingMessage(topic: "apn.requests", key: Array("demo-broadcast".utf8), value: Array(job.utf8))
            )
            expectedNotifications += channels.count
        }
        do {
            // Scoped so that the handle is freed (on deinit) long before the brokers stop.
            let producer = try KafkaProducer(
                configuration: KafkaConfiguration(["bootstrap.servers": stack.kafka.bootstrapServers])
            )
            for chunk in stride(from: 0, to: messages.count, by: 5000) {
                for report in try await producer.send(Array(messages[chunk..<min(messages.count, chunk + 5000)])) {
                    if case .failure(let error) = report {
                        throw UsageFailure(message: "cannot produce a job: \(error)")
                    }
                }
            }
            await producer.close()
        }
        say(
            "Produced             \(messages.count) messages: \(expectedNotifications) notifications (\(duplicates) jobs twice, one broadcast to \(channels.count) channels), \(malformed) malformed"
        )

        // Read results until every notification, malformed message and feedback entry has one.
        let reader = try KafkaConsumer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": stack.kafka.bootstrapServers, "group.id": "apn-demo-reader-\(getpid())",
                "auto.offset.reset": "earliest", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
            ])
        )
        try reader.subscribe(topics: ["apn.results"])
        var byType: [String: Int] = [:]
        var byStatus: [String: Int] = [:]
        var seen = Set<String>()
        var copies = 0
        let expected = expectedNotifications + malformed + feedbackTokens.count
        var lastReport = ContinuousClock.now
        let deadline = ContinuousClock.now + .seconds(120)
        while seen.count < expected, ContinuousClock.now < deadline {
            for message in try await reader.poll(maxMessages: 5000, timeout: .milliseconds(200)) {
                guard let result = try? JSONValue.parse(message.value), let id = result["resultId"]?.stringValue,
                    let type = result["type"]?.stringValue
                else { continue }
                guard seen.insert(id).inserted else {
                    copies += 1
                    continue
                }
                byType[type, default: 0] += 1
                if let name = result["statusName"]?.stringValue { byStatus[name, default: 0] += 1 }
            }
            if ContinuousClock.now - lastReport > .seconds(1) {
                lastReport = .now
                say("  results so far     \(seen.count) of \(expected)")
            }
        }
        try? await reader.close()
        // The workers' own count, read from their /metrics before they stop.
        let metrics = await Self.scrape(
            statusServers,
            until: { $0.total("apn_worker_results_produced_total") >= Double(seen.count + copies) }
        )
        for process in workerProcesses { await stack.stopWorker(process) }
        let accepted =
            stack.simulator.statistics.accepted + (stack.http2Simulator?.statistics.accepted ?? 0)
            + (stack.http2Simulator?.statistics.broadcasts ?? 0)

        say("")
        say(
            "Summary after \(String(format: "%.1f", Double((ContinuousClock.now - started).components.seconds))) s, results read back from apn.results:"
        )
        for (type, count) in byType.sorted(by: { $0.key < $1.key }) {
            say("  \(type.padding(toLength: 21, withPad: " ", startingAt: 0)) \(count)")
        }
        for (status, count) in byStatus.sorted(by: { $0.key < $1.key }) {
            say("    status \(status.padding(toLength: 19, withPad: " ", startingAt: 0)) \(count)")
        }
        say(
            "  duplicate jobs        \(duplicates) produced twice; the simulator accepted \(accepted) notifications for \(byType["transmitted"] ?? 0) transmitted results"
        )
        if copies > 0 { say("  repeated results      \(copies) (same resultId; consumers drop them)") }
        if let metrics {
            let counted = byType.keys.sorted().map { type in
                "\(type) \(Int(metrics.total("apn_worker_notifications_total", ["type": type])))"
            }
            let agree =
                copies == 0
                && byType.allSatisfy { type, count in
                    metrics.total("apn_worker_notifications_total", ["type": type]) == Double(count)
                }
            say(
                "  the workers' /metrics \(counted.joined(separator: ", ")); "
                    + "\(Int(metrics.total("apn_worker_messages_consumed_total"))) messages consumed, "
                    + "\(Int(metrics.total("apn_worker_possible_duplicates_total"))) possible duplicates"
                    + (agree ? " (the same as the results read back)" : "")
            )
        }
        let complete = seen.count >= expected
        say(
            complete
                ? "Every notification, malformed message and feedback entry has its result."
                : "Missing results: \(expected - min(seen.count, expected)); see the worker logs (rerun with --keep)"
        )
        if !complete { throw ExitCode(1) }
    }

    /// The sum of the workers' `/metrics`, read until `done` holds for it (the counters are raised
    /// just after a batch of results is acknowledged) or five seconds pass; `nil` if none answers.
    private static func scrape(_ addresses: [String], until done: (MetricSamples) -> Bool) async -> MetricSamples? {
        let clients = addresses.compactMap { address -> StatusClient? in
            guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else {
                return nil
            }
            return StatusClient(host: String(address[..<colon]), port: port)
        }
        let deadline = ContinuousClock.now + .seconds(5)
        var last: MetricSamples?
        repeat {
            var texts: [String] = []
            for client in clients {
                if let text = try? await client.get("/metrics").text { texts.append(text) }
            }
            if !texts.isEmpty { last = MetricSamples(parsing: texts.joined(separator: "\n")) }
            if let last, done(last) { return last }
            try? await Task.sleep(for: .milliseconds(200))
        } while ContinuousClock.now < deadline
        return last
    }
}
