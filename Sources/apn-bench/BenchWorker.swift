import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack

/// `apn-bench worker`: jobs through one worker on the embedded stack, measured.
struct BenchWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Measure one worker on the embedded stack (see docs/benchmarks.md).",
        discussion: """
            Starts the embedded Kafka, a redis-server, the simulator and one `apn-worker run`; produces \
            --jobs jobs (one token each) at --rate per second (0: as fast as possible) and reads the results \
            back. Prints one JSON line: notifications/s, latency from produce to the result being readable \
            in apn.results (p50, p99), Redis round trips per 1,000 notifications, the worker's peak RSS, and \
            the CPU of the worker, Redis and this process (Kafka, simulator, load) in seconds and in µs per \
            notification.
            """
    )

    @Option(help: "Number of jobs.")
    var jobs = 200_000
    @Option(help: "Jobs produced per second; 0 produces as fast as possible.")
    var rate = 0
    @Option(help: "The app's confirmation window in milliseconds.")
    var windowMs = 1000
    @Option(help: "Gateway connections.")
    var poolSize = 4
    @Option(help: "The worker's maxInFlight.")
    var maxInFlight = 100_000
    @Option(help: "The worker's resultFlushMs.")
    var resultFlushMs = 20
    @Option(help: "The worker's batchWindowMs.")
    var batchWindowMs = 10
    @Option(help: "fetch.wait.max.ms of the worker's consumer and the result reader.")
    var fetchWaitMs = 5
    @Option(help: "The worker's batchSize.")
    var batchSize = 1000
    @Option(
        help:
            "The app's transport: binary, or http2 (provider token; results are final on the server's answer, no confirmation window)."
    )
    var transport = "binary"
    @Flag(
        help:
            "Produce every job before the worker starts and time from its first result to its last (throughput without the load generator competing for CPU; latencies then include queueing)."
    )
    var preproduce = false
    @Option(help: "The worker's status server and metrics: on (as deployed) or off.")
    var status = "on"
    @Option(
        name: .customLong("kafka-property"),
        help:
            "A librdkafka property for the worker's clients, as key=value (repeatable), e.g. queued.max.messages.kbytes=16384."
    )
    var kafkaProperties: [String] = []

    func run() async throws {
        try await reportingFailures {
            var options = LocalStack.Options()
            // librdkafka's mock broker answers a fetch only when fetch.wait.max.ms runs out (a real
            // broker answers as soon as data arrives), so a short wait keeps latency honest.
            options.kafkaProperties = ["fetch.wait.max.ms": "\(fetchWaitMs)"]
            for property in kafkaProperties {
                guard let equals = property.firstIndex(of: "="), equals != property.startIndex else {
                    throw UsageFailure(
                        message: "--kafka-property takes key=value, e.g. queued.min.messages=10000; got \"\(property)\""
                    )
                }
                options.kafkaProperties[String(property[..<equals])] = String(
                    property[property.index(after: equals)...]
                )
            }
            options.worker = [
                "logLevel": "warning", "maxInFlight": "\(maxInFlight)", "batchSize": "\(batchSize)",
                "batchWindowMs": "\(batchWindowMs)", "resultFlushMs": "\(resultFlushMs)",
            ]
            options.app = [
                "poolSize": "\(poolSize)", "confirmationWindowMs": "\(windowMs)",
                "cacheMaxCount": "\(max(50_000, maxInFlight))", "feedbackIntervalSeconds": "0",
            ]
            guard status == "on" || status == "off" else {
                throw UsageFailure(message: "--status must be on or off, not \(status)")
            }
            if status == "off" { options.worker["statusAddress"] = "null" }
            guard transport == "binary" || transport == "http2" else {
                throw UsageFailure(message: "--transport must be binary or http2, not \(transport)")
            }
            if transport == "http2" { options.http2App = LocalStack.HTTP2App(name: Self.http2App) }
            try await LocalStack.with(options, measure)
        }
    }

    static let http2App = "com.example.bench.h2"

    private func measure(_ stack: LocalStack) async throws {
        let app = transport == "http2" ? Self.http2App : LocalStack.app
        let producer = try stack.loadProducer()
        let reader = try stack.resultReader(group: "bench-reader", fetchWaitMs: fetchWaitMs)

        func job(_ id: String, _ n: Int) -> KafkaOutgoingMessage {
            let token = String(format: "%064lx", 0xB000_0000 + n)
            let value =
                #"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Benchmark notification \#(n)","badge":1}"#
            return KafkaOutgoingMessage(topic: "apn.requests", key: Array(id.utf8), value: Array(value.utf8))
        }

        let total = jobs
        let clock = ContinuousClock()
        let sentAt = SentTimes(count: total)
        if preproduce {
            for chunk in stride(from: 0, to: total, by: 10_000) {
                let batch = (chunk..<min(total, chunk + 10_000)).map { job("bench-\($0)", $0) }
                let now = clock.now
                for i in chunk..<min(total, chunk + 10_000) { sentAt.set(i, now) }
                for report in try await producer.send(batch) { _ = try report.get() }
            }
        }
        let worker = try await stack.startWorker(id: "bench")

        // Warm up: wait until the worker has joined the group and delivered one notification.
        let warmupId = "warmup-\(getpid())"
        _ = try await producer.send([job(warmupId, -1)])
        var warmed = preproduce
        let warmupDeadline = ContinuousClock.now + .seconds(60)
        while !warmed, ContinuousClock.now < warmupDeadline {
            for message in try await reader.poll(maxMessages: 100, timeout: .milliseconds(200)) {
                if (try? JSONValue.parse(message.value))?["jobId"]?.stringValue == warmupId { warmed = true }
            }
        }
        guard warmed else { throw UsageFailure(message: "the worker did not deliver the warm-up job within 60 s") }

        // Produce from a separate task, recording when each job was handed to Kafka.
        var start = clock.now
        let perTick = rate > 0 ? max(1, rate / 100) : 5000
        let tick: Duration = rate > 0 ? .milliseconds(10) : .zero
        let produceStart = start
        let producing = Task { [preproduce] in
            // Each tick's batch is sent without waiting for the previous one's acknowledgements,
            // so the load keeps its rate whatever the produce latency.
            try await withThrowingTaskGroup(of: Void.self) { group in
                var next = preproduce ? total : 0
                var due = produceStart
                var pending = 0
                while next < total {
                    let count = min(perTick, total - next)
                    let batch = (next..<next + count).map { job("bench-\($0)", $0) }
                    let now = clock.now
                    for i in next..<next + count { sentAt.set(i, now) }
                    group.addTask {
                        for report in try await producer.send(batch) { _ = try report.get() }
                    }
                    pending += 1
                    if pending >= 64 {
                        try await group.next()
                        pending -= 1
                    }
                    next += count
                    if tick > .zero {
                        due = due + tick
                        try await Task.sleep(until: due, clock: clock)
                    }
                }
                try await group.waitForAll()
            }
        }

        var stages: [[Double]] = [[], [], []]
        var latencies: [Double] = []
        latencies.reserveCapacity(total)
        var received = Set<Int>()
        var last = start
        let deadline = clock.now + .seconds(600)
        while received.count < total, clock.now < deadline {
            for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)) {
                guard let n = benchJobNumber(message.value), received.insert(n).inserted else { continue }
                let now = clock.now
                if preproduce && received.count == 1 { start = now }
                last = now
                if let sent = sentAt.get(n) { latencies.append((now - sent).milliseconds) }
                // Where the time went, by wall clock: until the worker made the result (`at`),
                // until it handed the result to its producer (the record's timestamp), until read.
                if let sentWall = sentAt.wallMilliseconds(n), let at = resultAt(message.value),
                    let produced = message.timestamp
                {
                    let readWall = Date().timeIntervalSince1970 * 1000
                    stages[0].append(Double(at) - sentWall)
                    stages[1].append(Double(produced - at))
                    stages[2].append(readWall - Double(produced))
                }
            }
        }
        try await producing.value
        let rss = peakRSS(of: worker.processIdentifier) ?? 0
        let workerCPU = cpuSeconds(of: worker.processIdentifier) ?? 0
        let redisCPU = stack.redisPID.flatMap { cpuSeconds(of: $0) } ?? 0
        let ownCPU = cpuSeconds(of: getpid()) ?? 0
        let stopped = await stack.stopWorker(worker).report.flatMap { try? JSONValue.parse($0) }
        try? await reader.close()
        await producer.close()

        latencies.sort()
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
        }
        let seconds = (last - start).milliseconds / 1000
        // CPU per notification received, to a tenth of a microsecond (0 when none arrived).
        func micros(_ cpuSeconds: Double) -> JSONValue {
            .double(received.isEmpty ? 0 : (cpuSeconds * 1e6 / Double(received.count) * 10).rounded() / 10)
        }
        let notifications = Double(stopped?["notifications"]?.intValue ?? 0)
        let roundTrips = Double(stopped?["redisRoundTrips"]?.intValue ?? 0)
        print(
            jsonLine([
                ("jobs", .int(Int64(total))),
                ("received", .int(Int64(received.count))),
                ("rate", .int(Int64(rate))),
                ("windowMs", .int(Int64(windowMs))),
                ("batchWindowMs", .int(Int64(batchWindowMs))),
                ("resultFlushMs", .int(Int64(resultFlushMs))),
                ("fetchWaitMs", .int(Int64(fetchWaitMs))),
                ("notificationsPerSecond", .int(Int64(Double(received.count) / max(seconds, 0.001)))),
                ("p50Ms", .double((percentile(0.50) * 10).rounded() / 10)),
                ("p90Ms", .double((percentile(0.90) * 10).rounded() / 10)),
                ("p99Ms", .double((percentile(0.99) * 10).rounded() / 10)),
                (
                    "stagesP50Ms",
                    .object(
                        Dictionary(
                            uniqueKeysWithValues: zip(
                                ["toResult", "toProduce", "toRead"],
                                stages.map { s in
                                    let sorted = s.sorted()
                                    return JSONValue.double(
                                        sorted.isEmpty ? 0 : (sorted[sorted.count / 2] * 10).rounded() / 10
                                    )
                                }
                            )
                        )
                    )
                ),
                (
                    "redisRoundTripsPer1000",
                    .double(notifications > 0 ? (roundTrips / notifications * 1000 * 10).rounded() / 10 : 0)
                ),
                ("workerPeakRSSMB", .int(Int64(rss >> 20))),
                (
                    "cpuSeconds",
                    .object([
                        "worker": .double((workerCPU * 10).rounded() / 10),
                        "redis": .double((redisCPU * 10).rounded() / 10),
                        "kafkaSimulatorAndLoad": .double((ownCPU * 10).rounded() / 10),
                    ])
                ),
                (
                    "cpuMicrosPerNotification",
                    .object([
                        "worker": micros(workerCPU), "redis": micros(redisCPU), "kafkaSimulatorAndLoad": micros(ownCPU),
                    ])
                ),
                (
                    "simulatorAccepted",
                    .int(Int64(stack.simulator.statistics.accepted + (stack.http2Simulator?.statistics.accepted ?? 0)))
                ),
                ("transport", .string(transport)), ("status", .string(status)),
            ])
        )
        if received.count < total { throw ExitCode(1) }
    }
}

