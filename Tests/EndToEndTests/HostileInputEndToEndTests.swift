import APNSCore
import Foundation
import PushKafka
import PushTestSupport
import PushWorker
import Testing

/// Bad, oversized and hostile jobs through `apn-worker run`, mixed with valid ones.
@Suite("Hostile input end to end", .serialized, .timeLimit(.minutes(4)))
struct HostileInputEndToEndTests {
    /// Every small kind of ``HostileJobs`` this many times, the large ones (up to 1 MiB each) a
    /// few times, shuffled. The embedded broker (librdkafka's mock cluster) keeps only about the
    /// newest 5 MiB of each partition and drops older message sets unread, so the mix stays well
    /// under that per partition.
    static let perKind = 20
    static let large: [HostileJobs.Kind: Int] = [
        .tooManyTokens: 2, .oneMiB: 2, .overLimit: 2, .hugeStrings: 3, .bigAlert: 3,
    ]
    /// How long after it was produced a message may wait for its results: the bound tells a
    /// message that hangs or stalls the worker (what hostile input must never do) from one
    /// answered slowly on a loaded machine. Generous: the whole mix (about 8 MB) is produced at
    /// once on two shared cores, and valid jobs wait for the 200 ms confirmation window; how
    /// fast the worker answers is measured by `apn-bench hostile` (docs/benchmarks.md), not here.
    static let deadline: Duration = .seconds(30)

    @Test(
        "Every message of a hostile mix is answered within the deadline, valid jobs are delivered, the worker stays up"
    )
    func everyHostileMessageIsAnswered() async throws {
        let stack = try await WorkerStack.start(confirmationWindowMs: 200)
        do {
            try await stack.startWorker("w1")
            // The worker has its partitions (the first join takes seconds) once a job is answered.
            let first = DeviceToken.numbered(6, salt: 7)
            let firstId = WorkerResult.notificationId(jobId: "before-the-storm", token: first.hex)
            try await stack.produce([WorkerStack.job(id: "before-the-storm", tokens: [first])])
            try await stack.readResults(timeout: .seconds(60)) {
                $0.contains { $0["resultId"]?.stringValue == firstId }
            }
            var rng = SeededGenerator(seed: 2026)
            let mix = HostileJobs.Kind.allCases
                .flatMap { kind in (0..<(Self.large[kind] ?? Self.perKind)).map { (kind: kind, index: $0) } }
                .shuffled(using: &rng)
                .map {
                    (
                        kind: $0.kind, index: $0.index,
                        bytes: HostileJobs.make($0.kind, index: $0.index, app: WorkerStack.app)
                    )
                }
            let producedAt = Date().timeIntervalSince1970 * 1000
            let stored = try await stack.produce(mix.map(\.bytes))

            // What each message must get, from the parser the worker uses: one invalidJob result
            // naming the message, or one result per token of the job.
            let parser = JobParser()
            var expected:
                [(
                    kind: HostileJobs.Kind, report: KafkaDeliveryReport, invalidAt: KafkaDeliveryReport?,
                    resultIds: Set<String>
                )] =
                    []
            var valid: [String: DeviceToken] = [:]  // resultId → token
            for (message, report) in zip(mix, stored) {
                switch parser.parse(message.bytes) {
                case .unreadable:
                    expected.append((message.kind, report, report, []))
                case .rejected(let jobId, _, let tokens, _, _, _):
                    expected.append(
                        (
                            message.kind, report, nil,
                            Set(tokens.map { WorkerResult.notificationId(jobId: jobId, token: $0) })
                        )
                    )
                case .job(let job):
                    expected.append(
                        (
                            message.kind, report, nil,
                            Set(job.tokens.map { WorkerResult.notificationId(jobId: job.id, token: $0.text) })
                        )
                    )
                    // Sendable: a configured app and environment and a payload that fits (a
                    // flipped byte may leave a job valid, or change its app).
                    if job.payloadError == nil, job.app == WorkerStack.app,
                        (job.environment ?? "production") == "production"
                    {
                        for case .valid(let token, _) in job.tokens {
                            valid[WorkerResult.notificationId(jobId: job.id, token: token.hex)] = token
                        }
                    }
                }
            }
            #expect(
                Set(mix.filter { $0.kind == .valid || $0.kind == .bigAlert }.map { HostileJobs.token($0.index) })
                    .isSubset(of: Set(valid.values.map(\.hex))),
                "the parser no longer accepts the valid jobs of the mix"
            )

            func answers(_ results: [[String: JSONValue]]) -> (answeredAt: [Int64?], all: Bool) {
                var byId: [String: Int64] = [:]
                var invalidAt: [String: Int64] = [:]
                for r in results {
                    let at = r["at"]?.intValue ?? 0
                    if r["type"] == "invalidJob", let p = r["partition"]?.intValue, let o = r["offset"]?.intValue {
                        invalidAt["\(p)@\(o)"] = at
                    } else if let id = r["resultId"]?.stringValue {
                        byId[id] = at
                    }
                }
                let times = expected.map { e -> Int64? in
                    if let report = e.invalidAt { return invalidAt["\(report.partition)@\(report.offset)"] }
                    let ats = e.resultIds.map { byId[$0] }
                    return ats.contains(nil) ? nil : ats.compactMap { $0 }.max()
                }
                return (times, !times.contains(nil))
            }
            let results = try await stack.readResults(timeout: .seconds(120)) { answers($0).all }
            let answeredAt = answers(results).answeredAt

            var unanswered: [HostileJobs.Kind: Int] = [:]
            var unansweredAt: [String] = []
            var late: [String] = []
            var slowest: [HostileJobs.Kind: Double] = [:]
            for (e, at) in zip(expected, answeredAt) {
                guard let at else {
                    unanswered[e.kind, default: 0] += 1
                    unansweredAt.append("\(e.kind.rawValue) \(e.report.partition)@\(e.report.offset)")
                    continue
                }
                let waited = Double(at) - producedAt
                slowest[e.kind] = max(slowest[e.kind] ?? 0, waited)
                if waited > Self.deadline.milliseconds { late.append("\(e.kind.rawValue): \(Int(waited)) ms") }
            }
            #expect(
                unanswered.isEmpty,
                "messages without all their results, by kind: \(unanswered); \(unansweredAt.prefix(20))"
            )
            #expect(late.isEmpty, "answered later than \(Self.deadline) after being produced: \(late.prefix(10))")
            let slowestText = slowest.sorted { $0.value > $1.value }.prefix(5).map {
                "\($0.key.rawValue) \(Int($0.value)) ms"
            }
            print("hostile mix: \(mix.count) messages, slowest answers after producing: \(slowestText)")

