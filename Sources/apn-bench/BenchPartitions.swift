import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack

/// `apn-bench partitions`: workers under a steady load while one of them is cut off from Kafka,
/// Redis or the APNs gateway, alone, and then healed (docs/architecture.md, "The partition
/// harness").
struct BenchPartitions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "partitions",
        abstract: "Measure what a network partition of one worker does (see docs/benchmarks.md).",
        discussion: """
            Starts the embedded Kafka, a redis-server, the binary and HTTP/2 simulators and --workers workers, \
            each in a network namespace of its own (needs root and iproute2); produces jobs (one token each, \
            every other one for the HTTP/2 app) at --rate per second for --seconds seconds and, --cut-at seconds \
            in, cuts worker w2's path for --cut-seconds: kafka-drop, kafka-reject, redis-drop, redis-reject, \
            apns-drop (the binary and HTTP/2 gateways), all-drop (every path), or kafka-flap (its Kafka path \
            dropped and restored every --flap-period seconds for --cut-seconds). Prints one JSON line: lost, \
            unflagged duplicates, results written twice, the seconds after the cut until the other workers' \
            latency was back to normal (p99 of each second's jobs within --normal-ms of the p99 before the cut), \
            and when the cut worker took up work again after the heal (its first result, after the heal, of a job \
            produced after the cut began). The other workers' latency is judged \
            per second of production, from the cut to the heal; the worst second after the heal (the cut worker \
            rejoining is a rebalance of its own) is reported beside it. Exits 1 when a notification is lost or \
            accepted twice without possibleDuplicate, or the cut worker never took up work again.
            """
    )

    static let scenarios = [
        "kafka-drop", "kafka-reject", "redis-drop", "redis-reject", "apns-drop", "all-drop", "kafka-flap",
    ]
    static let http2App = "com.example.partitions.h2"

    @Option(help: "kafka-drop, kafka-reject, redis-drop, redis-reject, apns-drop, all-drop or kafka-flap.")
    var scenario: String
    @Option(help: "Jobs produced per second.")
    var rate = 2000
    @Option(help: "Seconds of load; 0: --cut-at + --cut-seconds + 30.")
    var seconds = 0
    @Option(help: "Seconds into the load when the cut starts.")
    var cutAt = 10
    @Option(help: "Seconds the cut lasts (kafka-flap: seconds of flapping).")
    var cutSeconds = 30
    @Option(help: "Seconds each cut and each restoration lasts in kafka-flap.")
    var flapPeriod = 5
    @Option(help: "Workers in the group (the cut one is w2).")
    var workers = 3
    @Option(help: "The workers' session.timeout.ms; 0 keeps the worker's default.")
    var sessionTimeoutMs = 0
    @Option(help: "Milliseconds above the p99 before the cut that still count as normal latency.")
    var normalMs = 500
    @Option(help: "Seconds to wait for the last results after the load ends.")
    var drainSeconds = 120
    @Flag(help: "Keep the working directory with the workers' logs.")
    var keep = false

    func run() async throws {
        try await reportingFailures {
            guard Self.scenarios.contains(scenario) else {
                throw UsageFailure(
                    message: "--scenario must be one of \(Self.scenarios.joined(separator: ", ")), not \(scenario)"
                )
            }
            guard rate > 0, workers >= 2, cutAt >= 1, cutSeconds >= 1, seconds == 0 || seconds > cutAt + cutSeconds,
                flapPeriod >= 1
            else {
                throw UsageFailure(
                    message:
                        "--rate must be positive, --workers at least 2, and the cut (--cut-at + --cut-seconds) within --seconds"
                )
            }
            guard getuid() == 0 else {
                throw UsageFailure(message: "apn-bench partitions needs root: it makes network namespaces (ip netns)")
            }
            var options = FleetLoad.options(brokers: 1, sessionTimeoutMs: sessionTimeoutMs, keep: keep)
            options.http2App = LocalStack.HTTP2App(name: Self.http2App)
            options.partitionable = true
            try await LocalStack.with(options, measure)
        }
    }

    /// The paths the scenario cuts, and how.
    var cut: (paths: Set<WorkerPath>, how: PathCut) {
        switch scenario {
        case "kafka-reject": ([.kafka], .reject)
        case "redis-drop": ([.redis], .drop)
        case "redis-reject": ([.redis], .reject)
        case "apns-drop": ([.apns], .drop)
        case "all-drop": (Set(WorkerPath.allCases), .drop)
        default: ([.kafka], .drop)
        }
    }

    /// Seconds of load.
    var loadSeconds: Int { seconds > 0 ? seconds : cutAt + cutSeconds + 30 }

    private func measure(_ stack: LocalStack) async throws {
        let seconds = loadSeconds
        let job = { @Sendable (n: Int) in
            FleetLoad.job(n, app: n % 2 == 1 ? Self.http2App : LocalStack.app, alert: "Partition")
        }
        let run = try await FleetRun(
            stack,
            readerGroup: "partitions-reader",
            workers: (1...workers).map { "w\($0)" },
            rate: rate,
            seconds: seconds,
            job: job
        )
        let victim = run.workers[1]
        let (clock, start, total) = (ContinuousClock(), run.start, run.total)
        let cutTask = Task { [cut, scenario, cutAt, cutSeconds, flapPeriod] () -> Duration in
            try await Task.sleep(until: start + .seconds(cutAt), clock: clock)
            if scenario == "kafka-flap" {
                let end = clock.now + .seconds(cutSeconds)
                while clock.now < end {
                    try await stack.cut(victim, from: [.kafka], .drop)
                    try await Task.sleep(for: .seconds(flapPeriod))
                    try await stack.heal(victim, [.kafka])
                    try await Task.sleep(for: .seconds(flapPeriod))
                }
            } else {
                try await stack.cut(victim, from: cut.paths, cut.how)
                try await Task.sleep(for: .seconds(cutSeconds))
                try await stack.heal(victim, cut.paths)
            }
            return clock.now - start
        }

        let outcome = try await run.finish(
            stack,
            readingUntil: start + .seconds(seconds + drainSeconds),
            scenario: cutTask
        )
        let (tally, accepted, lostBeforeTheWorkers) = (outcome.tally, outcome.accepted, outcome.lostBeforeTheWorkers)
        let healedAt = outcome.scenario
        let healed = healedAt.milliseconds / 1000
        let others = othersLatency(tally, victim: victim.id, healedAt: Int(healed))
        let resumed = resumedAfter(tally, victim: victim.id, healedAt: healed)
        var fields: [(String, JSONValue)] = [
            ("scenario", .string(scenario)),
            ("workers", .int(Int64(workers))),
            ("rate", .int(Int64(rate))),
            ("jobs", .int(Int64(total))),
            ("cutAtS", .int(Int64(cutAt))),
            ("healedAtS", .double((healed * 10).rounded() / 10)),
        ]
        fields += FleetLoad.latencyFields(tally.latencies())
        fields += [
            ("othersP99BeforeMs", .int(Int64(others.before))),
            ("othersWorstSecondP99DuringCutMs", .int(Int64(others.worst))),
            ("othersWorstSecondP99AfterHealMs", .int(Int64(others.worstAfterHeal))),
            ("othersSecondsToNormal", .int(Int64(others.secondsBack))),
            ("cutWorkerResumedAfterHealS", resumed.map { .double(($0 * 10).rounded() / 10) } ?? .null),
        ]
        fields += FleetLoad.lossFields(tally, accepted, lostBeforeTheWorkers: lostBeforeTheWorkers)
        if keep { fields.append(("directory", .string(stack.directory))) }
        for story in accepted.unflaggedStories {
            FileHandle.standardError.write(Data("unflagged duplicate: \(story)\n".utf8))
        }
        print(jsonLine(fields))
        if tally.received + lostBeforeTheWorkers < total || accepted.unflagged > 0 || resumed == nil {
            throw ExitCode(1)
        }
    }

    /// The other workers' latency: the p99 of the jobs they answered that were produced from 4 s
    /// to 1 s before the cut (the last second's jobs may still be waiting when the cut comes); the worst p99 of a second's jobs from the cut to the heal, and after
    /// the heal (when the cut worker rejoins); and the seconds from the cut until the p99 of each
    /// second's jobs stays within ``normalMs`` of the p99 before, up to the heal (0: it never
    /// left it; the cut's length: it did not come back before the heal).
    private func othersLatency(
        _ tally: ResultTally,
        victim: String,
        healedAt: Int
    ) -> (before: Double, worst: Double, worstAfterHeal: Double, secondsBack: Int) {
        var perSecond: [Int: [Double]] = [:]
        for n in 0..<tally.total {
            guard let writer = tally.writer(of: n), writer != victim, let latency = tally.latency(of: n) else {
                continue
            }
            perSecond[n / rate, default: []].append(latency)
        }
        let p99 = { (second: Int) in ResultTally.percentile((perSecond[second] ?? []).sorted(), 0.99) }
        let before = ResultTally.percentile(
            (max(0, cutAt - 4)..<max(1, cutAt - 1)).flatMap { perSecond[$0] ?? [] }.sorted(),
            0.99
        )
        let during = (cutAt..<max(cutAt, healedAt)).map { ($0, p99($0)) }
        let after = (max(cutAt, healedAt)..<loadSeconds).map(p99)
        let lastSlow = during.last { $0.1 > before + Double(normalMs) }?.0
        return (before, during.map(\.1).max() ?? 0, after.max() ?? 0, lastSlow.map { $0 + 1 - cutAt } ?? 0)
    }

    /// Seconds from the heal until the cut worker wrote a first result, after the heal, for a
    /// job produced after the cut began: it took up work again (cut from Kafka, it can only have
    /// fetched such a job after rejoining).
    private func resumedAfter(_ tally: ResultTally, victim: String, healedAt: Double) -> Double? {
        let firstJob = min(cutAt * rate, tally.total)
        let arrivals = (firstJob..<tally.total).compactMap { n -> Double? in
            guard tally.writer(of: n) == victim, let arrival = tally.arrival(of: n), arrival >= healedAt else {
                return nil
            }
            return arrival
        }
        return arrivals.min().map { $0 - healedAt }
    }
}