/// Produce times by job number, written by the producing task and read by the reader.
final class SentTimes: @unchecked Sendable {
    private let lock = NSLock()
    private var times: [ContinuousClock.Instant?]
    private var wallTimes: [Double]
    init(count: Int) {
        times = Array(repeating: nil, count: count)
        wallTimes = Array(repeating: 0, count: count)
    }
    func set(_ index: Int, _ time: ContinuousClock.Instant) {
        let wall = Date().timeIntervalSince1970 * 1000
        lock.withLock {
            times[index] = time
            wallTimes[index] = wall
        }
    }
    func get(_ index: Int) -> ContinuousClock.Instant? {
        lock.withLock { index >= 0 && index < times.count ? times[index] : nil }
    }
    /// When the job was handed to the producer, in UNIX milliseconds.
    func wallMilliseconds(_ index: Int) -> Double? {
        lock.withLock { index >= 0 && index < times.count ? wallTimes[index] : nil }
    }
}

extension Duration {
    var milliseconds: Double {
        Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15
    }
}

/// The number in `"jobId":"bench-N"` of a result, found without parsing the whole result (the
/// reader must not become the bottleneck it measures).
func benchJobNumber(_ value: [UInt8]) -> Int? {
    let marker = Array(#""jobId":"bench-"#.utf8)
    guard value.count > marker.count else { return nil }
    var i = 0
    while i + marker.count <= value.count {
        if value[i] == marker[0] && value[i..<i + marker.count].elementsEqual(marker) {
            var n = 0
            var j = i + marker.count
            var digits = 0
            while j < value.count, value[j] >= 48, value[j] <= 57 {
                n = n * 10 + Int(value[j] - 48)
                j += 1
                digits += 1
            }
            return digits > 0 ? n : nil
        }
        i += 1
    }
    return nil
}

/// The `"at":N` of a result.
func resultAt(_ value: [UInt8]) -> Int64? {
    let marker = Array(#""at":"#.utf8)
    var i = 0
    while i + marker.count <= value.count {
        if value[i] == marker[0] && value[i..<i + marker.count].elementsEqual(marker) {
            var n: Int64 = 0
            var j = i + marker.count
            while j < value.count, value[j] >= 48, value[j] <= 57 {
                n = n * 10 + Int64(value[j] - 48)
                j += 1
            }
            return j > i + marker.count ? n : nil
        }
        i += 1
    }
    return nil
}
