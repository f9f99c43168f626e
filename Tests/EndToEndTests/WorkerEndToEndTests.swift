import APNSBinary
import APNSCore
import Foundation
import PushKafka
import PushRedis
import PushStatus
import PushTestSupport
import PushWorker
import Testing

/// `apn-worker run` processes against the embedded Kafka, a real redis-server and the simulator.
@Suite("Worker end to end", .serialized, .timeLimit(.minutes(4)))
struct WorkerEndToEndTests {
    typealias Result = [String: JSONValue]

    /// The notifications of `jobs` (id, tokens) keyed by resultId.
    static func expectedIds(_ jobs: [(String, [DeviceToken])]) -> [String: (jobId: String, token: DeviceToken)] {
        var out: [String: (String, DeviceToken)] = [:]
        for (id, tokens) in jobs {
            for token in tokens { out[WorkerResult.notificationId(jobId: id, token: token.hex)] = (id, token) }
        }
        return out
    }

    /// Checks the exactly-once promise for valid notifications: each has a result, and the
    /// simulator accepted it once — more than once only if its result says `possibleDuplicate`.
    static func checkDelivered(
        _ expected: [String: (jobId: String, token: DeviceToken)],
        bad: Set<DeviceToken>,
        stack: WorkerStack,
        allowPossibleDuplicates: Bool
    ) {
        let byId = stack.resultsById
        let accepted = stack.acceptedByToken
        var missing = 0
        var wrong: [String] = []
        for (id, notification) in expected {
            guard let result = byId[id] else {
                missing += 1
                continue
            }
            let count = accepted[notification.token] ?? 0
            if bad.contains(notification.token) {
                if result["type"] != "transmissionError" || result["status"] != .int(8) {
                    wrong.append("\(notification.jobId): \(result)")
                }
                if count != 0 { wrong.append("\(notification.jobId): rejected token accepted \(count) times") }
            } else {
                if result["type"] != "transmitted" { wrong.append("\(notification.jobId): \(result)") }
                let flagged = result["possibleDuplicate"] == .bool(true)
                if count == 0 || (count > 1 && !(allowPossibleDuplicates && flagged)) {
                    wrong.append("\(notification.jobId): accepted \(count) times, possibleDuplicate \(flagged)")
                }
            }
        }
        #expect(missing == 0, "notifications without a result: \(missing)")
        #expect(wrong.isEmpty, "\(wrong.count) wrong, e.g. \(wrong.prefix(5))")
    }

