import APNSCore
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack

/// What `apn-bench failover` and `apn-bench soak` share: the stack, jobs of one token produced at
/// a steady rate, the warm-up, and the accounting of what Apple accepted against the results.
enum FleetLoad {
    /// The stack of both: `brokers` brokers (replication factor up to 3), workers that log at info
    /// level and take up to 20 s to stop, no feedback polling.
    static func options(brokers: Int, sessionTimeoutMs: Int, keep: Bool) -> LocalStack.Options {
        var options = LocalStack.Options()
        options.brokers = brokers
        options.replicationFactor = min(3, brokers)
        options.sessionTimeoutMs = sessionTimeoutMs > 0 ? sessionTimeoutMs : nil
        options.kafkaProperties = ["fetch.wait.max.ms": "5"]
        options.worker = ["logLevel": "info", "shutdownTimeoutSeconds": "20"]
        options.app = ["feedbackIntervalSeconds": "0"]
        options.keepDirectory = keep
        return options
    }

    /// Job n's one device token.
    static func token(_ n: Int) -> String { String(format: "%064lx", 0xF000_0000 + n) }

    /// Job n: id `bench-n` (its key), one token, for `app`.
    static func job(_ n: Int, app: String = LocalStack.app, alert: String) -> KafkaOutgoingMessage {
        let id = "bench-\(n)"
        let value = #"{"id":"\#(id)","app":"\#(app)","token":"\#(token(n))","alert":"\#(alert) \#(n)"}"#
        return KafkaOutgoingMessage(topic: "apn.requests", key: Array(id.utf8), value: Array(value.utf8))
    }

    /// Sends a warm-up job and waits for its result: the workers have joined and deliver.
    /// Returns the reader's next offset in each partition it read (for ``ResultTally``).
    @discardableResult
    static func warmUp(_ producer: KafkaProducer, _ reader: KafkaConsumer) async throws -> [Int32: Int64] {
        let warmup = #"{"id":"warmup","app":"\#(LocalStack.app)","token":"\#(token(999_999_999))"}"#
        _ = try await producer.send([KafkaOutgoingMessage(topic: "apn.requests", key: nil, value: Array(warmup.utf8))])
        let deadline = ContinuousClock.now + .seconds(90)
        var read: [Int32: Int64] = [:]
        while ContinuousClock.now < deadline {
            var warmed = false
            for message in try await reader.poll(maxMessages: 100, timeout: .milliseconds(200)) {
                read[message.partition] = message.offset + 1
                if (try? JSONValue.parse(message.value))?["jobId"]?.stringValue == "warmup" { warmed = true }
            }
            if warmed { return read }
        }
        throw UsageFailure(message: "the workers did not deliver the warm-up job within 90 s")
    }

    /// Produces jobs `0..<total` at `rate` per second from `start` on, a batch every 10 ms, each
    /// one's produce time noted in `sentAt`; the task ends when every job is acknowledged.
    static func produce(
        _ total: Int,
        rate: Int,
        from start: ContinuousClock.Instant,
        with producer: KafkaProducer,
        sentAt: SentTimes,
        job: @escaping @Sendable (Int) -> KafkaOutgoingMessage
    ) -> Task<Void, any Error> {
        Task {
            let clock = ContinuousClock()
            // Discarding: a long run sends tens of thousands of batches.
            try await withThrowingDiscardingTaskGroup { group in
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
            }
        }
    }

    /// Kills a worker (SIGKILL, as a crash would) and starts it again, with its id, `seconds` later.
    static func killAndRestart(
        _ victim: LocalWorker,
        after seconds: Int,
        on stack: LocalStack
    ) async throws -> LocalWorker {
        await stack.killWorker(victim)
        try await Task.sleep(for: .seconds(seconds))
        return try await stack.startWorker(id: victim.id)
    }

    /// Makes the gateway unreachable (its connections cut) for `seconds`; returns when it is
    /// back.
    static func gatewayOutage(_ stack: LocalStack, seconds: Int) async throws {
        await stack.stopGateway()
        try await Task.sleep(for: .seconds(seconds))
        try await stack.restartGateway()
    }

