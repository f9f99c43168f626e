import APNSCore
import ArgumentParser
import Foundation
import Glibc
import PushCommandLine
import PushKafka
import PushLocalStack

/// `apn-bench isolation --scenario refused | silent | slow | throttled`: one app whose gateway
/// refuses connections, accepts TCP and never answers, answers every request after 5 s, or
/// answers every request 429, with a backlog of `--jobs` jobs, and another app's jobs behind it.
extension BenchIsolation {
    static let gatewayScenarios = ["refused", "silent", "slow", "throttled"]
    static let healthyApp = "com.example.healthy"
    /// Token numbers: the backlog from 0, the healthy app's jobs behind a reachable backlog and
    /// behind the backlog from these, and that reachable backlog from `reachableBase`.
    static let baselineBase = 10_000_000
    static let healthyBase = 20_000_000
    static let reachableBase = 30_000_000

    /// The stack of a gateway scenario: the backlog's app on the binary protocol (`slow` and
    /// `throttled`: over HTTP/2, answering after 5 s or 429), the other app on the other transport.
    func gatewayOptions() -> LocalStack.Options {
        var options = LocalStack.Options()
        options.kafkaProperties = ["fetch.wait.max.ms": "5"]
        options.worker = ["logLevel": "warning", "batchWindowMs": "10"]
        if maxInFlight > 0 { options.worker["maxInFlight"] = "\(maxInFlight)" }
        if parkedTopic != "none" { options.parkedTopic = parkedTopic }
        options.app = ["poolSize": "4", "confirmationWindowMs": "\(windowMs)", "feedbackIntervalSeconds": "0"]
        var http2 = LocalStack.HTTP2App(name: Self.healthyApp)
        if scenario == "slow" { http2.responseDelay = .seconds(5) }
        if scenario == "throttled" { http2.status429Every = 1 }
        http2.settings = ["poolSize": "4"]
        options.http2App = http2
        return options
    }

    /// The backlog's app and the healthy one.
    var apps: (backlog: String, healthy: String) {
        overHTTP2 ? (Self.healthyApp, LocalStack.app) : (LocalStack.app, Self.healthyApp)
    }

    /// The backlog's gateway is the HTTP/2 simulator, which stays up: slow, or answering 429.
    var overHTTP2: Bool { scenario == "slow" || scenario == "throttled" }

