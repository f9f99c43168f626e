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
            var options = FleetLoad.options(brokers: brokers, sessionTimeoutMs: sessionTimeoutMs, keep: keep)
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
        let job = { @Sendable [secondApp] (n: Int) in
            FleetLoad.job(n, app: secondApp && n % 2 == 1 ? Self.http2App : LocalStack.app, alert: "Failover")
        }
        let run = try await FleetRun(
            stack,
            readerGroup: "failover-reader",
            workers: (1...workers).map { "w\($0)" },
            rate: rate,
            seconds: seconds,
            job: job
        )
        let running = Dictionary(uniqueKeysWithValues: run.workers.map { ($0.id, $0) })
        let (clock, start, total) = (ContinuousClock(), run.start, run.total)

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
                _ = try await FleetLoad.killAndRestart(victim, after: restartAfter, on: stack)
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
                try await FleetLoad.gatewayOutage(stack, seconds: outageSeconds)
                gatewayBack = clock.now - start
            }
            return (clock.now - start, gatewayBack, exited)
        }

        let held = scenario == "outage" ? outageSeconds : Self.kafkaScenarios.contains(scenario) ? faultSeconds : 0
        let outcome = try await run.finish(
            stack,
            readingUntil: start + .seconds(seconds + drainSeconds + held),
            scenario: scenarioTask
        )
        let (tally, accepted, lostBeforeTheWorkers) = (outcome.tally, outcome.accepted, outcome.lostBeforeTheWorkers)
        let (eventDone, gatewayBack, stoppedExit) = outcome.scenario
        let latencies = tally.latencies()
        let secondAppSlowest = tally.latencies { $0 % 2 == 1 }.last ?? 0
        // Seconds from the event until the result rate is back to 80% of the load for good.
        let recovery = tally.secondsBack(after: eventAt, before: seconds, rate: rate)
        var fields: [(String, JSONValue)] = [
            ("scenario", .string(scenario)),
            ("workers", .int(Int64(workers))),
            ("brokers", .int(Int64(brokers))),
            ("rate", .int(Int64(rate))),
            ("jobs", .int(Int64(total))),
            ("sessionTimeoutMs", .int(Int64(sessionTimeoutMs))),
        ]
        fields += FleetLoad.latencyFields(latencies)
        fields += [
            ("secondAppSlowestMs", secondApp ? .int(Int64(secondAppSlowest)) : .null),
            ("secondsTo80Percent", .int(Int64(recovery))),
        ]
        fields += FleetLoad.lossFields(tally, accepted, lostBeforeTheWorkers: lostBeforeTheWorkers)
        fields.append(("scenarioEndedAtS", .double((eventDone.milliseconds / 100).rounded() / 10)))
        if let stoppedExit {
            fields.append(("stoppedWorkerExitS", .double((stoppedExit.milliseconds / 100).rounded() / 10)))
        }
        if let gatewayBack {
            let back = gatewayBack.milliseconds / 1000
            let afterReturn = tally.lastArrival - back
            fields.append(("gatewayBackAtS", .double((back * 10).rounded() / 10)))
            fields.append(("lastResultAfterReturnS", .double((afterReturn * 10).rounded() / 10)))
        }
        if keep { fields.append(("directory", .string(stack.directory))) }
        print(jsonLine(fields))
        // Jobs the broker lost after acknowledging them (lostBeforeTheWorkers) are its own.
        if tally.received + lostBeforeTheWorkers < total || accepted.unflagged > 0 { throw ExitCode(1) }
    }
}