    /// The slowest, p99 and p50 of sorted latencies in milliseconds.
    static func latencyFields(_ latencies: [Double]) -> [(String, JSONValue)] {
        [
            ("slowestMs", .int(Int64(latencies.last ?? 0))),
            ("p99Ms", .int(Int64(ResultTally.percentile(latencies, 0.99)))),
            ("p50Ms", .int(Int64(ResultTally.percentile(latencies, 0.50)))),
        ]
    }

    /// Results, losses and duplicates.
    static func lossFields(
        _ tally: ResultTally,
        _ accepted: Accepted,
        lostBeforeTheWorkers: Int
    ) -> [(String, JSONValue)] {
        let twicePercent = (Double(tally.writtenTwice) / Double(max(1, tally.total)) * 10_000).rounded() / 100
        return [
            ("received", .int(Int64(tally.received))),
            ("lost", .int(Int64(tally.total - tally.received))),
            ("lostButDelivered", .int(Int64(accepted.lostButDelivered))),
            ("lostBeforeTheWorkers", .int(Int64(lostBeforeTheWorkers))),
            ("writtenTwice", .int(Int64(tally.writtenTwice))),
            ("writtenTwicePercent", .double(twicePercent)),
            ("writtenTwiceBy", .object(tally.writtenTwiceBy.mapValues { .int(Int64($0)) })),
            ("connectionFailed515", .int(Int64(tally.connectionFailed))),
            ("otherFailures", .object(tally.otherFailures.mapValues { .int(Int64($0)) })),
            ("possibleDuplicate", .int(Int64(tally.flaggedCount))),
            ("acceptedTwice", .int(Int64(accepted.twice))),
            ("unflaggedDuplicates", .int(Int64(accepted.unflagged))),
            ("readerErrors", .object(tally.readerErrors.mapValues { .int(Int64($0)) })),
        ]
    }

    /// Duplicates Apple accepted and lost notifications it accepted, from the simulators'
    /// counts per token against `tally`.
    struct Accepted {
        /// Jobs whose token Apple accepted more than once.
        var twice = 0
        /// Of those, the ones whose result does not say `possibleDuplicate`.
        var unflagged = 0
        /// Jobs without a result that Apple accepted: their results, not their jobs, went missing.
        var lostButDelivered = 0
        /// Up to 20 unflagged duplicates, each as `job <n>: accepted <count>×; <first result>; again: …`.
        var unflaggedStories: [String] = []

        init(_ stack: LocalStack, _ tally: ResultTally) {
            var accepted = stack.acceptedByToken
            for (token, count) in stack.http2Simulator?.acceptedByToken ?? [:] { accepted[token, default: 0] += count }
            for n in 0..<tally.total {
                guard let t = try? DeviceToken(hex: token(n)), let count = accepted[t] else { continue }
                if !tally.has(n) { lostButDelivered += 1 }
                guard count > 1 else { continue }
                twice += 1
                if !tally.flagged(n) {
                    unflagged += 1
                    if unflaggedStories.count < 20 {
                        let first = "\(tally.writer(of: n) ?? "no result") at \(tally.arrival(of: n) ?? -1) s"
                        let again = (tally.writtenAgain[n] ?? []).joined(separator: ", ")
                        unflaggedStories.append("job \(n): accepted \(count)x; first \(first); again: [\(again)]")
                    }
                }
            }
        }
    }

    /// How many of the jobs `numbers` (each acknowledged to the producer) are not in
    /// `apn.requests`: lost by the broker before any worker could read them. `expired`: those of
    /// them older than what the topic still holds (its retention deleted the start of a
    /// partition), which cannot be told apart from jobs deleted after they were read.
    static func jobsMissingFromKafka(
        _ numbers: [Int],
        stack: LocalStack
    ) async throws -> (missing: Int, expired: Int) {
        guard !numbers.isEmpty else { return (0, 0) }
        let consumer = try KafkaConsumer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": stack.kafka.bootstrapServers, "group.id": stack.readerGroup("jobs-check"),
                "auto.offset.reset": "earliest", "enable.auto.commit": "false",
            ])
        )
        try consumer.subscribe(topics: ["apn.requests"])
        var missing = Set(numbers)
        // The newest job that was the first one still held by a partition whose start is gone.
        var retainedFrom = 0
        var firstRead: Set<Int32> = []
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(60)
        var lastMessage = clock.now
        // Until every one is found, or nothing more came for 10 s (a join takes about 3 s).
        while !missing.isEmpty, clock.now < deadline, clock.now - lastMessage < .seconds(10) {
            let messages = try await consumer.poll(maxMessages: 10_000, timeout: .milliseconds(200))
            if !messages.isEmpty { lastMessage = clock.now }
            for message in messages {
                guard let key = message.key, let n = Int(String(decoding: key, as: UTF8.self).dropFirst(6)) else {
                    continue
                }
                if firstRead.insert(message.partition).inserted, message.offset > 0 {
                    retainedFrom = max(retainedFrom, n)
                }
                missing.remove(n)
            }
        }
        try? await consumer.close()
        let expired = missing.filter { $0 < retainedFrom }.count
        return (missing.count - expired, expired)
    }
}

