import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack

/// `apn-bench failover`: several workers under a steady load while one of them is killed,
/// stopped or restarted, while the gateway is away, or under a fault of the embedded Kafka;
/// measures how fast the fleet heals.
struct BenchFailover: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "failover",
        abstract: "Measure how the workers heal from a failure (see docs/benchmarks.md).",
        discussion: """
            Starts the embedded Kafka (--brokers brokers, 12 partitions), a redis-server, the simulator and \
            --workers workers; produces jobs (one token each) at --rate per second for --seconds seconds and, \
            --event-at seconds in, applies --scenario: kill (SIGKILL one worker, start it again --restart-after \
            seconds later), \
            term (SIGTERM one worker and start a replacement at once), term-early (start one more worker and \
            SIGTERM it a second later, before its first assignment), rolling (SIGTERM and restart every \
            worker, one after another, each once its predecessor's replacement has partitions), outage (the gateway \
            unreachable for --outage-seconds), or a Kafka fault of --fault-seconds: broker-down (broker 1, \
            leading half the partitions of both topics, down), leader-moves (every partition's leader moved, \
            and again --fault-seconds later), request-errors (bursts of retriable errors on Produce, Fetch, \
            OffsetCommit and Heartbeat) or coordinator-down (the group coordinator's broker down). Prints one \
            JSON line: the slowest notification's latency from produce to result, the seconds until the result \
            rate is back to 80% of the load, results written more than once, 515 results, lost and unflagged \
            duplicate notifications.
            """
    )

    @Option(
        help:
            "kill, term, term-early, rolling, outage, broker-down, leader-moves, request-errors or coordinator-down."
    )
    var scenario: String
    @Option(help: "Jobs produced per second.")
    var rate = 2000
    @Option(help: "Seconds of load.")
    var seconds = 40
    @Option(help: "Seconds into the load when the scenario starts.")
    var eventAt = 10
    @Option(help: "Seconds after the kill that the killed worker starts again (kill scenario).")
    var restartAfter = 2
    @Option(help: "Seconds the gateway stays away in the outage scenario.")
    var outageSeconds = 90
    @Option(help: "Seconds a Kafka fault lasts (a broker down, between two leadership moves, of error bursts).")
    var faultSeconds = 15
    @Option(help: "Workers in the group.")
    var workers = 3
    @Option(help: "Brokers of the embedded Kafka.")
    var brokers = 3
    @Option(help: "The workers' session.timeout.ms; 0 keeps the worker's default.")
    var sessionTimeoutMs = 0
    @Option(help: "Seconds to wait for the last results after the load ends.")
    var drainSeconds = 120
    @Flag(
        help:
            "Send every other job to a second app delivered over HTTP/2 (its gateway stays up in the outage scenario)."
    )
    var secondApp = false
    @Flag(help: "Keep the working directory with the workers' logs.")
    var keep = false

    func run() async throws {
        try await reportingFailures {
            let scenarios = ["kill", "term", "term-early", "rolling", "outage"] + Self.kafkaScenarios
            guard scenarios.contains(scenario) else {
                throw UsageFailure(
                    message: "--scenario must be one of \(scenarios.joined(separator: ", ")), not \(scenario)"
                )
            }
            guard !Self.kafkaScenarios.contains(scenario) || brokers >= 2, faultSeconds > 0 else {
                throw UsageFailure(message: "a Kafka fault needs --brokers 2 or more and a positive --fault-seconds")
            }
            guard rate > 0, seconds > eventAt, eventAt >= 0, workers >= 1 else {
                throw UsageFailure(
                    message: "--rate must be positive, --workers at least 1 and --event-at within --seconds"
                )
            }
            var options = LocalStack.Options()
            options.brokers = brokers
            options.replicationFactor = min(3, brokers)
            options.sessionTimeoutMs = sessionTimeoutMs > 0 ? sessionTimeoutMs : nil
            options.kafkaProperties = ["fetch.wait.max.ms": "5"]
            options.worker = ["logLevel": "info", "shutdownTimeoutSeconds": "20"]
            options.app = ["feedbackIntervalSeconds": "0"]
            options.keepDirectory = keep
            if secondApp { options.http2App = LocalStack.HTTP2App(name: Self.http2App) }
            try await LocalStack.with(options, measure)
        }
    }

    static let http2App = "com.example.failover.h2"

    private func measure(_ stack: LocalStack) async throws {
        if Self.kafkaScenarios.contains(scenario) {
            try Self.placeKafkaRoles(
                scenario,
                stack,
                brokers: brokers,
                readerGroup: stack.readerGroup("failover-reader")
            )
        }
        let producer = try stack.loadProducer()
        let reader = try stack.resultReader(group: "failover-reader")
        func token(_ n: Int) -> String { String(format: "%064lx", 0xF000_0000 + n) }
        func job(_ n: Int) -> KafkaOutgoingMessage {
            let id = "bench-\(n)"
            let app = secondApp && n % 2 == 1 ? Self.http2App : LocalStack.app
            let value = #"{"id":"\#(id)","app":"\#(app)","token":"\#(token(n))","alert":"Failover \#(n)"}"#
            return KafkaOutgoingMessage(topic: "apn.requests", key: Array(id.utf8), value: Array(value.utf8))
        }

        var started: [String: LocalWorker] = [:]
        for i in 1...workers { started["w\(i)"] = try await stack.startWorker(id: "w\(i)") }
        let running = started

        // Warm up: the workers joined and one notification delivered.
        let warmup = #"{"id":"warmup","app":"\#(LocalStack.app)","token":"\#(token(999_999_999))"}"#
        _ = try await producer.send([KafkaOutgoingMessage(topic: "apn.requests", key: nil, value: Array(warmup.utf8))])
        var warmed = false
        let warmupDeadline = ContinuousClock.now + .seconds(90)
        while !warmed, ContinuousClock.now < warmupDeadline {
            for message in try await reader.poll(maxMessages: 100, timeout: .milliseconds(200)) {
                if (try? JSONValue.parse(message.value))?["jobId"]?.stringValue == "warmup" { warmed = true }
            }
        }
        guard warmed else { throw UsageFailure(message: "the workers did not deliver the warm-up job within 90 s") }

        let total = rate * seconds
        let clock = ContinuousClock()
        let sentAt = SentTimes(count: total)
        let start = clock.now
        let producing = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var next = 0
                var due = start
                let perTick = max(1, rate / 100)
                while next < total {
                    let count = min(perTick, total - next)
                    let batch = (next..<next + count).map(job)
                    let now = clock.now
                    for i in next..<next + count { sentAt.set(i, now) }
                    group.addTask { for report in try await producer.send(batch) { _ = try report.get() } }
                    next += count
                    due = due + .milliseconds(10)
                    try await Task.sleep(until: due, clock: clock)
                }
                try await group.waitForAll()
            }
        }

        // The scenario, in its own task: it waits on processes.
        let eventStart = start + .seconds(eventAt)
        let scenarioTask = Task {
            [scenario, outageSeconds, restartAfter, brokers, faultSeconds] () -> (Duration, Duration?, Duration?) in
            try await Task.sleep(until: eventStart, clock: clock)
            var gatewayBack: Duration? = nil
            var exited: Duration? = nil
            switch scenario {
            case "kill":
                let victim = running["w2"] ?? running.values.first!
                await stack.killWorker(victim)
                try await Task.sleep(for: .seconds(restartAfter))
                _ = try await stack.startWorker(id: "w2")
            case "term":
                let victim = running["w2"] ?? running.values.first!
                victim.signal(SIGTERM)
                _ = try await stack.startWorker(id: "w\(workers + 1)")
            case "term-early":
                let late = try await stack.startWorker(id: "w\(workers + 1)")
                try await Task.sleep(for: .seconds(1))
                let stopped = clock.now
                late.signal(SIGTERM)
                await late.waitForExit()
                exited = clock.now - stopped
            case "rolling":
                for i in 1...workers {
                    guard let victim = running["w\(i)"] else { continue }
                    victim.signal(SIGTERM)
                    await victim.waitForExit()
                    let replacement = try await stack.startWorker(id: "w\(i)")
                    // The next one once this one consumes (what a readiness probe waits for).
                    let ready = clock.now + .seconds(60)
                    while i < workers, !stack.hasBeenAssigned(replacement), clock.now < ready {
                        try await Task.sleep(for: .milliseconds(200))
                    }
                }
            case _ where Self.kafkaScenarios.contains(scenario):
                try await Self.injectKafkaFault(scenario, stack, brokers: brokers, faultSeconds: faultSeconds)
            default:
                await stack.stopGateway()
                try await Task.sleep(for: .seconds(outageSeconds))
                try await stack.restartGateway()
                gatewayBack = clock.now - start
            }
            return (clock.now - start, gatewayBack, exited)
        }

        struct Seen {
            var latency: Double
            var possibleDuplicate: Bool
            var arrived: Double
            var worker: String
        }
        var seen: [Int: Seen] = [:]
        seen.reserveCapacity(total)
        var writtenTwice = 0
        var writtenTwiceBy: [String: Int] = [:]
        var connectionFailed = 0
        var failedOther: [String: Int] = [:]
        var arrivalsPerSecond: [Int: Int] = [:]
        let loadEnd = start + .seconds(seconds)
        let held = scenario == "outage" ? outageSeconds : Self.kafkaScenarios.contains(scenario) ? faultSeconds : 0
        let deadline = loadEnd + .seconds(drainSeconds + held)
        while seen.count < total, clock.now < deadline {
            for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)) {
                guard let n = benchJobNumber(message.value), n >= 0, n < total,
                    let result = try? JSONValue.parse(message.value)
                else { continue }
                let now = clock.now
                let arrived = (now - start).milliseconds / 1000
                let worker = result["worker"]?.stringValue ?? "?"
                if let first = seen[n] {
                    writtenTwice += 1
                    writtenTwiceBy["\(first.worker) then \(worker)", default: 0] += 1
                    continue
                }
                arrivalsPerSecond[Int(arrived), default: 0] += 1
                if let status = result["status"]?.intValue {
                    if status == 515 {
                        connectionFailed += 1
                    } else {
                        failedOther[result["statusName"]?.stringValue ?? "\(status)", default: 0] += 1
                    }
                }
                let latency = sentAt.get(n).map { (now - $0).milliseconds } ?? 0
                seen[n] = Seen(
                    latency: latency,
                    possibleDuplicate: result["possibleDuplicate"]?.boolValue ?? false,
                    arrived: arrived,
                    worker: worker
                )
            }
        }
        try await producing.value
        let (eventDone, gatewayBack, stoppedExit) = try await scenarioTask.value
        // A last look for results written twice after everything arrived.
        let settle = clock.now + .seconds(3)
        while clock.now < settle {
            for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(200)) {
                if let n = benchJobNumber(message.value), n >= 0, n < total, seen[n] != nil { writtenTwice += 1 }
            }
        }
        for (_, worker) in running where worker.isRunning { worker.signal(SIGTERM) }
        try? await reader.close()
        await producer.close()

        var accepted = stack.acceptedByToken
        for (token, count) in stack.http2Simulator?.acceptedByToken ?? [:] { accepted[token, default: 0] += count }
        var unflagged = 0
        var acceptedTwice = 0
        // Lost notifications the gateway accepted: their results, not their jobs, went missing.
        var lostButDelivered = 0
        for n in 0..<total {
            guard let t = try? DeviceToken(hex: token(n)), let count = accepted[t] else { continue }
            if seen[n] == nil { lostButDelivered += 1 }
            guard count > 1 else { continue }
            acceptedTwice += 1
            if seen[n]?.possibleDuplicate != true { unflagged += 1 }
        }
        let lostNumbers = (0..<total).filter { seen[$0] == nil }
        let lostBeforeTheWorkers = try await Self.jobsMissingFromKafka(lostNumbers, stack: stack)
        let latencies = seen.values.map(\.latency).sorted()
        let secondAppSlowest = seen.filter { $0.key % 2 == 1 }.map(\.value.latency).max() ?? 0
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
        }
        // Seconds from the event until the result rate is back to 80% of the load for good: the
        // last second after the event (during the load) with fewer results than that, plus one.
        let event = eventAt
        let lastSlow = (event..<seconds).last { (arrivalsPerSecond[$0] ?? 0) < rate * 8 / 10 }
        let recovery = lastSlow.map { $0 + 1 - event } ?? 0
        var fields: [(String, JSONValue)] = [
            ("scenario", .string(scenario)),
            ("workers", .int(Int64(workers))),
            ("brokers", .int(Int64(brokers))),
            ("rate", .int(Int64(rate))),
            ("jobs", .int(Int64(total))),
            ("sessionTimeoutMs", .int(Int64(sessionTimeoutMs))),
            ("received", .int(Int64(seen.count))),
            ("lost", .int(Int64(total - seen.count))),
            ("lostButDelivered", .int(Int64(lostButDelivered))),
            ("lostBeforeTheWorkers", .int(Int64(lostBeforeTheWorkers))),
            ("slowestMs", .int(Int64(latencies.last ?? 0))),
            ("secondAppSlowestMs", secondApp ? .int(Int64(secondAppSlowest)) : .null),
            ("p99Ms", .int(Int64(percentile(0.99)))),
            ("p50Ms", .int(Int64(percentile(0.50)))),
            ("secondsTo80Percent", .int(Int64(recovery))),
            ("writtenTwice", .int(Int64(writtenTwice))),
            ("writtenTwicePercent", .double((Double(writtenTwice) / Double(max(1, total)) * 10_000).rounded() / 100)),
            ("writtenTwiceBy", .object(writtenTwiceBy.mapValues { .int(Int64($0)) })),
            ("connectionFailed515", .int(Int64(connectionFailed))),
            ("otherFailures", .object(failedOther.mapValues { .int(Int64($0)) })),
            ("possibleDuplicate", .int(Int64(seen.values.filter(\.possibleDuplicate).count))),
            ("acceptedTwice", .int(Int64(acceptedTwice))),
            ("unflaggedDuplicates", .int(Int64(unflagged))),
            ("scenarioEndedAtS", .double((eventDone.milliseconds / 100).rounded() / 10)),
        ]
        if let stoppedExit {
            fields.append(("stoppedWorkerExitS", .double((stoppedExit.milliseconds / 100).rounded() / 10)))
        }
        if let gatewayBack {
            let back = gatewayBack.milliseconds / 1000
            let afterReturn = seen.values.map { $0.arrived - back }.max() ?? 0
            fields.append(("gatewayBackAtS", .double((back * 10).rounded() / 10)))
            fields.append(("lastResultAfterReturnS", .double((afterReturn * 10).rounded() / 10)))
        }
        if keep { fields.append(("directory", .string(stack.directory))) }
        print(jsonLine(fields))
        // Jobs the broker lost after acknowledging them (lostBeforeTheWorkers) are its own.
        if seen.count + lostBeforeTheWorkers < total || unflagged > 0 { throw ExitCode(1) }
    }
}
