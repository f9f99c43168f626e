import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack

/// `apn-bench lanes`: urgent jobs through a worker busy with a bulk backlog (priority lanes).
struct BenchLanes: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lanes",
        abstract: "Measure priority lanes: urgent latency behind a bulk backlog (see docs/benchmarks.md).",
        discussion: """
            Runs twice on a fresh embedded stack, one worker reading the lanes [apn.requests.urgent, \
            apn.requests]. First alone: --bulk jobs produced to apn.requests before the worker starts, \
            timed from the first result to the last. Then again with urgent jobs produced to \
            apn.requests.urgent at --urgent-rate per second from the first bulk result until the bulk \
            backlog has drained. Prints one JSON line: the bulk rate alone and with urgent jobs, its share, \
            and the urgent jobs' latency from produce to the result being readable (p50, p99, max).
            """
    )

    @Option(help: "Bulk jobs backlogged on the low lane.")
    var bulk = 200_000
    @Option(help: "Urgent jobs per second on the high lane.")
    var urgentRate = 100
    @Option(help: "The app's transport: http2 or binary.")
    var transport = "http2"
    @Option(help: "The worker's maxInFlight.")
    var maxInFlight = 20_000
    @Option(help: "Gateway connections.")
    var poolSize = 4
    @Option(help: "The binary app's confirmation window in milliseconds.")
    var windowMs = 200
    @Option(
        name: .customLong("kafka-property"),
        help: "A librdkafka property for the worker's clients, as key=value (repeatable)."
    )
    var kafkaProperties: [String] = []

    static let urgentBase = 10_000_000

    static func percentile(_ values: [Double], _ p: Double) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    func run() async throws {
        try await reportingFailures {
            guard transport == "binary" || transport == "http2" else {
                throw UsageFailure(message: "--transport must be binary or http2, not \(transport)")
            }
            guard bulk > 0, urgentRate > 0 else {
                throw UsageFailure(message: "--bulk and --urgent-rate must be positive")
            }
            let alone = try await phase(urgent: false)
            let mixed = try await phase(urgent: true)
            let latencies = mixed.urgentLatencies.sorted()
            func percentile(_ p: Double) -> Double {
                latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
            }
            func tenth(_ value: Double) -> JSONValue { .double((value * 10).rounded() / 10) }
            print(
                jsonLine([
                    ("bulk", .int(Int64(bulk))), ("transport", .string(transport)),
                    ("maxInFlight", .int(Int64(maxInFlight))),
                    ("bulkAlonePerSecond", .int(Int64(alone.bulkRate))),
                    ("bulkWithUrgentPerSecond", .int(Int64(mixed.bulkRate))),
                    ("bulkShare", tenth(mixed.bulkRate / max(alone.bulkRate, 1) * 100)),
                    ("urgentJobs", .int(Int64(latencies.count))),
                    ("urgentP50Ms", tenth(percentile(0.5))), ("urgentP99Ms", tenth(percentile(0.99))),
                    ("urgentMaxMs", tenth(latencies.last ?? 0)),
                    (
                        "urgentToResultP50P99Ms",
                        .array([0.5, 0.99].map { tenth(Self.percentile(mixed.urgentToResult, $0)) })
                    ),
                    (
                        "urgentToProduceP50P99Ms",
                        .array([0.5, 0.99].map { tenth(Self.percentile(mixed.urgentToProduce, $0)) })
                    ),
                ])
            )
        }
    }

    struct Phase {
        var bulkRate: Double
        var urgentLatencies: [Double]
        /// From produce to the worker making the result (its `at`), by wall clock.
        var urgentToResult: [Double] = []
        /// From produce to the worker handing the result to its producer (the record's timestamp).
        var urgentToProduce: [Double] = []
    }

    private func phase(urgent: Bool) async throws -> Phase {
        var options = LocalStack.Options()
        options.kafkaProperties = ["fetch.wait.max.ms": "5"]
        for property in kafkaProperties {
            let parts = property.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, !parts[0].isEmpty else {
                throw UsageFailure(
                    message: "--kafka-property takes key=value, e.g. queued.min.messages=1000; got \"\(property)\""
                )
            }
            options.kafkaProperties[parts[0]] = parts[1]
        }
        options.requestsTopics = ["apn.requests.urgent", "apn.requests"]
        options.worker = [
            "logLevel": "warning", "maxInFlight": "\(maxInFlight)", "batchSize": "1000", "batchWindowMs": "10",
            "resultFlushMs": "20",
        ]
        options.app = [
            "poolSize": "\(poolSize)", "confirmationWindowMs": "\(windowMs)", "cacheMaxCount": "50000",
            "feedbackIntervalSeconds": "0",
        ]
        if transport == "http2" { options.http2App = LocalStack.HTTP2App(name: BenchWorker.http2App) }
        var outcome = Phase(bulkRate: 0, urgentLatencies: [])
        try await LocalStack.with(options) { stack in outcome = try await measure(stack, urgent: urgent) }
        return outcome
    }

    private func measure(_ stack: LocalStack, urgent: Bool) async throws -> Phase {
        let app = transport == "http2" ? BenchWorker.http2App : LocalStack.app
        let producer = try stack.loadProducer()
        let reader = try stack.resultReader(group: "bench-lanes", fetchWaitMs: 5)
        func job(_ n: Int, topic: String) -> KafkaOutgoingMessage {
            let token = String(format: "%064lx", 0xB000_0000 + n)
            let value = #"{"id":"bench-\#(n)","app":"\#(app)","token":"\#(token)","alert":"Lanes \#(n)"}"#
            return KafkaOutgoingMessage(topic: topic, key: Array("bench-\(n)".utf8), value: Array(value.utf8))
        }
        for chunk in stride(from: 0, to: bulk, by: 10_000) {
            let batch = (chunk..<min(bulk, chunk + 10_000)).map { job($0, topic: "apn.requests") }
            for report in try await producer.send(batch) { _ = try report.get() }
        }
        let worker = try await stack.startWorker(id: "bench-lanes")
        let clock = ContinuousClock()
        let sent = UrgentTimes()
        var producing: Task<Void, any Error>?
        var bulkReceived = Set<Int>()
        var urgentLatencies: [Double] = []
        var urgentToResult: [Double] = []
        var urgentToProduce: [Double] = []
        var first: ContinuousClock.Instant?
        var last = clock.now
        let deadline = clock.now + .seconds(600)
        while bulkReceived.count < bulk, clock.now < deadline {
            for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)) {
                guard let n = benchJobNumber(message.value) else { continue }
                let now = clock.now
                if n >= Self.urgentBase {
                    if let wall = sent.wall(n), let at = resultAt(message.value) {
                        urgentToResult.append(Double(at) - wall)
                        if let produced = message.timestamp { urgentToProduce.append(Double(produced) - wall) }
                    }
                    if let at = sent.remove(n) { urgentLatencies.append((now - at).milliseconds) }
                    continue
                }
                guard bulkReceived.insert(n).inserted else { continue }
                last = now
                if first == nil {
                    first = now
                    if urgent {
                        // Urgent jobs from now on, each one at its due time, while the backlog drains.
                        let rate = urgentRate
                        producing = Task {
                            var due = clock.now
                            var n = Self.urgentBase
                            while !Task.isCancelled {
                                sent.set(n, clock.now)
                                for report in try await producer.send([job(n, topic: "apn.requests.urgent")]) {
                                    _ = try report.get()
                                }
                                n += 1
                                due = due + .microseconds(1_000_000 / rate)
                                try await Task.sleep(until: due, clock: clock)
                            }
                        }
                    }
                }
            }
        }
        producing?.cancel()
        _ = await producing?.result
        // The urgent jobs still on their way when the backlog drained.
        let tail = clock.now + .seconds(5)
        while sent.count > 0, clock.now < tail {
            for message in try await reader.poll(maxMessages: 1000, timeout: .milliseconds(100)) {
                guard let n = benchJobNumber(message.value), n >= Self.urgentBase, let at = sent.remove(n) else {
                    continue
                }
                urgentLatencies.append((clock.now - at).milliseconds)
            }
        }
        _ = await stack.stopWorker(worker)
        try? await reader.close()
        await producer.close()
        guard bulkReceived.count == bulk, sent.count == 0, let first else {
            throw UsageFailure(
                message:
                    "results missing: \(bulkReceived.count) of \(bulk) bulk jobs, \(sent.count) urgent jobs without a result"
            )
        }
        return Phase(
            bulkRate: Double(bulk) / max((last - first).milliseconds / 1000, 0.001),
            urgentLatencies: urgentLatencies,
            urgentToResult: urgentToResult,
            urgentToProduce: urgentToProduce
        )
    }
}

/// When each urgent job was handed to the producer, until its result is read.
final class UrgentTimes: @unchecked Sendable {
    private let lock = NSLock()
    private var times: [Int: ContinuousClock.Instant] = [:]
    private var walls: [Int: Double] = [:]
    func set(_ n: Int, _ time: ContinuousClock.Instant) {
        let wall = Date().timeIntervalSince1970 * 1000
        lock.withLock {
            times[n] = time
            walls[n] = wall
        }
    }
    /// When the job was handed to the producer, in UNIX milliseconds.
    func wall(_ n: Int) -> Double? { lock.withLock { walls[n] } }
    func remove(_ n: Int) -> ContinuousClock.Instant? { lock.withLock { times.removeValue(forKey: n) } }
    var count: Int { lock.withLock { times.count } }
}