/// The results of jobs `0..<total` as a reader of `apn.results` sees them: each job's first
/// result, results written again, and first results per second since the start.
///
/// A result read again at an offset already read (after the reader's own rebalance) is not
/// written twice. Offsets a partition skipped are noted: a gap of one is usually an offset
/// without a message; results Kafka deleted before the reader read them (it fell behind the
/// topic's retention) are a larger one, where the reader's position was reset to the oldest
/// offset kept.
struct ResultTally {
    /// Offsets `[from, to)` of a partition of `apn.results` that the reader skipped, `at` seconds
    /// since the start.
    struct Gap {
        var partition: Int32
        var from: Int64
        var to: Int64
        var at: Double
    }

    let total: Int
    private(set) var received = 0
    /// Per job: when its first result was read (seconds since the start), NaN until then.
    private var arrived: [Float]
    /// Per job: produce to first result, in milliseconds.
    private var latencyMs: [Float]
    /// Per job: its first result says `possibleDuplicate`.
    private var possibleDuplicate: [Bool]
    /// Per job written more than once: each later result's writer, status and flag
    /// (`w2 transmitted possibleDuplicate`).
    private(set) var writtenAgain: [Int: [String]] = [:]
    /// Per job: the worker that wrote its first result (an index into `workerNames`).
    private var writer: [UInt16]
    private var workerNames: [String] = []
    private var workerIndex: [String: UInt16] = [:]
    private(set) var writtenTwice = 0
    /// Results written twice by the first writer and the second, "w1 then w2".
    private(set) var writtenTwiceBy: [String: Int] = [:]
    private(set) var connectionFailed = 0
    private(set) var otherFailures: [String: Int] = [:]
    private(set) var arrivalsPerSecond: [Int: Int] = [:]
    /// Results read again at offsets already read.
    private(set) var readAgain = 0
    private(set) var gaps: [Gap] = []
    /// Errors the reader's polls reported and read on after.
    private(set) var readerErrors: [String: Int] = [:]
    private var nextOffset: [Int32: Int64] = [:]

    /// `read`: the reader's next offset in the partitions it has read already.
    init(total: Int, read: [Int32: Int64] = [:]) {
        self.total = total
        nextOffset = read
        arrived = Array(repeating: .nan, count: total)
        latencyMs = Array(repeating: 0, count: total)
        possibleDuplicate = Array(repeating: false, count: total)
        writer = Array(repeating: 0, count: total)
    }

    /// Offsets the reader skipped, over all gaps.
    var skippedOffsets: Int64 { gaps.reduce(0) { $0 + $1.to - $1.from } }

    func has(_ n: Int) -> Bool { !arrived[n].isNaN }
    /// The worker that wrote job n's first result.
    func writer(of n: Int) -> String? { has(n) ? workerNames[Int(writer[n])] : nil }
    /// Job n's latency from produce to first result, in milliseconds.
    func latency(of n: Int) -> Double? { has(n) ? Double(latencyMs[n]) : nil }
    /// When job n's first result was read, in seconds since the start.
    func arrival(of n: Int) -> Double? { has(n) ? Double(arrived[n]) : nil }
    func flagged(_ n: Int) -> Bool { possibleDuplicate[n] }

