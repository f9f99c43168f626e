import APNSCore
import Foundation
import PushRedis
import PushTestSupport
import PushWorker
import Testing

/// Jobs with `"summary": true` through `apn-worker run`, the embedded Kafka, a real redis-server
/// and the simulator: one `jobSummary` per job, after its token results, with the right counts,
/// also when the job is produced twice and when its worker is killed mid-job.
@Suite("Job summaries end to end", .serialized, .timeLimit(.minutes(4)))
struct JobSummaryEndToEndTests {
    typealias Result = [String: JSONValue]

    static func job(id: String, tokens: [String], summary: Bool = true) -> [UInt8] {
        let list = tokens.map { "\"\($0)\"" }.joined(separator: ",")
        return Array(
            #"{"id":"\#(id)","app":"\#(WorkerStack.app)","tokens":[\#(list)],"alert":"Hi"\#(summary ? #","summary":true"# : "")}"#
                .utf8
        )
    }

    static func summaries(_ results: [Result], of jobId: String) -> [Result] {
        results.filter { $0["type"] == "jobSummary" && $0["jobId"]?.stringValue == jobId }
    }

    /// The token results of `jobId`, by token (the last copy of each).
    static func tokenResults(_ results: [Result], of jobId: String) -> [String: Result] {
        var out: [String: Result] = [:]
        for r in results where r["jobId"]?.stringValue == jobId && r["type"] != "jobSummary" {
            if let token = r["token"]?.stringValue { out[token] = r }
        }
        return out
    }