    func gateways(_ stack: LocalStack) async throws {
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": stack.kafka.bootstrapServers, "linger.ms": "5",
            ])
        )
        let reader = try stack.resultReader(group: "bench-isolation")
        let worker = try await stack.startWorker(id: "bench")
        let tally = Tally()
        let clock = ContinuousClock()

        func produce(_ range: Range<Int>, app: String) async throws -> [Int: ContinuousClock.Instant] {
            var times: [Int: ContinuousClock.Instant] = [:]
            for chunk in stride(from: range.lowerBound, to: range.upperBound, by: 5_000) {
                let numbers = chunk..<min(range.upperBound, chunk + 5_000)
                let batch = numbers.map { n in
                    KafkaOutgoingMessage(
                        topic: "apn.requests",
                        key: Array("job-\(n)".utf8),
                        value: Array(
                            #"{"id":"j\#(n)","app":"\#(app)","token":"\#(Self.token(job: 0, index: n))","alert":"Hi"}"#
                                .utf8
                        )
                    )
                }
                let now = clock.now
                for n in numbers { times[n] = now }
                for report in try await producer.send(batch) { _ = try report.get() }
            }
            return times
        }
        /// Reads results until `done` holds or `deadline` passes.
        func read(until deadline: ContinuousClock.Instant, _ done: () -> Bool) async throws {
            while !done(), clock.now < deadline, worker.isRunning {
                for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)) {
                    tally.note(message.value, at: clock.now)
                }
            }
        }
        func latencies(_ times: [Int: ContinuousClock.Instant]) -> [Double] {
            times.compactMap { n, produced in tally.firstSeen[n].map { ($0 - produced).milliseconds } }
        }

        // 1. The healthy app's jobs behind as large a backlog of an app that can be reached (its own).
        let healthyCount = healthyJobs
        let reachable = Self.reachableBase..<Self.reachableBase + jobs
        _ = try await produce(reachable, app: apps.healthy)
        let baselineTimes = try await produce(Self.baselineBase..<Self.baselineBase + healthyCount, app: apps.healthy)
        try await read(until: clock.now + .seconds(timeout)) {
            baselineTimes.keys.allSatisfy { tally.firstSeen[$0] != nil }
                && reachable.allSatisfy { tally.firstSeen[$0] != nil }
        }
        let baseline = latencies(baselineTimes)

        // 2. The backlog, then the same jobs again behind it.
        var silent: SilentListener?
        switch scenario {
        case "refused":
            await stack.stopGateway()
        case "silent":
            let port = stack.simulator.binaryPort
            await stack.stopGateway()
            silent = try SilentListener(port: port)
        default:
            break
        }
        let backlogStart = clock.now
        _ = try await produce(0..<jobs, app: apps.backlog)
        let healthyTimes = try await produce(Self.healthyBase..<Self.healthyBase + healthyCount, app: apps.healthy)
        try await read(until: clock.now + .seconds(60)) { healthyTimes.keys.allSatisfy { tally.firstSeen[$0] != nil } }
        let behind = latencies(healthyTimes).filter { $0 <= 60_000 }
        // The outage lasts its time whatever the healthy jobs did.
        try await read(until: backlogStart + .seconds(outage)) { false }

        // 3. The gateway back: the backlog is delivered.
        silent?.close()
        if !overHTTP2 { try await stack.restartGateway() }
        let healed = clock.now
        try await read(until: clock.now + .seconds(timeout)) { (0..<jobs).allSatisfy { tally.firstSeen[$0] != nil } }
        let delivered = clock.now
        let rss = peakRSS(of: worker.processIdentifier) ?? 0
        let exited = !worker.isRunning
        if !exited { _ = await stack.stopWorker(worker) }
        try? await reader.close()
        await producer.close()

        var accepted = stack.acceptedByToken
        for (token, count) in stack.http2Simulator?.acceptedByToken ?? [:] { accepted[token, default: 0] += count }
        var unflagged = 0
        for (token, count) in accepted where count > 1 {
            if let n = Self.tokenNumber(Array(#""token":"\#(token.hex)""#.utf8)), !tally.flagged.contains(n) {
                unflagged += 1
            }
        }
        let lost = (0..<jobs).count(where: { tally.firstSeen[$0] == nil })
        let p99 = { (values: [Double]) in BenchLanes.percentile(values, 0.99) }
        func tenth(_ value: Double) -> JSONValue { .double((value * 10).rounded() / 10) }
        print(
            jsonLine([
                ("scenario", .string(scenario)), ("parkedTopic", .string(parkedTopic)),
                ("backlogJobs", .int(Int64(jobs))), ("healthyJobs", .int(Int64(healthyCount))),
                ("healthyP99BehindReachableMs", tenth(p99(baseline))),
                ("healthyWithin60s", tenth(100 * Double(behind.count) / Double(max(1, healthyCount)))),
                ("healthyP99BehindMs", tenth(p99(behind))),
                ("backlogDeliveredSeconds", tenth((delivered - healed).milliseconds / 1000)),
                ("backlogSecondsFromProduce", tenth((delivered - backlogStart).milliseconds / 1000)),
                ("lost", .int(Int64(lost))), ("writtenTwice", .int(Int64(tally.writtenTwice))),
                ("unflaggedDuplicates", .int(Int64(unflagged))), ("notTransmitted", .int(Int64(tally.notTransmitted))),
                ("workerPeakRSSMB", .int(Int64(rss >> 20))), ("workerExited", .bool(exited)),
            ])
        )
        for sample in tally.twiceSamples { FileHandle.standardError.write(Data("written twice: \(sample)\n".utf8)) }
        if lost > 0 || unflagged > 0 { throw ExitCode(1) }
    }
}

/// What the results read say, by token number.
final class Tally: @unchecked Sendable {
    // Used from the one task that reads results.
    var firstSeen: [Int: ContinuousClock.Instant] = [:]
    var flagged: Set<Int> = []
    var writtenTwice = 0
    /// The first few results written a second time, for stderr.
    var twiceSamples: [String] = []
    var notTransmitted = 0

    func note(_ value: [UInt8], at time: ContinuousClock.Instant) {
        guard let n = BenchIsolation.tokenNumber(value) else { return }
        if firstSeen[n] == nil {
            firstSeen[n] = time
            if !Self.contains(value, #""type":"transmitted""#) { notTransmitted += 1 }
        } else {
            writtenTwice += 1
            if twiceSamples.count < 3 { twiceSamples.append(String(decoding: value, as: UTF8.self)) }
        }
        if Self.contains(value, #""possibleDuplicate":true"#) { flagged.insert(n) }
    }

    static func contains(_ value: [UInt8], _ text: String) -> Bool {
        let needle = Array(text.utf8)
        guard value.count >= needle.count else { return false }
        for i in 0...(value.count - needle.count) where value[i] == needle[0] {
            if value[i..<i + needle.count].elementsEqual(needle) { return true }
        }
        return false
    }
}

/// A TCP port that accepts connections (the kernel completes the handshakes) and never reads
/// or answers: a gateway that stopped answering.
final class SilentListener {
    private var descriptor: Int32

    init(port: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw UsageFailure(message: "cannot open a socket: errno \(errno)") }
        var yes: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(descriptor, 1024) == 0 else {
            Glibc.close(descriptor)
            throw UsageFailure(message: "cannot listen on 127.0.0.1:\(port): errno \(errno)")
        }
    }

    func close() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
    }

    deinit { close() }
}
