import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack

/// `apn-bench soak`: a long steady load on a fleet of workers with a fault every minute, in
/// turn; measures how each fault heals and whether anything is lost, duplicated or leaks.
struct BenchSoak: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak",
        abstract: "A long steady load with a fault every minute (see docs/benchmarks.md).",
        discussion: """
            Starts the embedded Kafka (--brokers brokers, 12 partitions, replication factor up to 3), a \
            redis-server with its append-only file on, the simulator and --workers workers; produces \
            --notifications jobs (one token each) at --rate per second and, every --fault-every seconds, \
            applies the next fault in turn: kill (SIGKILL a worker, start it again --restart-after seconds \
            later), term (SIGTERM a worker and start a replacement at once), redis-restart (SHUTDOWN, which \
            flushes the append-only file, then the server again on the same port and directory), broker-down \
            (broker 1, leading half the partitions of both topics, down for --broker-down-seconds), outage (the \
            gateway unreachable for --outage-seconds). Prints one JSON line and a summary: per fault the \
            seconds until the result rate is back to 80% of the load; for the run, lost notifications, \
            unflagged duplicates, results written more than once, jobs and results Kafka deleted before they \
            were read, each worker slot's resident memory after --warm-up-seconds, half-way and at the end \
            of the load, and Redis's used_memory at the end.
            """
    )

    @Option(help: "Jobs (one notification each) produced in all.")
    var notifications = 2_000_000
    @Option(help: "Jobs produced per second.")
    var rate = 2000
    @Option(help: "Seconds between faults; the first comes this long into the load.")
    var faultEvery = 60
    @Option(help: "Workers in the group.")
    var workers = 3
    @Option(help: "Brokers of the embedded Kafka (at least 2: one goes down).")
    var brokers = 3
    @Option(help: "Seconds after the kill that the killed worker starts again.")
    var restartAfter = 2
    @Option(help: "Seconds the broker stays down.")
    var brokerDownSeconds = 15
    @Option(help: "Seconds the gateway stays unreachable.")
    var outageSeconds = 15
    @Option(help: "Seconds of load before the first memory sample (at most a third of the load).")
    var warmUpSeconds = 30
    @Option(help: "The workers' session.timeout.ms; 0 keeps the worker's default.")
    var sessionTimeoutMs = 0
    @Option(help: "Seconds to wait for the last results after the load ends.")
    var drainSeconds = 120
    @Flag(help: "Keep the working directory with the workers' logs.")
    var keep = false

    enum Fault: String, CaseIterable {
        case kill, term
        case redisRestart = "redis-restart"
        case brokerDown = "broker-down"
        case outage
    }

    func run() async throws {
        try await reportingFailures {
            guard notifications > 0, rate > 0, faultEvery > 0, workers >= 1, brokers >= 2, warmUpSeconds >= 0 else {
                throw UsageFailure(
                    message:
                        "--notifications, --rate and --fault-every must be positive, --workers at least 1 and --brokers at least 2"
                )
            }
            var options = FleetLoad.options(brokers: brokers, sessionTimeoutMs: sessionTimeoutMs, keep: keep)
            // What a production Redis does: it keeps its data over a restart.
            options.redisArguments = ["--appendonly", "yes"]
            try await LocalStack.with(options, measure)
        }
    }

    private func measure(_ stack: LocalStack) async throws {
        try BenchFailover.placeKafkaRoles(
            Fault.brokerDown.rawValue,
            stack,
            brokers: brokers,
            readerGroup: stack.readerGroup("soak-reader")
        )
        let producer = try stack.loadProducer()
        let reader = try stack.resultReader(group: "soak-reader")
        var started: [LocalWorker] = []
        for i in 1...workers { started.append(try await stack.startWorker(id: "w\(i)")) }
        let fleet = Fleet(started)
        let read = try await FleetLoad.warmUp(producer, reader)

        let total = notifications
        let perTick = max(1, rate / 100)
        let loadSeconds = max(1, Int((Double((total + perTick - 1) / perTick) / 100).rounded(.up)))
        let clock = ContinuousClock()
        let sentAt = SentTimes(count: total)
        let start = clock.now
        let producing = FleetLoad.produce(total, rate: rate, from: start, with: producer, sentAt: sentAt) {
            FleetLoad.job($0, alert: "Soak")
        }
        let faulting = Task { try await applyFaults(stack, fleet, start: start, loadSeconds: loadSeconds) }
        let sampling = Task {
            // The first sample before the first fault.
            let warm = min(warmUpSeconds, loadSeconds / 3, faultEvery / 2)
            let times = [("start", warm), ("middle", loadSeconds / 2), ("end", loadSeconds)]
            var samples: [MemorySample] = []
            for (name, at) in times {
                try await Task.sleep(until: start + .seconds(at), clock: clock)
                samples += await fleet.sampleMemory(name, at: (clock.now - start).milliseconds / 1000)
            }
            return samples
        }

        var tally = ResultTally(total: total, read: read)
        let held = drainSeconds + outageSeconds + brokerDownSeconds
        try await tally.read(reader, until: start + .seconds(loadSeconds + held), start: start, sentAt: sentAt)
        try await producing.value
        let faults = try await faulting.value
        var samples = try await sampling.value
        try await tally.read(reader, until: clock.now + .seconds(3), start: start, sentAt: sentAt, settling: true)
        // Once every result is in, the workers idle again as at the start: what stayed.
        samples += await fleet.sampleMemory("drained", at: (clock.now - start).milliseconds / 1000)
        let redisMemory = try await redisInfo(stack.redisURL, "memory")
        let redisKeys = try await Self.redisKeys(stack)
        for worker in fleet.current where worker.isRunning { worker.signal(SIGTERM) }
        try? await reader.close()
        await producer.close()

        let accepted = FleetLoad.Accepted(stack, tally)
        let (lostBeforeTheWorkers, expired) = try await FleetLoad.jobsMissingFromKafka(tally.lost, stack: stack)
        let retention = Self.jobsDeletedUnread(stack.workers)
        let healed = faults.enumerated().map { index, fault in
            let event = Int(fault.at)
            let end = index + 1 < faults.count ? Int(faults[index + 1].at) : loadSeconds
            return (seconds: tally.secondsBack(after: event, before: end, rate: rate), window: end - event)
        }

        var fields: [(String, JSONValue)] = [
            ("workers", .int(Int64(workers))),
            ("brokers", .int(Int64(brokers))),
            ("rate", .int(Int64(rate))),
            ("jobs", .int(Int64(total))),
            ("loadSeconds", .int(Int64(loadSeconds))),
            ("faultEverySeconds", .int(Int64(faultEvery))),
            ("sessionTimeoutMs", .int(Int64(sessionTimeoutMs))),
            (
                "faults",
                .array(
                    zip(faults, healed).map { fault, heal in
                        fault.json(healSeconds: heal.seconds, healedBeforeNext: heal.seconds < heal.window)
                    }
                )
            ),
        ]
        fields += FleetLoad.latencyFields(tally.latencies())
        fields += FleetLoad.lossFields(tally, accepted, lostBeforeTheWorkers: lostBeforeTheWorkers)
        fields += [
            ("lostNoLongerInKafka", .int(Int64(expired))),
            ("jobsDeletedUnread", .int(Int64(retention.jobs))),
            ("jobsDeletedUnreadReports", .int(Int64(retention.reports))),
            ("resultOffsetsSkipped", .int(tally.skippedOffsets)),
            (
                "resultOffsetGaps",
                .array(
                    tally.gaps.prefix(20).map { gap in
                        .object([
                            "partition": .int(Int64(gap.partition)), "from": .int(gap.from),
                            "count": .int(gap.to - gap.from), "atS": .double((gap.at * 10).rounded() / 10),
                        ])
                    }
                )
            ),
            ("resultsReadAgain", .int(Int64(tally.readAgain))),
            ("rss", .array((0..<workers).map { slot in MemorySample.json(samples.filter { $0.slot == slot }) })),
            (
                "redis",
                .object([
                    "persistence": .string("appendonly yes, appendfsync everysec; restarted with SHUTDOWN"),
                    "usedMemoryBytes": .int(Int64(redisMemory["used_memory"] ?? "") ?? -1),
                    "usedMemoryPeakBytes": .int(Int64(redisMemory["used_memory_peak"] ?? "") ?? -1),
                    "keys": .int(Int64(redisKeys)),
                ])
            ),
        ]
        if keep { fields.append(("directory", .string(stack.directory))) }
        print(jsonLine(fields))
        print(
            Self.summary(
                faults: zip(faults, healed).map { ($0, $1.seconds, $1.seconds < $1.window) },
                tally: tally,
                accepted: accepted,
                lostBeforeTheWorkers: lostBeforeTheWorkers,
                jobsDeletedUnread: retention.jobs,
                samples: samples,
                redisUsedMemory: Int(redisMemory["used_memory"] ?? "") ?? 0
            )
        )
        if tally.received + lostBeforeTheWorkers < total || accepted.unflagged > 0 { throw ExitCode(1) }
    }

    /// The faults, one every `faultEvery` seconds from `start` while the load lasts, each once the
    /// previous one has ended.
    private func applyFaults(
        _ stack: LocalStack,
        _ fleet: Fleet,
        start: ContinuousClock.Instant,
        loadSeconds: Int
    ) async throws -> [FaultRecord] {
        let clock = ContinuousClock()
        var records: [FaultRecord] = []
        var index = 0
        while faultEvery * (index + 1) < loadSeconds {
            try await Task.sleep(until: start + .seconds(faultEvery * (index + 1)), clock: clock)
            let fault = Fault.allCases[index % Fault.allCases.count]
            let began = clock.now
            var record = FaultRecord(fault: fault, at: (began - start).milliseconds / 1000)
            func seconds(since instant: ContinuousClock.Instant) -> JSONValue {
                .double(((clock.now - instant).milliseconds / 100).rounded() / 10)
            }
            // Worker faults take turns over the slots but the last, whose first worker runs from
            // start to end: the memory of one process over the whole run.
            let slot = workers > 1 ? index % (workers - 1) : 0
            let victim = fleet.worker(in: slot)
            switch fault {
            case .kill:
                record.details["worker"] = .string(victim.id)
                fleet.replace(slot, with: try await FleetLoad.killAndRestart(victim, after: restartAfter, on: stack))
            case .term:
                victim.signal(SIGTERM)
                let replacement = try await stack.startWorker(id: "w\(slot + 1)r\(index + 1)")
                fleet.replace(slot, with: replacement)
                record.details["worker"] = .string(victim.id)
                record.details["replacement"] = .string(replacement.id)
                await victim.waitForExit()
                record.details["stoppedWorkerExitS"] = seconds(since: began)
            case .redisRestart:
                record.details["keysBefore"] = .int(Int64(try await Self.redisKeys(stack)))
                let persistence = try await redisInfo(stack.redisURL, "persistence")
                record.details["appendOnlyFileBytes"] = .int(Int64(persistence["aof_current_size"] ?? "") ?? -1)
                try await stack.restartRedis()
                record.details["downS"] = seconds(since: began)
                record.details["keysAfter"] = .int(Int64(try await Self.redisKeys(stack)))
            case .brokerDown:
                try await BenchFailover.injectKafkaFault(
                    fault.rawValue,
                    stack,
                    brokers: brokers,
                    faultSeconds: brokerDownSeconds
                )
            case .outage:
                try await FleetLoad.gatewayOutage(stack, seconds: outageSeconds)
            }
            record.ended = (clock.now - start).milliseconds / 1000
            records.append(record)
            index += 1
        }
        return records
    }

    /// The keys of the stack's Redis (database 0).
    private static func redisKeys(_ stack: LocalStack) async throws -> Int {
        let keyspace = try await redisInfo(stack.redisURL, "keyspace")["db0"] ?? ""
        let keys = keyspace.split(separator: ",").first { $0.hasPrefix("keys=") }
        return keys.flatMap { Int($0.dropFirst(5)) } ?? 0
    }

    /// Jobs Kafka deleted before a worker read them, as the workers logged them (what
    /// `apn_worker_messages_lost_to_retention_total` counts; the logs outlive killed workers),
    /// and the number of such reports.
    static func jobsDeletedUnread(_ workers: [LocalWorker]) -> (jobs: Int, reports: Int) {
        var jobs = 0
        var reports = 0
        for worker in workers {
            guard let log = try? String(contentsOfFile: worker.log, encoding: .utf8) else { continue }
            for line in log.split(separator: "\n") where line.contains("jobs before they were read") {
                reports += 1
                let lost = (try? JSONValue.parse(Array(line.utf8)))?["lost"]?.stringValue
                jobs += lost.flatMap { Int($0) } ?? 0
            }
        }
        return (jobs, reports)
    }
}
