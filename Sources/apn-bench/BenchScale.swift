import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack
import PushRedis
import Synchronization

/// `apn-bench scale`: the cost of one notification in each component as workers are added.
struct BenchScale: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale",
        abstract:
            "Measure 1, 2, 4... workers sharing one embedded Kafka, Redis Cluster and simulator (see docs/benchmarks.md).",
        discussion: """
            For each count in --workers: starts the embedded Kafka (12 partitions), a Redis Cluster of \
            --primaries redis-server primaries (0: one plain redis-server), the simulator and that many \
            `apn-worker run`; waits until every worker owns partitions, produces --jobs jobs (one token each) \
            as fast as it can and reads every result back. Prints one JSON line per count: notifications/s, \
            and CPU µs per notification of the workers, of Redis (and of each primary), and of this process \
            (embedded Kafka, simulator, load and reader), measured from the first job produced to the last \
            result read.
            """
    )

    @Option(help: "Jobs per row.")
    var jobs = 100_000
    @Option(help: "Comma-separated numbers of workers, one row each.")
    var workers = "1,2,4"
    @Option(help: "Redis Cluster primaries (at least 3); 0 runs one plain redis-server instead.")
    var primaries = 3
    @Option(
        help:
            "Most jobs produced and not yet answered: the embedded Kafka keeps only about 5 MiB per partition, and a deeper backlog is deleted unread."
    )
    var backlog = 200_000
    @Option(help: "The workers' worker.dedupeBuckets; 0 keeps the worker's default (65,536).")
    var dedupeBuckets = 0
    @Option(
        help:
            "hash-max-listpack-entries of the one redis-server (--primaries 0), for buckets of more fields; 0 keeps Redis' default (128)."
    )
    var listpackEntries = 0
    @Option(
        help:
            "The workers' worker.dedupeTTLSeconds (at least 60); 0 keeps the default (a day). A run longer than it meets full buckets of the generation before, as a worker does after its first period; keys expire during the run, so the memory figure no longer means bytes per notification."
    )
    var dedupeTTLSeconds = 0

    func run() async throws {
        try await reportingFailures {
            let counts = workers.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            guard !counts.isEmpty, counts.allSatisfy({ (1...12).contains($0) }) else {
                throw UsageFailure(
                    message: "--workers must be a comma-separated list of counts from 1 to 12, not \(workers)"
                )
            }
            guard primaries == 0 || primaries >= 3 else {
                throw UsageFailure(
                    message:
                        "--primaries must be 0 (one redis-server) or at least 3 (redis-cli needs 3 to make a cluster)"
                )
            }
            guard listpackEntries == 0 || primaries == 0 else {
                throw UsageFailure(message: "--listpack-entries applies to one redis-server: use it with --primaries 0")
            }
            guard dedupeBuckets >= 0, listpackEntries >= 0 else {
                throw UsageFailure(message: "--dedupe-buckets and --listpack-entries must be 0 (the default) or more")
            }
            guard dedupeTTLSeconds == 0 || dedupeTTLSeconds >= 60 else {
                throw UsageFailure(
                    message: "--dedupe-ttl-seconds must be 0 (the default) or at least 60, the worker's least"
                )
            }
            for count in counts {
                var options = LocalStack.Options()
                options.redisClusterPrimaries = primaries
                if listpackEntries > 0 {
                    options.redisArguments = ["--hash-max-listpack-entries", "\(listpackEntries)"]
                }
                options.kafkaProperties = ["fetch.wait.max.ms": "5"]
                options.worker = [
                    "logLevel": "warning", "maxInFlight": "100000", "batchSize": "1000", "batchWindowMs": "10",
                    "resultFlushMs": "20",
                    "statusAddress": "null",
                ]
                if dedupeBuckets > 0 { options.worker["dedupeBuckets"] = "\(dedupeBuckets)" }
                if dedupeTTLSeconds > 0 { options.worker["dedupeTTLSeconds"] = "\(dedupeTTLSeconds)" }
                options.app = [
                    "poolSize": "4", "confirmationWindowMs": "1000", "cacheMaxCount": "100000",
                    "feedbackIntervalSeconds": "0",
                ]
                try await LocalStack.with(options) { stack in try await measure(stack, workers: count) }
            }
        }
    }

    private func measure(_ stack: LocalStack, workers count: Int) async throws {
        let producer = try stack.loadProducer()
        let reader = try stack.resultReader(group: "bench-scale-reader")
        func job(_ n: Int) -> KafkaOutgoingMessage {
            let id = "scale-\(n)"
            let token = String(format: "%064lx", 0x5CA1_0000 + n)
            let value =
                #"{"id":"\#(id)","app":"\#(LocalStack.app)","token":"\#(token)","alert":"Scale \#(n)","badge":1}"#
            return KafkaOutgoingMessage(topic: "apn.requests", key: Array(id.utf8), value: Array(value.utf8))
        }

        var processes: [LocalWorker] = []
        for index in 0..<count { processes.append(try await stack.startWorker(id: "scale-\(index + 1)")) }
        // Warm up until the group has settled: a round of warm-up jobs (keyed over all
        // partitions) comes back with results from every worker.
        let warmDeadline = ContinuousClock.now + .seconds(120)
        var round = 0
        var settled = false
        while !settled, ContinuousClock.now < warmDeadline {
            round += 1
            let ids = Set((0..<48).map { "warm-\(round)-\($0)" })
            _ = try await producer.send(
                ids.map { id in
                    let value =
                        #"{"id":"\#(id)","app":"\#(LocalStack.app)","token":"\#(String(format: "%064lx", 0xA000 + round))","alert":"warm"}"#
                    return KafkaOutgoingMessage(topic: "apn.requests", key: Array(id.utf8), value: Array(value.utf8))
                }
            )
            var seen = Set<String>()
            var by = Set<String>()
            let roundDeadline = ContinuousClock.now + .seconds(10)
            while seen.count < ids.count, ContinuousClock.now < roundDeadline {
                for message in try await reader.poll(maxMessages: 1000, timeout: .milliseconds(200)) {
                    guard let result = try? JSONValue.parse(message.value), let id = result["jobId"]?.stringValue,
                        ids.contains(id)
                    else {
                        continue
                    }
                    seen.insert(id)
                    if let worker = result["worker"]?.stringValue { by.insert(worker) }
                }
            }
            settled = seen.count == ids.count && by.count == count
        }
        guard settled else {
            throw UsageFailure(message: "the \(count) workers did not all deliver warm-up jobs within 120 s")
        }

        let workerPIDs = processes.map(\.processIdentifier)
        func cpu(_ pids: [Int32]) -> Double { pids.reduce(0) { $0 + (cpuSeconds(of: $1) ?? 0) } }
        let before = (workers: cpu(workerPIDs), redis: stack.redisPIDs.map { cpu([$0]) }, own: cpu([getpid()]))
        let redisBytesBefore = try await redisNetworkBytes(stack)
        let redisMemoryBefore = try await summedRedisInfo(stack, section: "memory", field: "used_memory")
        var resultBytes = 0
        let clock = ContinuousClock()
        let start = clock.now
        let answered = Atomic<Int>(0)
        let producing = Task { [jobs, backlog] in
            for chunk in stride(from: 0, to: jobs, by: 10_000) {
                // Produced ahead of the results by at most the backlog.
                while chunk - answered.load(ordering: .relaxed) > backlog {
                    try await Task.sleep(for: .milliseconds(20))
                }
                for report in try await producer.send((chunk..<min(jobs, chunk + 10_000)).map(job)) {
                    _ = try report.get()
                }
            }
        }
        var received = Set<Int>()
        var last = start
        let deadline = clock.now + .seconds(600)
        while received.count < jobs, clock.now < deadline {
            for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)) {
                guard let id = (try? JSONValue.parse(message.value))?["jobId"]?.stringValue, id.hasPrefix("scale-"),
                    let n = Int(id.dropFirst("scale-".count)), n >= 0, received.insert(n).inserted
                else { continue }
                resultBytes += message.value.count
                last = clock.now
            }
            answered.store(received.count, ordering: .relaxed)
        }
        try await producing.value
        let after = (workers: cpu(workerPIDs), redis: stack.redisPIDs.map { cpu([$0]) }, own: cpu([getpid()]))
        let redisBytesAfter = try await redisNetworkBytes(stack)
        var roundTrips = 0
        var redirects = 0
        for process in processes {
            let report = await stack.stopWorker(process).report.flatMap { try? JSONValue.parse($0) }
            roundTrips += Int(report?["redisRoundTrips"]?.intValue ?? 0)
            redirects += Int(report?["redisRedirects"]?.intValue ?? 0)
        }
        try? await reader.close()
        await producer.close()
        // After the workers stopped: what Redis keeps of the notifications once their results
        // are written (the stopping workers store their last written positions).
        let redisMemoryAfter = try await summedRedisInfo(stack, section: "memory", field: "used_memory")

        let n = Double(max(received.count, 1))
        func micros(_ seconds: Double) -> JSONValue { .double((seconds / n * 1e6 * 10).rounded() / 10) }
        let redisPerNode = zip(after.redis, before.redis).map { $0 - $1 }
        let seconds = max((last - start).milliseconds / 1000, 0.001)
        print(
            jsonLine([
                ("workers", .int(Int64(count))),
                ("redis", .string(primaries == 0 ? "server" : "cluster of \(primaries) primaries")),
                ("jobs", .int(Int64(jobs))),
                ("received", .int(Int64(received.count))),
                ("notificationsPerSecond", .int(Int64(Double(received.count) / seconds))),
                (
                    "cpuMicrosPerNotification",
                    .object([
                        "workers": micros(after.workers - before.workers), "redis": micros(redisPerNode.reduce(0, +)),
                        "kafkaSimulatorAndLoad": micros(after.own - before.own),
                    ])
                ),
                ("redisMicrosPerNotificationByNode", .array(redisPerNode.map(micros))),
                (
                    "bytesPerNotification",
                    .object([
                        "job": .int(Int64(job(0).value.count)),
                        "result": .int(Int64(resultBytes / max(received.count, 1))),
                        "redisIn": .int(Int64(Double(redisBytesAfter.in - redisBytesBefore.in) / n)),
                        "redisOut": .int(Int64(Double(redisBytesAfter.out - redisBytesBefore.out) / n)),
                    ])
                ),
                ("redisMemoryBytesPerNotification", .int(Int64(Double(redisMemoryAfter - redisMemoryBefore) / n))),
                ("redisRoundTripsPer1000", .double((Double(roundTrips) / n * 1000 * 10).rounded() / 10)),
                ("redisRedirects", .int(Int64(redirects))),
            ])
        )
        if received.count < jobs { throw ExitCode(1) }
    }

    /// Bytes Redis has read and written on its connections so far, summed over its nodes
    /// (`INFO stats`: `total_net_input_bytes`, `total_net_output_bytes`).
    private func redisNetworkBytes(_ stack: LocalStack) async throws -> (in: Int, out: Int) {
        (
            try await summedRedisInfo(stack, section: "stats", field: "total_net_input_bytes"),
            try await summedRedisInfo(stack, section: "stats", field: "total_net_output_bytes")
        )
    }

    /// A numeric field of an `INFO` section, summed over the Redis nodes.
    private func summedRedisInfo(_ stack: LocalStack, section: String, field: String) async throws -> Int {
        var total = 0
        for url in stack.redisClusterURLs.isEmpty ? [stack.redisURL] : stack.redisClusterURLs {
            total += Int(try await redisInfo(url, section)[field] ?? "") ?? 0
        }
        return total
    }
}