    @Test("10,000 jobs through 3 workers: one result each, each valid notification accepted once")
    func tenThousandJobsThroughThreeWorkers() async throws {
        let bad = Set((0..<10_000).filter { $0 % 100 == 13 }.map { DeviceToken.numbered($0) })
        // A 2 s confirmation window: the binary protocol confirms nothing but errors, so a
        // simulator starved of CPU by the tests around it for longer than the window would have
        // notifications taken as transmitted before it read them (seen once with 200 ms in a
        // full parallel run: about 120 of one batch after a bad token, not yet read by the simulator).
        let stack = try await WorkerStack.start(badTokens: bad, confirmationWindowMs: 2000)
        do {
            for id in ["w1", "w2", "w3"] { try await stack.startWorker(id) }
            var jobs: [(String, [DeviceToken])] = []
            var messages: [[UInt8]] = []
            var invalidMessages = 0
            for i in 0..<10_000 {
                let tokens =
                    i % 250 == 0 ? [DeviceToken.numbered(i), .numbered(i, salt: 1)] : [DeviceToken.numbered(i)]
                jobs.append(("job-\(i)", tokens))
                messages.append(WorkerStack.job(id: "job-\(i)", tokens: tokens, alert: "Hello \(i)"))
                if i % 500 == 0 { messages.append(messages.last!) }  // the same job twice, back to back
                if i % 1000 == 500 {
                    messages.append(Array("not json at all".utf8))
                    messages.append(
                        Array(#"{"id":"missing-tokens-\#(i)","app":"\#(WorkerStack.app)","alert":"x"}"#.utf8)
                    )
                    invalidMessages += 2
                }
            }
            try await stack.produce(messages)
            let expected = Self.expectedIds(jobs)
            let results = try await stack.readResults(timeout: .seconds(150)) { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count + invalidMessages
            }
            Self.checkDelivered(expected, bad: bad, stack: stack, allowPossibleDuplicates: false)
            let invalid = results.filter { $0["type"] == "invalidJob" }
            #expect(invalid.count == invalidMessages)
            #expect(invalid.allSatisfy { $0["status"] == .int(517) && $0["offset"]?.intValue != nil })
            // No crash: not a single repeated result, even when the workers' first rebalances
            // hand partitions on without a commit (the hand-off marks cover them). Counted on
            // everything written once every offset is committed, not on what was read so far.
            #expect(try await stack.waitForAllCommitted(), "offsets not committed to the end")
            let written = try await stack.readAllResults()
            let ids = written.compactMap { $0["resultId"]?.stringValue }
            #expect(ids.count == Set(ids).count, "repeated results: \(ids.count - Set(ids).count)")
            #expect(
                results.allSatisfy { r in
                    r["type"] == "invalidJob"
                        || r["worker"].map { ["w1", "w2", "w3"].contains($0.stringValue ?? "") } == true
                }
            )
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("The same job produced twice, before and after it was sent, is sent once with one result")
    func duplicateJobsAreSentOnce() async throws {
        let stack = try await WorkerStack.start()
        do {
            try await stack.startWorker("w1")
            let a = DeviceToken.numbered(1), b = DeviceToken.numbered(2), c = DeviceToken.numbered(3)
            let jobA = WorkerStack.job(id: "dup-a", tokens: [a]), jobB = WorkerStack.job(id: "dup-b", tokens: [b])
            try await stack.produce([jobA, jobA, jobB])
            let idA = WorkerResult.notificationId(jobId: "dup-a", token: a.hex)
            let idB = WorkerResult.notificationId(jobId: "dup-b", token: b.hex)
            let idC = WorkerResult.notificationId(jobId: "marker", token: c.hex)
            try await stack.readResults { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).isSuperset(of: [idA, idB])
            }
            // Both were sent; now the same jobs again, then a marker job behind them.
            try await stack.produce([jobB, jobA, WorkerStack.job(id: "marker", tokens: [c])])
            try await stack.readResults { results in
                results.contains { $0["resultId"]?.stringValue == idC }
            }
            #expect(try await stack.waitForAllCommitted())
            let results = try await stack.readAllResults()
            #expect(results.filter { $0["resultId"]?.stringValue == idA }.count == 1)
            #expect(results.filter { $0["resultId"]?.stringValue == idB }.count == 1)
            #expect(stack.simulator.acceptedByToken[a] == 1)
            #expect(stack.simulator.acceptedByToken[b] == 1)
            #expect(stack.simulator.acceptedByToken[c] == 1)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test(
        "A worker stopped while the broker refuses its commits: the next owner skips what it wrote and writes no result twice"
    )
    func aHandOverWithoutACommitWritesNoResultTwice() async throws {
        let stack = try await WorkerStack.start()
        do {
            // Every commit fails, as during a rebalance on a busy coordinator: w1 hands its
            // partitions on without one, and its successor consumes them from the start.
            stack.kafka.refuseOffsetCommits()
            try await stack.startWorker("w1")
            var jobs: [(String, [DeviceToken])] = []
            var messages: [[UInt8]] = []
            for i in 0..<600 {
                jobs.append(("handoff-\(i)", [DeviceToken.numbered(i)]))
                messages.append(WorkerStack.job(id: "handoff-\(i)", tokens: [.numbered(i)]))
                if i % 20 == 0 { messages.append(Array("not a job \(i)".utf8)) }
            }
            let invalid = messages.count - jobs.count
            try await stack.produce(messages)
            let expected = Self.expectedIds(jobs)
            try await stack.readResults {
                Set($0.compactMap { $0["resultId"]?.stringValue }).count >= expected.count + invalid
            }
            let first = await stack.stopWorkerReporting("w1")
            #expect(first.status == 0)
            #expect(stack.fullLog(of: "w1").contains("leaving hand-off marks"), "w1's commits were not refused")
            stack.kafka.acceptOffsetCommits()

            try await stack.startWorker("w2")
            let marker = DeviceToken.numbered(10_000)
            try await stack.produce([WorkerStack.job(id: "handoff-marker", tokens: [marker])])
            let markerId = WorkerResult.notificationId(jobId: "handoff-marker", token: marker.hex)
            try await stack.readResults { $0.contains { $0["resultId"]?.stringValue == markerId } }
            #expect(try await stack.waitForAllCommitted())
            let results = try await stack.readAllResults()
            // Operators see the skip in the metrics too.
            let metrics = try await #require(stack.statusServers["w2"]).get("/metrics").text
            #expect(
                MetricSamples(parsing: metrics).total("apn_worker_messages_skipped_total") == Double(messages.count)
            )
            let second = await stack.stopWorkerReporting("w2")
            #expect(
                second.report?["skipped"]?.intValue == Int64(messages.count),
                "\(String(describing: second.report))"
            )

            Self.checkDelivered(expected, bad: [], stack: stack, allowPossibleDuplicates: false)
            let ids = results.compactMap { $0["resultId"]?.stringValue }
            #expect(ids.count == Set(ids).count, "repeated results: \(ids.count - Set(ids).count)")
            #expect(results.filter { $0["type"] == "invalidJob" }.count == invalid)
            #expect(stack.simulator.acceptedByToken[marker] == 1)
        } catch {
            Issue.record("\(error)\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }

    /// The messages ``claimingWorker(_:)`` recognises, by their names in claims.
    private static let messages: [[UInt8]: (partition: Int32, offset: Int64)] = {
        var messages: [[UInt8]: (partition: Int32, offset: Int64)] = [:]
        for partition in Int32(0)..<64 {
            for offset in Int64(0)..<10_000 {
                messages[ClaimNames.message(topic: "apn.requests", partition: partition, offset: offset)] =
                    (partition, offset)
            }
        }
        return messages
    }()

    /// A worker that holds a claim now: the first claim (`RedisKeys`, `c:`) of a live worker
    /// whose message is not before its partition's written position (`pw:`), `nil` when none
    /// holds one. A claim names its owner and its message by 8-byte keys
    /// (`ClaimNames`); the messages looked for are those of `apn.requests` up to partition 63
    /// and offset 9,999.
    static func claimingWorker(_ redis: RedisConnection) async throws -> String? {
        var owners: [[UInt8]: String] = [:]
        for key in try await redis.send(["KEYS", "apn:w:*"]).array?.compactMap(\.string) ?? []
        where !key.hasPrefix("apn:w:#") {
            let name = String(key.dropFirst("apn:w:".count))
            owners[ClaimNames.owner(name)] = name
        }
        guard !owners.isEmpty else { return nil }
        let messages = Self.messages
        var positions: [Int32: Int64] = [:]
        let keys = try await redis.send(["KEYS", "apn:c:*"]).array?.compactMap(\.string) ?? []
        for key in keys.prefix(200) {
            for state in try await redis.send(["HVALS", key]).array?.compactMap(\.bytes) ?? [] where state.count == 16 {
                guard let owner = owners[Array(state[0..<8])], let message = messages[Array(state[8..<16])] else {
                    continue
                }
                if positions[message.partition] == nil {
                    positions[message.partition] =
                        try await redis.send(["GET", "apn:pw:apn.requests:\(message.partition)"]).int ?? -1
                }
                if message.offset >= positions[message.partition]! {
                    return owner.split(separator: "#").first.map(String.init)
                }
            }
        }
        return nil
    }

    @Test("A worker killed with SIGKILL mid-stream and restarted: nothing lost, nothing sent twice unless flagged")
    func killedWorkerLosesNothing() async throws {
        let stack = try await WorkerStack.start(confirmationWindowMs: 1000)
        do {
            for id in ["w1", "w2", "w3"] { try await stack.startWorker(id) }
            let jobs = (0..<6000).map { ("kill-\($0)", [DeviceToken.numbered($0)]) }
            try await stack.produce(jobs.map { WorkerStack.job(id: $0.0, tokens: $0.1) })
            // Kill a worker while it holds claimed, unconfirmed notifications (the window is 1 s):
            // find one in Redis, a claim of a message not yet before its written position.
            let redis = try await RedisConnection.connect(stack.redis.configuration())
            var victim: String?
            let deadline = ContinuousClock.now + .seconds(60)
            while victim == nil, ContinuousClock.now < deadline {
                victim = try await WorkerEndToEndTests.claimingWorker(redis)
            }
            await redis.close()
            let killed = try #require(victim)
            await stack.killWorker(killed)
            let killedShare = stack.results.filter { $0["worker"]?.stringValue == killed }.count
            try await stack.startWorker(killed)
            let expected = Self.expectedIds(jobs)
            try await stack.readResults(timeout: .seconds(120)) { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count
            }
            Self.checkDelivered(expected, bad: [], stack: stack, allowPossibleDuplicates: true)
            #expect(try await stack.waitForAllCommitted())
            // The premise: the killed worker had claimed notifications that the others took over.
            let flagged = stack.results.filter { $0["possibleDuplicate"] == .bool(true) }.count
            #expect(
                flagged > 0,
                "\(killed) had nothing in flight when it was killed (\(killedShare) results read from it)"
            )
        } catch {
            Issue.record("\(error)\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }

    @Test(
        "A worker stopped while Redis is down: its drain ends at the shutdown timeout, it leaves without waiting more, and nothing is lost"
    )
    func aStopThatReachesItsTimeoutLeavesAtOnce() async throws {
        // A 5 s confirmation window: what the worker sends is still unconfirmed when Redis goes.
        let stack = try await WorkerStack.start(confirmationWindowMs: 5000)
        do {
            try await stack.startWorker("w1", environment: ["APN_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "2"])
            let jobs = (0..<50).map { ("stuck-\($0)", [DeviceToken.numbered($0)]) }
            try await stack.produce(jobs.map { WorkerStack.job(id: $0.0, tokens: $0.1) })
            let sent = await eventually("every notification sent", every: .milliseconds(50)) {
                stack.simulator.acceptedByToken.values.reduce(0, +) >= jobs.count
            }
            #expect(sent, "the worker did not send the notifications")
            // Their outcomes can no longer be recorded, so their results cannot be written.
            await stack.redis.stop()
            let stopping = ContinuousClock.now
            let stopped = await stack.stopWorkerReporting("w1")
            let took = ContinuousClock.now - stopping
            let log = stack.fullLog(of: "w1")
            #expect(stopped.status == 0)
            #expect(
                log.contains("Shutdown timeout reached"),
                "the premise: the drain could not finish\n\(log.suffix(4000))"
            )
            // The consumer's close revokes the partitions; it used to wait 20 s more for results
            // the ended writer would never write.
            #expect(!log.contains("Revoked partitions still had notifications in flight"), "\(log.suffix(4000))")
            #expect(took < .seconds(15), "stopping took \(took)")

            try await stack.redis.start()
            try await stack.startWorker("w2")
            let expected = Self.expectedIds(jobs)
            try await stack.readResults(timeout: .seconds(120)) { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count
            }
            Self.checkDelivered(expected, bad: [], stack: stack, allowPossibleDuplicates: true)
            #expect(try await stack.waitForAllCommitted())
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }

    @Test("Redis stopped for a few seconds mid-stream: consumption pauses and resumes, nothing lost or sent twice")
    func redisOutage() async throws {
        let stack = try await WorkerStack.start()
        do {
            for id in ["w1", "w2"] { try await stack.startWorker(id) }
            let jobs = (0..<4000).map { ("redis-\($0)", [DeviceToken.numbered($0)]) }
            let messages = jobs.map { WorkerStack.job(id: $0.0, tokens: $0.1) }
            try await stack.produce(Array(messages[..<2000]))
            try await stack.readResults { $0.count >= 1000 }
            await stack.redis.stop()
            try await stack.produce(Array(messages[2000...]))
            // The outage itself: the workers must hold everything meanwhile.
            try await Task.sleep(for: .seconds(3))
            try await stack.redis.start()
            let expected = Self.expectedIds(jobs)
            try await stack.readResults(timeout: .seconds(120)) { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count
            }
            Self.checkDelivered(expected, bad: [], stack: stack, allowPossibleDuplicates: false)
            #expect(
                stack.fullLog(of: "w1").contains("consumption paused")
                    || stack.fullLog(of: "w2").contains("consumption paused")
            )
            #expect(try await stack.waitForAllCommitted())
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("A fourth worker joining mid-stream: nothing lost, nothing sent twice unless flagged")
    func rebalanceMidStream() async throws {
        let stack = try await WorkerStack.start()
        do {
            for id in ["w1", "w2", "w3"] { try await stack.startWorker(id) }
            func jobs(_ range: Range<Int>) -> [(String, [DeviceToken])] {
                range.map { ("rebalance-\($0)", [DeviceToken.numbered($0)]) }
            }
            var produced = jobs(0..<2000)
            try await stack.produce(produced.map { WorkerStack.job(id: $0.0, tokens: $0.1) })
            try await stack.readResults { $0.count >= 2000 }
            try await stack.startWorker("w4")
            // The stream goes on while the fourth worker joins: 250 jobs at a time, each chunk
            // answered before the next, until it has written results of its own (and at least
            // 8,000 jobs in all). Three workers would otherwise finish a backlog before the
            // rebalance that gives it partitions.
            func fourthHasWritten() -> Bool { stack.results.contains { $0["worker"]?.stringValue == "w4" } }
            while produced.count < 8000 || !fourthHasWritten(), produced.count < 40_000 {
                let chunk = jobs(produced.count..<produced.count + 250)
                produced += chunk
                try await stack.produce(chunk.map { WorkerStack.job(id: $0.0, tokens: $0.1) })
                let answered = Set(Self.expectedIds(chunk).keys)
                try await stack.readResults(timeout: .seconds(60)) { results in
                    answered.isSubset(of: results.compactMap { $0["resultId"]?.stringValue })
                }
            }
            #expect(fourthHasWritten(), "the fourth worker wrote no result: it never took a partition mid-stream")
            let expected = Self.expectedIds(produced)
            try await stack.readResults(timeout: .seconds(120)) { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count
            }
            Self.checkDelivered(expected, bad: [], stack: stack, allowPossibleDuplicates: true)
            #expect(try await stack.waitForAllCommitted())
            let results = try await stack.readAllResults()
            let flagged = results.filter { $0["possibleDuplicate"] == .bool(true) }.count
            #expect(flagged <= 100, "a rebalance should hand over almost everything cleanly, \(flagged) flagged")
        } catch {
            Issue.record("\(error)\nw4: \(stack.log(of: "w4"))")
        }
        await stack.shutdown()
    }
}