    @Test(
        "A job with a summary gets one jobSummary with its counts, failed tokens and times (also a job for an unknown app); a job without gets none"
    )
    func aJobWithASummaryGetsOne() async throws {
        let good = (0..<20).map { DeviceToken.numbered($0, salt: 31) }
        let bad = (0..<3).map { DeviceToken.numbered($0, salt: 32) }
        // A 2 s confirmation window: the simulator's error for a bad token comes back in time to
        // resend what followed it even on a busy machine (the binary protocol confirms nothing else).
        let stack = try await WorkerStack.start(badTokens: Set(bad), confirmationWindowMs: 2000)
        do {
            try await stack.startWorker("w1")
            let tokens = good.map(\.hex) + bad.map(\.hex) + ["12zz"]
            let plain = DeviceToken.numbered(99, salt: 31)
            // A job for an app the configuration does not have: every token 517, and its summary.
            let unknownApp = Array(
                #"{"id":"elsewhere","app":"com.example.nope","tokens":["\#(good[0].hex)","\#(good[1].hex)"],"alert":"x","summary":true}"#
                    .utf8
            )
            try await stack.produce([
                Self.job(id: "plain", tokens: [plain.hex], summary: false), Self.job(id: "summed", tokens: tokens),
                unknownApp,
            ])
            // A summary is written after its job's token results, but it is read from another
            // partition (its key is the job id): wait for both.
            let results = try await stack.readResults { results in
                !Self.summaries(results, of: "summed").isEmpty && !Self.summaries(results, of: "elsewhere").isEmpty
                    && Self.tokenResults(results, of: "summed").count == 24
            }
            let summary = try #require(Self.summaries(results, of: "summed").first)
            #expect(summary["resultId"]?.stringValue == WorkerResult.summaryId(jobId: "summed"))
            #expect(summary["app"]?.stringValue == WorkerStack.app && summary["env"]?.stringValue == "production")
            #expect(summary["tokens"] == .int(24))
            #expect(
                summary["counts"]?["transmitted"] == .int(20) && summary["counts"]?["transmissionError"] == .int(4),
                "\(summary)"
            )
            let statuses = summary["statuses"]?.arrayValue ?? []
            #expect(statuses.map { $0["status"] } == [.int(8), .int(518)], "\(summary)")
            #expect(statuses.map { $0["count"] } == [.int(3), .int(1)], "\(summary)")
            let failed = summary["failedTokens"]?.arrayValue ?? []
            #expect(Set(failed.compactMap { $0["token"]?.stringValue }) == Set(bad.map(\.hex) + ["12zz"]), "\(summary)")
            #expect(failed.allSatisfy { ($0["token"] == "12zz") == ($0["statusName"] == "malformedToken") })
            #expect(summary["failedTokensOmitted"] == .int(0))
            #expect(summary["possibleDuplicate"] == .bool(false))
            // Written after every token result: its times are theirs.
            let perToken = Self.tokenResults(stack.results, of: "summed")
            #expect(perToken.count == 24)
            let times = perToken.values.compactMap { $0["at"]?.intValue }
            #expect(summary["firstAt"]?.intValue == times.min() && summary["lastAt"]?.intValue == times.max())
            #expect((summary["at"]?.intValue ?? 0) >= (times.max() ?? .max))
            // What the simulator recorded agrees.
            let accepted = stack.simulator.acceptedByToken
            #expect(good.allSatisfy { accepted[$0] == 1 } && bad.allSatisfy { accepted[$0] == nil })
            #expect(try await stack.waitForAllCommitted())
            let all = try await stack.readAllResults()
            #expect(Self.summaries(all, of: "summed").count == 1)
            #expect(Self.summaries(all, of: "plain").isEmpty)
            let elsewhere = Self.summaries(all, of: "elsewhere")
            #expect(elsewhere.count == 1)
            #expect(elsewhere.first?["app"] == "com.example.nope" && elsewhere.first?["env"] == nil)
            #expect(
                elsewhere.first?["counts"]?["transmissionError"] == .int(2)
                    && elsewhere.first?["counts"]?["transmitted"] == .int(0)
            )
            #expect(elsewhere.first?["statuses"]?.arrayValue?.map { $0["status"] } == [.int(517)])
            #expect(all.filter { $0["type"] == "jobSummary" }.count == 2)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test(
        "A dry run's summary counts its dryRun results under its own id, carries the job's metadata, and does not stand in for the real job's"
    )
    func aDryRunGetsItsOwnSummary() async throws {
        let stack = try await WorkerStack.start()
        do {
            try await stack.startWorker("w1")
            let tokens = (0..<5).map { DeviceToken.numbered($0, salt: 37) }
            let list = tokens.map { "\"\($0.hex)\"" }.joined(separator: ",")
            func job(dryRun: Bool) -> [UInt8] {
                Array(
                    #"{"id":"rehearsed","app":"\#(WorkerStack.app)","tokens":[\#(list),"12zz"],"alert":"Hi","summary":true,"metadata":{"run":"\#(dryRun ? "dry" : "real")"}\#(dryRun ? #","dryRun":true"# : "")}"#
                        .utf8
                )
            }
            try await stack.produce([job(dryRun: true)])
            _ = try await stack.readResults { Self.summaries($0, of: "rehearsed").count >= 1 }
            try await stack.produce([job(dryRun: false)])
            let results = try await stack.readResults { Self.summaries($0, of: "rehearsed").count >= 2 }
            let summaries = Self.summaries(results, of: "rehearsed")
            let dry = try #require(summaries.first { $0["dryRun"] == .bool(true) })
            let real = try #require(summaries.first { $0["dryRun"] == nil })
            #expect(dry["resultId"]?.stringValue == WorkerResult.summaryId(jobId: "rehearsed", dryRun: true))
            #expect(real["resultId"]?.stringValue == WorkerResult.summaryId(jobId: "rehearsed"))
            #expect(
                dry["tokens"] == .int(6) && dry["counts"]?["dryRun"] == .int(5)
                    && dry["counts"]?["transmissionError"] == .int(1),
                "\(dry)"
            )
            #expect(dry["metadata"]?["run"] == "dry" && real["metadata"]?["run"] == "real", "\(summaries)")
            #expect(
                real["counts"]?["transmitted"] == .int(5) && real["counts"]?["transmissionError"] == .int(1),
                "\(real)"
            )
            // Only the real job reached the gateway, each token once.
            let accepted = stack.simulator.acceptedByToken
            #expect(tokens.allSatisfy { accepted[$0] == 1 })
            #expect(try await stack.waitForAllCommitted())
            #expect(Self.summaries(try await stack.readAllResults(), of: "rehearsed").count == 2)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("The same job produced twice, at once and after its summary, gets one summary and is sent once")
    func theSameJobTwiceGetsOneSummary() async throws {
        let stack = try await WorkerStack.start()
        do {
            try await stack.startWorker("w1")
            try await stack.startWorker("w2")
            let tokens = (0..<200).map { DeviceToken.numbered($0, salt: 33) }
            let job = Self.job(id: "twice", tokens: tokens.map(\.hex))
            try await stack.produce([job, job])
            try await stack.readResults { !Self.summaries($0, of: "twice").isEmpty }
            // And once more, after the summary was written, with a marker job behind it.
            try await stack.produce([job, Self.job(id: "marker", tokens: [DeviceToken.numbered(500, salt: 33).hex])])
            try await stack.readResults {
                !Self.summaries($0, of: "marker").isEmpty && Self.tokenResults($0, of: "twice").count == 200
            }
            #expect(try await stack.waitForAllCommitted())
            let results = try await stack.readAllResults()
            let summaries = Self.summaries(results, of: "twice")
            #expect(summaries.count == 1, "\(summaries)")
            #expect(summaries.first?["tokens"] == .int(200) && summaries.first?["counts"]?["transmitted"] == .int(200))
            #expect(tokens.allSatisfy { stack.simulator.acceptedByToken[$0] == 1 })
            let ids = results.filter { $0["jobId"]?.stringValue == "twice" }.compactMap { $0["resultId"]?.stringValue }
            #expect(ids.count == Set(ids).count, "a result of the job was written twice")
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }

    @Test(
        "A worker killed with SIGKILL mid-job: every job's summary is still written, once or flagged possibleDuplicate"
    )
    func aKilledWorkersJobsStillGetTheirSummaries() async throws {
        let stack = try await WorkerStack.start(confirmationWindowMs: 1000)
        do {
            try await stack.startWorker("w1")
            try await stack.startWorker("w2")
            let jobs = (0..<8).map { j in ("killed-\(j)", (0..<1000).map { DeviceToken.numbered($0, salt: 40 + j) }) }
            try await stack.produce(jobs.map { Self.job(id: $0.0, tokens: $0.1.map(\.hex)) })
            // Kill a worker while it holds claimed, unconfirmed notifications of a job: a claim
            // of a message not yet before its written position.
            let redis = try await RedisConnection.connect(stack.redis.configuration())
            var victim: String?
            let deadline = ContinuousClock.now + .seconds(60)
            while victim == nil, ContinuousClock.now < deadline {
                victim = try await WorkerEndToEndTests.claimingWorker(redis)
            }
            await redis.close()
            let killed = try #require(victim)
            await stack.killWorker(killed)
            let results = try await stack.readResults(timeout: .seconds(120)) { results in
                // Token results and summaries are read from different partitions: wait for both.
                jobs.allSatisfy {
                    !Self.summaries(results, of: $0.0).isEmpty
                        && Self.tokenResults(results, of: $0.0).count == $0.1.count
                }
            }
            for (id, tokens) in jobs {
                let summaries = Self.summaries(results, of: id)
                #expect(!summaries.isEmpty, "\(id) has no summary")
                #expect(
                    summaries.count == 1 || summaries.contains { $0["possibleDuplicate"] == .bool(true) },
                    "\(id): \(summaries)"
                )
                for summary in summaries {
                    #expect(
                        summary["tokens"] == .int(1000) && summary["counts"]?["transmitted"] == .int(1000),
                        "\(id): \(summary)"
                    )
                }
                let perToken = Self.tokenResults(results, of: id)
                #expect(
                    tokens.allSatisfy { perToken[$0.hex]?["type"] == "transmitted" },
                    "\(id): a token has no result"
                )
                // A job the killed worker was sending when it died is summarised by the other.
                if perToken.values.contains(where: { $0["possibleDuplicate"] == .bool(true) }) {
                    #expect(summaries.allSatisfy { $0["worker"]?.stringValue != killed }, "\(id): \(summaries)")
                }
                #expect(tokens.allSatisfy { (stack.simulator.acceptedByToken[$0] ?? 0) >= 1 })
            }
            #expect(try await stack.waitForAllCommitted())
            // The premise: the killed worker had claimed notifications that the other took over.
            #expect(
                results.contains { $0["possibleDuplicate"] == .bool(true) && $0["type"] != "jobSummary" },
                "\(killed) had nothing in flight"
            )
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }

    @Test(
        "A worker stopped with SIGTERM mid-job hands its jobs over: one summary each, and it stops without waiting out its timeout"
    )
    func aStoppedWorkersJobsGetOneSummaryEach() async throws {
        // 500 notifications per second per app: at the stop, most of them wait unclaimed, and go
        // back with their messages.
        let stack = try await WorkerStack.start(appPerSecond: 500)
        do {
            try await stack.startWorker("w1")
            try await stack.startWorker("w2")
            let jobs = (0..<4).map { j in ("stopped-\(j)", (0..<1000).map { DeviceToken.numbered($0, salt: 60 + j) }) }
            try await stack.produce(jobs.map { Self.job(id: $0.0, tokens: $0.1.map(\.hex)) })
            try await stack.readResults { $0.count >= 500 }
            #expect(await stack.stopWorker("w1") == 0)
            // Every summary place it held was settled or given back: nothing kept it waiting.
            #expect(!stack.fullLog(of: "w1").contains("Shutdown timeout reached"), "\(stack.log(of: "w1"))")
            let results = try await stack.readResults(timeout: .seconds(120)) { results in
                // Token results and summaries are read from different partitions: wait for both.
                jobs.allSatisfy {
                    !Self.summaries(results, of: $0.0).isEmpty
                        && Self.tokenResults(results, of: $0.0).count == $0.1.count
                }
            }
            #expect(try await stack.waitForAllCommitted())
            let all = try await stack.readAllResults()
            for (id, tokens) in jobs {
                let summaries = Self.summaries(all, of: id)
                #expect(summaries.count == 1, "\(id): \(summaries)")
                #expect(
                    summaries.first?["tokens"] == .int(1000) && summaries.first?["counts"]?["transmitted"] == .int(1000)
                )
                #expect(summaries.first?["possibleDuplicate"] == .bool(false))
                let perToken = Self.tokenResults(results, of: id)
                #expect(
                    tokens.allSatisfy { perToken[$0.hex]?["type"] == "transmitted" },
                    "\(id): a token has no result"
                )
            }
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }
}