    /// A result as `<worker> <type or status name>[ possibleDuplicate]`.
    static func describe(_ result: JSONValue, worker: String) -> String {
        let what = result["statusName"]?.stringValue ?? result["type"]?.stringValue ?? "?"
        let flag = result["possibleDuplicate"]?.boolValue == true ? " possibleDuplicate" : ""
        return "\(worker) \(what)\(flag)"
    }
    var flaggedCount: Int { possibleDuplicate.lazy.filter { $0 }.count }
    /// When the last first result was read, in seconds since the start.
    var lastArrival: Double { Double(arrived.lazy.filter { !$0.isNaN }.max() ?? 0) }
    /// The jobs without a result.
    var lost: [Int] { (0..<total).filter { arrived[$0].isNaN } }

    /// The latencies of the jobs with a result that `include` selects, in milliseconds, sorted.
    func latencies(_ include: (Int) -> Bool = { _ in true }) -> [Double] {
        (0..<total).filter { has($0) && include($0) }.map { Double(latencyMs[$0]) }.sorted()
    }

    /// Counts a result read at `now`.
    mutating func record(
        _ message: KafkaMessage,
        at now: ContinuousClock.Instant,
        start: ContinuousClock.Instant,
        sentAt: SentTimes
    ) {
        let expected = nextOffset[message.partition] ?? 0
        guard message.offset >= expected else {
            readAgain += 1
            return
        }
        let seconds = (now - start).milliseconds / 1000
        if message.offset > expected {
            gaps.append(Gap(partition: message.partition, from: expected, to: message.offset, at: seconds))
        }
        nextOffset[message.partition] = message.offset + 1
        guard let n = benchJobNumber(message.value), n >= 0, n < total, let result = try? JSONValue.parse(message.value)
        else { return }
        let worker = result["worker"]?.stringValue ?? "?"
        if has(n) {
            writtenAgain[n, default: []].append(Self.describe(result, worker: worker))
            writtenTwice += 1
            writtenTwiceBy["\(workerNames[Int(writer[n])]) then \(worker)", default: 0] += 1
            return
        }
        received += 1
        arrivalsPerSecond[Int(seconds), default: 0] += 1
        if let status = result["status"]?.intValue {
            if status == 515 {
                connectionFailed += 1
            } else {
                otherFailures[result["statusName"]?.stringValue ?? "\(status)", default: 0] += 1
            }
        }
        arrived[n] = Float(seconds)
        latencyMs[n] = Float(sentAt.get(n).map { (now - $0).milliseconds } ?? 0)
        possibleDuplicate[n] = result["possibleDuplicate"]?.boolValue ?? false
        if workerIndex[worker] == nil {
            workerIndex[worker] = UInt16(workerNames.count)
            workerNames.append(worker)
        }
        writer[n] = workerIndex[worker]!
    }

    /// Reads results until every job has one or `deadline` passes; `settling`, until
    /// `deadline` (for results written again after the last first one).
    mutating func read(
        _ reader: KafkaConsumer,
        until deadline: ContinuousClock.Instant,
        start: ContinuousClock.Instant,
        sentAt: SentTimes,
        settling: Bool = false
    ) async throws {
        let clock = ContinuousClock()
        while settling || received < total, clock.now < deadline {
            switch await Self.poll(reader) {
            case .success(let messages):
                for message in messages { record(message, at: clock.now, start: start, sentAt: sentAt) }
            case .failure(let error):
                if error.isFatal { throw error }
                readerErrors["\(error)", default: 0] += 1
            }
        }
    }

    /// One poll of `reader`, its error as a value.
    private static func poll(_ reader: KafkaConsumer) async -> Result<[KafkaMessage], KafkaError> {
        do {
            return .success(try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)))
        } catch {
            return .failure(error)
        }
    }

    /// Seconds from second `event` until the result rate is back to `fraction` of `rate` for
    /// good before second `end`: the last second in between with fewer results, plus one, minus
    /// `event`; 0 if none was slower. `end - event` means it did not come back before `end`.
    func secondsBack(after event: Int, before end: Int, rate: Int, fraction: Double = 0.8) -> Int {
        guard end > event else { return 0 }
        let lastSlow = (event..<end).last { Double(arrivalsPerSecond[$0] ?? 0) < Double(rate) * fraction }
        return lastSlow.map { $0 + 1 - event } ?? 0
    }

    /// The `p` quantile of sorted values, 0 when there are none.
    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }
}
