import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack

/// `apn-bench isolation`: what one tenant's load does to a worker and to the others.
struct BenchIsolation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "isolation",
        abstract: "Measure a worker under one tenant's hostile load (see docs/benchmarks.md).",
        discussion: """
            --scenario fat-jobs: produces --jobs jobs of --tokens tokens each at once (compressed, so that the \
            embedded broker holds them) to one worker with the default maxInFlight, reads every result back while \
            the worker writes them, and prints one JSON line: results received, duplicates, the seconds it took, \
            and the worker's peak RSS.

            --scenario refused | silent | slow | throttled: one worker; --healthy-jobs jobs of an app behind --jobs jobs of its \
            own, then behind --jobs jobs (60,000) of an app whose gateway refuses connections (refused), accepts \
            TCP and never answers \
            (silent), answers every request after 5 s (slow, over HTTP/2) or with 429 (throttled, over HTTP/2; its \
            notifications are answered TooManyRequests after their retries), then the same --healthy-jobs again \
            behind them; after --outage seconds the gateway comes back and the backlog is delivered. Prints one JSON line: the \
            healthy jobs' p99 from produce to result behind each backlog, the share with a result \
            within 60 s, how long the backlog took, and lost, written twice and unflagged duplicates. \
            --parked-topic none runs without moving aside (as a build before it did).
            """
    )

    @Option(help: "fat-jobs, refused, silent, slow or throttled.")
    var scenario = "fat-jobs"
    @Option(help: "Number of jobs (the backlog, in the gateway scenarios).")
    var jobs = 200
    @Option(help: "The healthy app's jobs, in the gateway scenarios.")
    var healthyJobs = 2_000
    @Option(help: "Seconds the gateway stays away (refused, silent) from when the backlog is produced.")
    var outage = 30
    @Option(help: "The workers' kafka.parkedTopic in the gateway scenarios; none: not set.")
    var parkedTopic = "apn.requests.parked"
    @Option(help: "Tokens per job (at most 10,000).")
    var tokens = 10_000
    @Option(help: "The app's confirmation window in milliseconds.")
    var windowMs = 20
    @Option(help: "The worker's maxInFlight; 0: the default.")
    var maxInFlight = 0
    @Option(help: "Seconds to wait for every result before giving up.")
    var timeout = 600

    func run() async throws {
        try await reportingFailures {
            if Self.gatewayScenarios.contains(scenario) {
                guard jobs >= 1, healthyJobs >= 1 else {
                    throw UsageFailure(message: "--jobs and --healthy-jobs must be at least 1")
                }
                try await LocalStack.with(gatewayOptions(), gateways)
                return
            }
            guard scenario == "fat-jobs" else {
                throw UsageFailure(
                    message:
                        "--scenario must be fat-jobs, \(Self.gatewayScenarios.joined(separator: ", ")), not \(scenario)"
                )
            }
            guard (1...10_000).contains(tokens), jobs >= 1 else {
                throw UsageFailure(message: "--tokens must be 1 to 10000 and --jobs at least 1")
            }
            var options = LocalStack.Options()
            options.kafkaProperties = ["fetch.wait.max.ms": "5"]
            options.worker = ["logLevel": "warning", "batchWindowMs": "10"]
            if maxInFlight > 0 { options.worker["maxInFlight"] = "\(maxInFlight)" }
            options.app = [
                "poolSize": "4", "confirmationWindowMs": "\(windowMs)", "feedbackIntervalSeconds": "0",
            ]
            try await LocalStack.with(options, fatJobs)
        }
    }

    /// The token of job `job`'s `index`-th notification: its number in the last 16 hex digits.
    static func token(job: Int, index: Int) -> String {
        String(format: "%064lx", job * 100_000 + index)
    }

    private func fatJobs(_ stack: LocalStack) async throws {
        // Compressed: 200 jobs of 10,000 tokens are 134 MB of JSON, over what the embedded broker
        // keeps per partition; numbered tokens compress to a small part of that.
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": stack.kafka.bootstrapServers, "compression.codec": "lz4",
                "message.max.bytes": "4194304", "linger.ms": "5",
            ])
        )
        let reader = try stack.resultReader(group: "bench-isolation")
        let worker = try await stack.startWorker(id: "bench")
        let clock = ContinuousClock()
        let values = (0..<jobs).map { job in
            let list = (0..<tokens).map { "\"\(Self.token(job: job, index: $0))\"" }.joined(separator: ",")
            return Array(#"{"id":"fat-\#(job)","app":"\#(LocalStack.app)","tokens":[\#(list)],"alert":"Hi"}"#.utf8)
        }
        let start = clock.now
        for chunk in stride(from: 0, to: jobs, by: 20) {
            let batch = values[chunk..<min(jobs, chunk + 20)].enumerated().map { offset, value in
                KafkaOutgoingMessage(topic: "apn.requests", key: Array("fat-\(chunk + offset)".utf8), value: value)
            }
            for report in try await producer.send(batch) { _ = try report.get() }
        }
        let produced = clock.now - start
        let total = jobs * tokens
        var seen = Set<Int>()
        seen.reserveCapacity(total)
        var duplicates = 0
        var others = 0
        let deadline = clock.now + .seconds(timeout)
        while seen.count < total, clock.now < deadline, worker.isRunning {
            for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)) {
                guard let n = Self.tokenNumber(message.value) else {
                    others += 1
                    continue
                }
                if !seen.insert(n).inserted { duplicates += 1 }
            }
        }
        let elapsed = clock.now - start
        let rss = peakRSS(of: worker.processIdentifier) ?? 0
        let exited = !worker.isRunning
        if !exited { _ = await stack.stopWorker(worker) }
        try? await reader.close()
        await producer.close()
        print(
            jsonLine([
                ("scenario", .string(scenario)), ("jobs", .int(Int64(jobs))), ("tokensPerJob", .int(Int64(tokens))),
                ("notifications", .int(Int64(total))), ("received", .int(Int64(seen.count))),
                ("writtenTwice", .int(Int64(duplicates))), ("otherResults", .int(Int64(others))),
                ("produceSeconds", .double((produced.milliseconds / 100).rounded() / 10)),
                ("seconds", .double((elapsed.milliseconds / 100).rounded() / 10)),
                ("workerPeakRSSMB", .int(Int64(rss >> 20))), ("workerExited", .bool(exited)),
            ])
        )
        if seen.count < total { throw ExitCode(1) }
    }

    /// The number in the last 16 hex digits of a result's `"token"`, found without parsing the
    /// whole result.
    static func tokenNumber(_ value: [UInt8]) -> Int? {
        let marker = Array(#""token":""#.utf8)
        var i = 0
        while i + marker.count + 64 <= value.count {
            if value[i] == marker[0] && value[i..<i + marker.count].elementsEqual(marker) {
                var n = 0
                for c in value[(i + marker.count + 48)..<(i + marker.count + 64)] {
                    switch c {
                    case 48...57: n = n << 4 | Int(c - 48)
                    case 97...102: n = n << 4 | Int(c - 87)
                    default: return nil
                    }
                }
                return n
            }
            i += 1
        }
        return nil
    }
}
