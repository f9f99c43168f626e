import APNSCore
import Foundation
import PushKafka
import PushTestSupport
import PushWorker
import Testing

/// Messages and answers that used to stop every worker that met them, through `apn-worker run`
/// and Kafka: each gets its result, the worker stays up, and the jobs after it are delivered;
/// and the stop guard, the last line of defence, skipping a message that keeps stopping workers.
@Suite("Poisoned input end to end", .serialized, .timeLimit(.minutes(6)))
struct PoisonEndToEndTests {
    /// Results of `ids`' single tokens, by job id, once every one is read (or the time is up).
    static func results(
        _ stack: WorkerStack,
        _ jobs: [(id: String, token: DeviceToken)],
        timeout: Duration = .seconds(90),
        orUntil stop: @escaping () -> Bool = { false }
    ) async throws -> [String: [String: JSONValue]] {
        let wanted = Dictionary(
            uniqueKeysWithValues: jobs.map { (WorkerResult.notificationId(jobId: $0.id, token: $0.token.hex), $0.id) }
        )
        let results = try await stack.readResults(timeout: timeout) { results in
            stop() || Set(results.compactMap { $0["resultId"]?.stringValue }).isSuperset(of: wanted.keys)
        }
        var byJob: [String: [String: JSONValue]] = [:]
        for result in results {
            if let id = result["resultId"]?.stringValue, let job = wanted[id] { byJob[job] = result }
        }
        return byJob
    }

