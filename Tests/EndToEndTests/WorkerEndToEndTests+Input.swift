import APNSBinary
import APNSCore
import Foundation
import PushKafka
import PushRedis
import PushStatus
import PushTestSupport
import PushWorker
import Testing

// Malformed messages, feedback and both transports side by side, through `apn-worker run`.
extension WorkerEndToEndTests {
    @Test("Malformed messages of every kind get error results and the worker keeps going")
    func malformedMessages() async throws {
        let stack = try await WorkerStack.start()
        do {
            try await stack.startWorker("w1")
            let t = DeviceToken.numbered(1).hex
            let app = WorkerStack.app
            let big = String(repeating: "x", count: 3000)
            let cases: [(String, String, Int, String)] = [
                // (message, kind, status, reason fragment)
                ("{not json", "invalidJob", 517, "not valid JSON"),
                ("[\"an\",\"array\"]", "invalidJob", 517, "not an object"),
                (#"{"app":"\#(app)","token":"\#(t)","alert":"x"}"#, "invalidJob", 517, "no \"id\""),
                (#"{"id":"no-tokens","app":"\#(app)","alert":"x"}"#, "invalidJob", 517, "neither"),
                (#"{"id":"no-app","token":"\#(t)","alert":"x"}"#, "transmissionError", 517, "no \"app\""),
                (
                    #"{"id":"unknown-app","app":"com.example.other","token":"\#(t)","alert":"x"}"#, "transmissionError",
                    517,
                    "not configured"
                ),
                (#"{"id":"bad-token","app":"\#(app)","token":"12zz","alert":"x"}"#, "transmissionError", 518, "hex"),
                (
                    #"{"id":"too-big","app":"\#(app)","token":"\#(t)","alert":"x","payload":{"blob":"\#(big)"}}"#,
                    "transmissionError", 512,
                    "2048"
                ),
                (
                    #"{"id":"bad-badge","app":"\#(app)","token":"\#(t)","badge":"three"}"#, "transmissionError", 517,
                    "badge"
                ),
            ]
            var messages = cases.map { Array($0.0.utf8) }
            let after = DeviceToken.numbered(99)
            messages.append(WorkerStack.job(id: "after", tokens: [after]))
            try await stack.produce(messages)
            let afterId = WorkerResult.notificationId(jobId: "after", token: after.hex)
            let results = try await stack.readResults { $0.count >= cases.count + 1 }
            #expect(results.count == cases.count + 1)
            for (message, kind, status, fragment) in cases {
                let match = results.contains { r in
                    r["type"]?.stringValue == kind && r["status"] == .int(Int64(status))
                        && (r["reason"]?.stringValue ?? "").contains(fragment)
                }
                #expect(match, "no \(kind) \(status) result mentioning \(fragment) for \(message.prefix(60))")
            }
            #expect(results.contains { $0["resultId"]?.stringValue == afterId && $0["type"] == "transmitted" })
            #expect(stack.simulator.acceptedByToken[after] == 1)
            #expect(try await stack.waitForAllCommitted())
            // SIGTERM: a graceful stop, exit status 0, statistics in the log.
            #expect(await stack.stopWorker("w1") == 0)
            let log = stack.fullLog(of: "w1")
            #expect(log.contains("Rejected message") && log.contains("Rejected job"))
            #expect(log.contains("Worker stopped"))
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test(
        "Unregistered tokens (status 8 and feedback) are skipped unless registeredAt is newer; device and app limits apply"
    )
    func unregisteredTokensAndRateLimits() async throws {
        let rejected = DeviceToken.numbered(1, salt: 8)
        let reported = DeviceToken.numbered(2, salt: 8)
        let reportedAt = UInt32(Date().timeIntervalSince1970) - 3600
        let stack = try await WorkerStack.start(
            badTokens: [rejected],
            feedback: [FeedbackTuple(timestamp: reportedAt, token: reported)],
            devicePerHour: 2,
            appPerSecond: 300
        )
        do {
            try await stack.startWorker("w1")
            func id(_ job: String, _ token: DeviceToken) -> String {
                WorkerResult.notificationId(jobId: job, token: token.hex)
            }
            func result(_ job: String, _ token: DeviceToken) -> [String: JSONValue]? {
                stack.resultsById[id(job, token)]
            }

            // Status 8 feeds the unregistered store; the next job to that token is not sent.
            try await stack.produce([WorkerStack.job(id: "reject-1", tokens: [rejected])])
            try await stack.readResults { _ in result("reject-1", rejected) != nil }
            #expect(result("reject-1", rejected)?["status"] == .int(8))
            try await stack.produce([WorkerStack.job(id: "reject-2", tokens: [rejected])])
            try await stack.readResults { _ in result("reject-2", rejected) != nil }
            #expect(result("reject-2", rejected)?["status"] == .int(519))
            #expect(stack.simulator.acceptedByToken[rejected] == nil)

            // The feedback service's token: a feedback result, then skipped, unless the job says
            // the device registered again after Apple's report.
            let feedbackId = WorkerResult.feedbackId(
                app: WorkerStack.app,
                environment: "production",
                token: reported.hex,
                timestamp: Int64(reportedAt)
            )
            try await stack.readResults { _ in stack.resultsById[feedbackId] != nil }
            #expect(stack.resultsById[feedbackId]?["type"] == "feedback")
            let newer = Array(
                #"{"id":"again","app":"\#(WorkerStack.app)","token":"\#(reported.hex)","alert":"x","registeredAt":\#(reportedAt + 60)}"#
                    .utf8
            )
            try await stack.produce([WorkerStack.job(id: "stale", tokens: [reported]), newer])
            try await stack.readResults { _ in result("stale", reported) != nil && result("again", reported) != nil }
            #expect(result("stale", reported)?["status"] == .int(519))
            #expect(result("again", reported)?["type"] == "transmitted")
            #expect(stack.simulator.acceptedByToken[reported] == 1)

            // Two notifications per device per hour: the third is refused.
            let device = DeviceToken.numbered(3, salt: 8)
            try await stack.produce((1...3).map { WorkerStack.job(id: "limited-\($0)", tokens: [device]) })
            try await stack.readResults { _ in (1...3).allSatisfy { result("limited-\($0)", device) != nil } }
            let statuses = (1...3).compactMap { result("limited-\($0)", device)?["status"] }
            #expect(statuses == [.int(520)], "\(statuses)")
            #expect(stack.simulator.acceptedByToken[device] == 2)

            // 300 per second for the app: 900 notifications are all sent, spread over three calendar
            // seconds, so the first and last are more than a second apart (unthrottled, they go
            // out within a few tens of milliseconds).
            let many = (0..<900).map { ("paced-\($0)", DeviceToken.numbered($0, salt: 9)) }
            try await stack.produce(many.map { WorkerStack.job(id: $0.0, tokens: [$0.1]) })
            try await stack.readResults { _ in many.allSatisfy { result($0.0, $0.1) != nil } }
            let times = many.compactMap { result($0.0, $0.1)?["at"]?.intValue }
            #expect(many.allSatisfy { result($0.0, $0.1)?["type"] == "transmitted" })
            #expect((times.max() ?? 0) - (times.min() ?? 0) > 1000, "900 notifications at 300/s took a second or less")
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test(
        "One app on HTTP/2 and one on binary in the same run: one result each; 410 feeds the store and a feedback result",
        arguments: ["provider token", "client certificate"]
    )
    func http2AndBinaryApps(authentication: String) async throws {
        let count = 1_000
        let h2Tokens = (0..<count).map { DeviceToken.numbered($0, salt: 21) }
        let binaryTokens = (0..<count).map { DeviceToken.numbered($0, salt: 22) }
        let bad = Set(stride(from: 5, to: count, by: 100).map { h2Tokens[$0] })
        let since = Date(timeIntervalSince1970: 1_700_000_000.250)
        let unregistered = Dictionary(
            uniqueKeysWithValues: stride(from: 50, to: count, by: 100).map { (h2Tokens[$0], since) }
        )
        let stack = try await WorkerStack.start(
            http2: (badTokens: bad, unregistered: unregistered),
            http2CertificateAuth: authentication == "client certificate"
        )
        do {
            try await stack.startWorker("w1")
            try await stack.startWorker("w2")
            var jobs: [[UInt8]] = []
            for i in 0..<count {
                jobs.append(WorkerStack.job(id: "h2-\(i)", tokens: [h2Tokens[i]], app: WorkerStack.http2App))
                jobs.append(WorkerStack.job(id: "bin-\(i)", tokens: [binaryTokens[i]]))
            }
            try await stack.produce(jobs)
            func id(_ job: String, _ token: DeviceToken) -> String {
                WorkerResult.notificationId(jobId: job, token: token.hex)
            }
            func feedbackId(_ token: DeviceToken) -> String {
                WorkerResult.feedbackId(
                    app: WorkerStack.http2App,
                    environment: "production",
                    token: token.hex,
                    timestamp: 1_700_000_000
                )
            }
            try await stack.readResults { _ in
                (0..<count).allSatisfy {
                    stack.resultsById[id("h2-\($0)", h2Tokens[$0])] != nil
                        && stack.resultsById[id("bin-\($0)", binaryTokens[$0])] != nil
                }
                    && unregistered.keys.allSatisfy { stack.resultsById[feedbackId($0)] != nil }
            }
            let h2Simulator = try #require(stack.http2Simulator)
            let h2Accepted = h2Simulator.acceptedByToken
            let binaryAccepted = stack.simulator.acceptedByToken
            for i in 0..<count {
                let h2 = try #require(stack.resultsById[id("h2-\(i)", h2Tokens[i])])
                if bad.contains(h2Tokens[i]) {
                    #expect(
                        h2["type"] == "transmissionError" && h2["status"] == .int(400)
                            && h2["reason"] == "BadDeviceToken",
                        "\(h2)"
                    )
                } else if unregistered[h2Tokens[i]] != nil {
                    #expect(
                        h2["type"] == "transmissionError" && h2["status"] == .int(410)
                            && h2["reason"] == "Unregistered",
                        "\(h2)"
                    )
                    #expect(stack.resultsById[feedbackId(h2Tokens[i])]?["type"] == "feedback")
                } else {
                    #expect(h2["type"] == "transmitted", "\(h2)")
                    #expect(h2Accepted[h2Tokens[i]] == 1)
                }
                #expect(stack.resultsById[id("bin-\(i)", binaryTokens[i])]?["type"] == "transmitted")
                #expect(binaryAccepted[binaryTokens[i]] == 1)
                #expect(h2Accepted[binaryTokens[i]] == nil && binaryAccepted[h2Tokens[i]] == nil)
            }
            #expect(h2Accepted.count == count - bad.count - unregistered.count)
            let ids = stack.results.compactMap { $0["resultId"]?.stringValue }
            #expect(ids.count == Set(ids).count, "a result was written twice")

            // The 410 fed the unregistered store: the next job to such a token is not sent.
            let gone = try #require(unregistered.keys.first)
            try await stack.produce([WorkerStack.job(id: "after-410", tokens: [gone], app: WorkerStack.http2App)])
            try await stack.readResults { _ in stack.resultsById[id("after-410", gone)] != nil }
            #expect(stack.resultsById[id("after-410", gone)]?["status"] == .int(519))
            #expect(h2Simulator.statistics.rejectionsByReason["Unregistered"] == unregistered.count)
            #expect(try await stack.waitForAllCommitted())
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }
}