            // The valid jobs (and the trimmed big alerts) are delivered once each.
            // A flipped byte that changes nothing leaves a second copy of a valid job: a duplicate,
            // sent once. A token may be in two different valid jobs.
            let accepted = stack.simulator.acceptedByToken
            let sent = Dictionary(valid.values.map { ($0, 1) }, uniquingKeysWith: +)
            let undelivered = sent.filter { accepted[$0.key] != $0.value }
            #expect(undelivered.isEmpty, "\(undelivered.count) of \(sent.count) valid tokens not accepted once per job")
            let transmitted = Set(
                results.filter { $0["type"] == "transmitted" }.compactMap { $0["resultId"]?.stringValue }
            )
            #expect(transmitted.subtracting([firstId]) == Set(valid.keys))

            // Still up: one more job is delivered, and the worker stops cleanly.
            let after = DeviceToken.numbered(7, salt: 7)
            try await stack.produce([WorkerStack.job(id: "after-the-storm", tokens: [after])])
            let afterId = WorkerResult.notificationId(jobId: "after-the-storm", token: after.hex)
            let final = try await stack.readResults(timeout: .seconds(30)) {
                $0.contains { $0["resultId"]?.stringValue == afterId }
            }
            #expect(final.contains { $0["resultId"]?.stringValue == afterId && $0["type"] == "transmitted" })
            #expect(try await stack.waitForAllCommitted())
            #expect(await stack.stopWorker("w1") == 0)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}

extension HostileInputEndToEndTests {
    @Test("A result the producer refuses as too large is logged and skipped; the results behind it are written")
    func resultTooLargeForTheProducerIsSkipped() async throws {
        // Results of valid and invalid jobs are a few hundred bytes; this one is over 1,000.
        let stack = try await WorkerStack.start(kafkaProperties: ["message.max.bytes": "1000"])
        do {
            try await stack.startWorker("w1")
            let long = String(repeating: "q", count: 600)
            let big = Array(
                #"{"id":"\#(String(repeating: "j", count: 256))","app":"\#(long)","token":"\#(long)","alert":"x"}"#.utf8
            )
            let after = DeviceToken.numbered(3, salt: 3)
            let afterId = WorkerResult.notificationId(jobId: "behind-the-big-result", token: after.hex)
            try await stack.produce([big, WorkerStack.job(id: "behind-the-big-result", tokens: [after])])
            let results = try await stack.readResults(timeout: .seconds(60)) {
                $0.contains { $0["resultId"]?.stringValue == afterId }
            }
            #expect(results.contains { $0["resultId"]?.stringValue == afterId && $0["type"] == "transmitted" })
            #expect(!results.contains { $0["jobId"]?.stringValue?.hasPrefix("jjj") == true })
            #expect(try await stack.waitForAllCommitted())
            #expect(await stack.stopWorker("w1") == 0)
            #expect(
                stack.fullLog(of: "w1").contains("A result is over the producer's message.max.bytes and is not written")
            )
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}

extension Duration {
    fileprivate var milliseconds: Double {
        Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15
    }
}