    @Test(
        "Kafka timestamps no clock gives (near the largest and smallest 64-bit values, negative, past 9999) make their jobs invalid; the worker stays up and delivers the jobs after them"
    )
    func poisonedTimestampsAreAnswered() async throws {
        // Every job has a staleAfter (its app's): each timestamp goes through the stale deadline.
        let stack = try await WorkerStack.start(appSettings: ["staleAfter: 60"])
        do {
            try await stack.startWorker("w1")
            let cases: [(id: String, timestamp: Int64?, status: String)] = [
                ("ts-max", .max - 1_000, "invalidJob"),
                ("ts-largest", .max, "invalidJob"),
                ("ts-min", .min + 5, "invalidJob"),
                ("ts-negative", -5, "invalidJob"),
                ("ts-past-9999", 253_402_300_800_000, "invalidJob"),
                // A valid time, long before the job's staleAfter: expired, not sent.
                ("ts-1970", 1_000, "expired"),
            ]
            let poisoned = cases.enumerated().map { (id: $1.id, token: DeviceToken.numbered($0, salt: 41)) }
            let after = (0..<20).map { (id: "after-\($0)", token: DeviceToken.numbered($0, salt: 42)) }
            let all = poisoned + after
            // All in one partition, the poisoned first: the jobs after them wait behind them.
            try await stack.produce(
                all.map { WorkerStack.job(id: $0.id, tokens: [$0.token]) },
                key: "one-partition",
                timestamps: cases.map(\.timestamp) + after.map { _ in nil }
            )
            let results = try await Self.results(stack, all)
            for (index, expected) in cases.enumerated() {
                let result = results[expected.id]
                #expect(result?["statusName"]?.stringValue == expected.status, "\(expected.id): \(result ?? [:])")
                if expected.status == "invalidJob" {
                    #expect(
                        result?["reason"]?.stringValue?.contains("Kafka timestamp") == true,
                        "\(expected.id): \(result ?? [:])"
                    )
                }
                #expect(stack.acceptedByToken[poisoned[index].token] == nil, "\(expected.id) was sent")
            }
            for job in after {
                #expect(results[job.id]?["type"]?.stringValue == "transmitted", "\(job.id): \(results[job.id] ?? [:])")
            }
            #expect(stack.workers["w1"]?.isRunning == true, "the worker stopped: \(stack.log(of: "w1"))")
            #expect(!stack.fullLog(of: "w1").contains("Fatal error"))
        } catch {
            await stack.shutdown()
            throw error
        }
        await stack.shutdown()
    }

    @Test(
        "An HTTP/2 410 whose timestamp is 1e19 (beyond 64 bits of milliseconds): the token is reported unregistered, the answer logged and counted, the worker stays up"
    )
    func aFourTenWithAnImpossibleTimestampIsIgnored() async throws {
        let poisoned = DeviceToken.numbered(1, salt: 43)
        // 1e16 s: the simulator answers a timestamp of 1e19 milliseconds.
        let stack = try await WorkerStack.start(
            http2: (badTokens: [], unregistered: [poisoned: Date(timeIntervalSince1970: 1e16)])
        )
        do {
            try await stack.startWorker("w1")
            let after = (0..<10).map { (id: "h2-after-\($0)", token: DeviceToken.numbered($0, salt: 44)) }
            let all = [(id: "h2-poisoned", token: poisoned)] + after
            try await stack.produce(
                all.map { WorkerStack.job(id: $0.id, tokens: [$0.token], app: WorkerStack.http2App) },
                key: "one-partition"
            )
            let results = try await Self.results(stack, all)
            let answer = results["h2-poisoned"]
            #expect(answer?["type"]?.stringValue == "transmissionError", "\(answer ?? [:])")
            #expect(answer?["reason"]?.stringValue == "Unregistered", "\(answer ?? [:])")
            for job in after {
                #expect(results[job.id]?["type"]?.stringValue == "transmitted", "\(job.id): \(results[job.id] ?? [:])")
            }
            #expect(stack.workers["w1"]?.isRunning == true, "the worker stopped: \(stack.log(of: "w1"))")
            #expect(
                stack.fullLog(of: "w1").contains(
                    "which is not a time between 1970 and 9999 in milliseconds; the timestamp is ignored"
                )
            )
            let metrics = try await #require(stack.statusServers["w1"]).get("/metrics").text
            #expect(
                metrics.contains(
                    #"apn_worker_gateway_malformed_answers_total{app="\#(WorkerStack.http2App)",env="production"} 1"#
                ),
                "\(metrics.split(separator: "\n").filter { $0.contains("malformed") })"
            )
        } catch {
            await stack.shutdown()
            throw error
        }
        await stack.shutdown()
    }

    @Test(
        "A message that stops every worker that processes it is answered after it stopped three, with real restarts; every other job is delivered once, or flagged"
    )
    func aMessageThatStopsWorkersIsSkippedAfterThreeStops() async throws {
        // A shorter session, so that the group notices each dead worker sooner.
        let stack = try await WorkerStack.start(kafkaProperties: ["session.timeout.ms": "6000"])
        do {
            let before = (0..<8).map { (id: "before-\($0)", token: DeviceToken.numbered($0, salt: 45)) }
            let poison = (id: "poison", token: DeviceToken.numbered(0, salt: 46))
            let after = (0..<8).map { (id: "after-\($0)", token: DeviceToken.numbered($0, salt: 47)) }
            let elsewhere = (0..<12).map { (id: "elsewhere-\($0)", token: DeviceToken.numbered($0, salt: 48)) }
            let line = before + [poison] + after
            let stored = try await stack.produce(
                line.map { WorkerStack.job(id: $0.id, tokens: [$0.token]) },
                key: "one-partition"
            )
            try await stack.produce(elsewhere.map { WorkerStack.job(id: $0.id, tokens: [$0.token]) })
            let place = stored[before.count]
            let poisonId = WorkerResult.invalidJobId(
                topic: place.topic,
                partition: place.partition,
                offset: place.offset
            )
            let others = before + after + elsewhere
            let wanted = Set(others.map { WorkerResult.notificationId(jobId: $0.id, token: $0.token.hex) } + [poisonId])

            var stops = 0
            var complete = false
            for _ in 0..<6 where !complete {
                let worker = try await stack.startWorker("w1", environment: ["APN_WORKER_TEST_EXIT_ON_JOB": poison.id])
                let results = try await stack.readResults(timeout: .seconds(120)) { results in
                    !worker.isRunning || Set(results.compactMap { $0["resultId"]?.stringValue }).isSuperset(of: wanted)
                }
                complete = Set(results.compactMap { $0["resultId"]?.stringValue }).isSuperset(of: wanted)
                if !complete {
                    try #require(!worker.isRunning, "neither stopped nor done: \(stack.log(of: "w1"))")
                    stops += 1
                }
            }
            #expect(complete && stops == 3, "stops: \(stops), log: \(stack.log(of: "w1"))")
            #expect(
                stack.fullLog(of: "w1").components(separatedBy: "APN_WORKER_TEST_EXIT_ON_JOB: stopping").count - 1 == 3
            )
            #expect(stack.fullLog(of: "w1").contains("Skipping message"))

            let byId = stack.resultsById
            let answer = byId[poisonId]
            #expect(answer?["type"]?.stringValue == "invalidJob", "\(answer ?? [:])")
            #expect(
                answer?["reason"]?.stringValue?.hasPrefix("the worker stopped 3 times while processing this message")
                    == true,
                "\(answer ?? [:])"
            )
            #expect(stack.acceptedByToken[poison.token] == nil)
            for job in others {
                let result = byId[WorkerResult.notificationId(jobId: job.id, token: job.token.hex)]
                #expect(result?["type"]?.stringValue == "transmitted", "\(job.id): \(result ?? [:])")
                let accepted = stack.acceptedByToken[job.token] ?? 0
                #expect(accepted >= 1, "\(job.id) was never sent")
                if accepted > 1 {
                    #expect(
                        result?["possibleDuplicate"]?.boolValue == true,
                        "\(job.id) sent \(accepted) times unflagged"
                    )
                }
            }
            let metrics = try await #require(stack.statusServers["w1"]).get("/metrics").text
            #expect(metrics.contains(#"apn_worker_poison_messages_total{topic="apn.requests"} 1"#))
            #expect(try await stack.waitForAllCommitted())
        } catch {
            await stack.shutdown()
            throw error
        }
        await stack.shutdown()
    }
}
