import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushLocalStack
import PushWorker

/// `apn-bench hostile`: how long the worst jobs take to be answered.
struct BenchHostile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hostile",
        abstract: "Measure the answer time of the worst-case jobs (see docs/benchmarks.md).",
        discussion: """
            First parses each worst-case job in this process (the parser and payload builder the worker \
            uses) and prints the time per message. Then starts the embedded stack and one `apn-worker run`, \
            produces --count messages of each case one after another (each once the previous one is \
            answered) and then --count at once, and prints per case how long the worker took from \
            consuming a message to making its result.
            """
    )

    @Option(help: "Messages of each case.")
    var count = 10
    @Flag(help: "Skip the run through the worker: parse only.")
    var parseOnly = false
    @Option(help: "Only the cases whose name contains this text.")
    var only: String?

    /// A worst case: its name and its message.
    struct Case: Sendable {
        var name: String
        var message: @Sendable (_ id: String) -> [UInt8]
    }

    static let app = LocalStack.app
    static let token = String(repeating: "ab", count: 32)

    static let cases: [Case] = [
        Case(name: "valid, 1 token") { id in
            Array(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Hello"}"#.utf8)
        },
        Case(name: "200 KB alert (trimmed)") { id in
            alertJob(id, bytes: 200_000)
        },
        Case(name: "1 MiB alert (trimmed)") { id in
            alertJob(id, bytes: (1 << 20) - 200)
        },
        Case(name: "10,001 tokens (rejected)") { id in
            let tokens = (0...10_000).map { "\"" + String(format: "%064lx", $0) + "\"" }.joined(separator: ",")
            return Array(#"{"id":"\#(id)","app":"\#(app)","tokens":[\#(tokens)],"alert":"Hi"}"#.utf8)
        },
        Case(name: "10,000 tokens and an unknown field (10,000 results)") { id in
            let tokens = (0..<10_000).map { "\"" + String(format: "%064lx", $0) + "\"" }.joined(separator: ",")
            return Array(#"{"id":"\#(id)","app":"\#(app)","tokens":[\#(tokens)],"alert":"Hi","colour":"red"}"#.utf8)
        },
        Case(name: "nesting 5,000 deep (rejected)") { id in
            Array(
                (#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Hi","payload":{"d":"#
                    + String(repeating: "[", count: 5000) + String(repeating: "]", count: 5000) + "}}").utf8
            )
        },
        Case(name: "600 KB app name (not configured)") { id in
            Array(
                #"{"id":"\#(id)","app":"\#(String(repeating: "z", count: 600_000))","token":"\#(token)","alert":"Hi"}"#
                    .utf8
            )
        },
        Case(name: "1 MiB message (payload too large)") { id in
            padded(id, to: 1 << 20)
        },
        Case(name: "1 MiB + 1 byte (over the limit)") { id in
            padded(id, to: (1 << 20) + 1)
        },
    ]

    private var selectedCases: [Case] { Self.cases.filter { only == nil || $0.name.contains(only!) } }

    /// A job whose alert body makes the message `bytes` long, of words, accents and emoji.
    static func alertJob(_ id: String, bytes: Int) -> [UInt8] {
        let head = Array(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":{"title":"T","body":""#.utf8)
        let tail = Array(#""},"truncateAtWordEnd":true}"#.utf8)
        let words = Array("Grüße aus Köln 👍🏽 and a few plain words to cut at ".utf8)
        var body: [UInt8] = []
        while body.count + words.count <= bytes - head.count - tail.count { body += words }
        body += [UInt8](repeating: UInt8(ascii: "x"), count: bytes - head.count - tail.count - body.count)
        return head + body + tail
    }

    /// A job padded with custom data to exactly `size` bytes.
    static func padded(_ id: String, to size: Int) -> [UInt8] {
        let head = Array(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Hi","payload":{"pad":""#.utf8)
        let tail = Array(#""}}"#.utf8)
        return head + [UInt8](repeating: UInt8(ascii: "p"), count: size - head.count - tail.count) + tail
    }

    func run() async throws {
        try await reportingFailures {
            guard (1...1000).contains(count) else { throw UsageFailure(message: "--count must be from 1 to 1000") }
            measureParsing()
            if parseOnly { return }
            var options = LocalStack.Options()
            options.kafkaProperties = ["fetch.wait.max.ms": "5"]
            options.worker = ["logLevel": "warning", "resultFlushMs": "5", "batchWindowMs": "0"]
            options.app = ["confirmationWindowMs": "20", "feedbackIntervalSeconds": "0"]
            try await LocalStack.with(options, measureWorker)
        }
    }

    /// The parser alone, in this process: the CPU cost of each case.
    private func measureParsing() {
        let parser = JobParser()
        let clock = ContinuousClock()
        for c in selectedCases {
            let messages = (0..<count).map { c.message("parse-\($0)") }
            var outcome = ""
            let start = clock.now
            for message in messages {
                switch parser.parse(message) {
                case .job(let job):
                    outcome = job.payloadError == nil ? "job, payload \(job.payload.count) bytes" : "job, payload error"
                case .rejected(_, _, let tokens, _, _, _): outcome = "rejected, \(tokens.count) results"
                case .unreadable: outcome = "unreadable, 1 result"
                }
            }
            let elapsed = (clock.now - start).milliseconds / Double(count)
            print(
                jsonLine([
                    ("stage", "parse"), ("case", .string(c.name)), ("messageBytes", .int(Int64(messages[0].count))),
                    ("msPerMessage", .double((elapsed * 100).rounded() / 100)), ("outcome", .string(outcome)),
                ])
            )
        }
    }

    /// Through Kafka and one worker: from producing a job to reading its last result.
    private func measureWorker(_ stack: LocalStack) async throws {
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": stack.kafka.bootstrapServers, "linger.ms": "0", "socket.nagle.disable": "true",
                "message.max.bytes": "4194304",
            ])
        )
        let reader = try stack.resultReader(group: "bench-hostile")
        let worker = try await stack.startWorker(id: "bench")

        /// Results still expected per job id (`invalidJob` results are matched by position).
        var waiting: [String: Int] = [:]
        var waitingAt: [String: String] = [:]
        var producedAt: [String: Double] = [:]
        var answeredAt: [String: Double] = [:]
        func produce(_ messages: [(id: String, bytes: [UInt8], results: Int)]) async throws {
            let now = Date().timeIntervalSince1970 * 1000
            let reports = try await producer.send(
                messages.map {
                    KafkaOutgoingMessage(topic: "apn.requests", key: Array($0.id.utf8), value: $0.bytes)
                }
            )
            for (message, report) in zip(messages, reports) {
                let stored = try report.get()
                producedAt[message.id] = now
                waiting[message.id] = message.results
                waitingAt["\(stored.partition)@\(stored.offset)"] = message.id
            }
        }
        func read(until done: () -> Bool, timeout: Duration = .seconds(60)) async throws {
            let deadline = ContinuousClock.now + timeout
            while !done() {
                guard ContinuousClock.now < deadline else {
                    throw UsageFailure(message: "results missing after \(timeout): \(waiting.keys.sorted().prefix(5))")
                }
                for message in try await reader.poll(maxMessages: 20_000, timeout: .milliseconds(50)) {
                    guard let result = try? JSONValue.parse(message.value) else { continue }
                    let at = Date().timeIntervalSince1970 * 1000
                    var id = result["jobId"]?.stringValue
                    if result["type"] == "invalidJob", let p = result["partition"]?.intValue,
                        let o = result["offset"]?.intValue
                    {
                        id = waitingAt["\(p)@\(o)"]
                    }
                    guard let id, let left = waiting[id] else { continue }
                    answeredAt[id] = max(answeredAt[id] ?? 0, at)
                    waiting[id] = left > 1 ? left - 1 : nil
                }
            }
        }

        // Warm up: the worker joins the group and delivers one job.
        try await produce([("warmup", Self.cases[0].message("warmup"), 1)])
        try await read(until: { waiting.isEmpty })

        let parser = JobParser()
        for (n, c) in selectedCases.enumerated() {
            func message(_ i: Int, _ mode: String) -> (id: String, bytes: [UInt8], results: Int) {
                let id = "bench-\(n)-\(mode)-\(i)"
                let bytes = c.message(id)
                let results =
                    switch parser.parse(bytes) {
                    case .job(let job): job.tokens.count
                    case .rejected(_, _, let tokens, _, _, _): tokens.count
                    case .unreadable: 1
                    }
                return (id, bytes, results)
            }
            // One at a time: the answer time of a message alone.
            var alone: [Double] = []
            for i in 0..<count {
                let m = message(i, "alone")
                try await produce([m])
                try await read(until: { waiting.isEmpty })
                alone.append(answeredAt[m.id]! - producedAt[m.id]!)
            }
            // All at once, and a valid job behind them: how long the last one waits.
            let burst = (0..<count).map { message($0, "burst") }
            let behind = (id: "bench-\(n)-behind", bytes: Self.cases[0].message("bench-\(n)-behind"), results: 1)
            try await produce(burst + [behind])
            try await read(until: { waiting.isEmpty })
            let burstTimes = burst.map { answeredAt[$0.id]! - producedAt[$0.id]! }
            alone.sort()
            print(
                jsonLine([
                    ("stage", "worker"), ("case", .string(c.name)), ("messages", .int(Int64(count))),
                    ("aloneP50Ms", .int(Int64(alone[alone.count / 2]))), ("aloneMaxMs", .int(Int64(alone.last!))),
                    ("burstLastMs", .int(Int64(burstTimes.max()!))),
                    ("validBehindBurstMs", .int(Int64(answeredAt[behind.id]! - producedAt[behind.id]!))),
                ])
            )
        }
        await stack.stopWorker(worker)
        try? await reader.close()
        await producer.close()
    }
}
