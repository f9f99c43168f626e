import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// A stalled app does not stop the others (`docs/delivery.md`, "A slow app"): a pool that holds
/// many notifications and cannot deliver them soon gets no more, what it holds stops counting
/// against `maxInFlight`, its new notifications move aside, and the other app's jobs behind its
/// backlog are delivered; then the backlog is delivered at the gateway's pace, each once.
@Suite("Stalled apps end to end", .serialized, .timeLimit(.minutes(5)))
struct StalledAppEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    /// Four times the in-flight budget of jobs of the stalled app: without isolation, the budget
    /// fills with them, and the other app's jobs behind them wait until three budgets' worth have
    /// been answered (30 s at the slow gateway's pace of 50 a second; 42 s for the `429` app) —
    /// longer than ``otherWithin``.
    static let backlog = 2_000
    static let maxInFlight = 500
    static let otherWithin: Duration = .seconds(20)

    /// Produces `backlog` one-token jobs for `stalledApp`, then 200 for the other app, starts a
    /// worker, and checks that the other app's jobs are delivered within ``otherWithin``, and that every
    /// backlog job gets a result `expect` accepts, once, within `backlogWithin`.
    static func otherAppGoesOn(
        _ stack: WorkerStack,
        stalledApp: String,
        otherApp: String,
        backlogWithin: Duration,
        expect: ([String: JSONValue]?) -> Bool
    ) async throws {
        let stalled = (0..<backlog).map { DeviceToken.numbered($0, salt: 5) }
        try await stack.produce(stalled.map { WorkerStack.job(id: "stalled", tokens: [$0], app: stalledApp) })
        let other = (0..<200).map { DeviceToken.numbered($0, salt: 6) }
        try await stack.produce(other.map { WorkerStack.job(id: "other", tokens: [$0], app: otherApp) })
        try await stack.startWorker("w1")
        let otherIds = other.map { Jobs.id("other", $0) }
        try await stack.readResults(timeout: otherWithin) { _ in otherIds.allSatisfy { stack.resultsById[$0] != nil } }
        for id in otherIds { #expect(stack.resultsById[id]?["type"] == "transmitted", "\(id)") }
        let stalledIds = stalled.map { Jobs.id("stalled", $0) }
        #expect(
            stalledIds.contains { stack.resultsById[$0] == nil },
            "the other app's jobs were delivered while the stalled app still had a backlog"
        )
        try await stack.readResults(timeout: backlogWithin) { _ in
            stalledIds.allSatisfy { stack.resultsById[$0] != nil }
        }
        for id in stalledIds { #expect(expect(stack.resultsById[id]), "\(id): \(stack.resultsById[id] ?? [:])") }
        #expect(try await stack.waitForAllCommitted())
        var copies: [String: Int] = [:]
        for result in try await stack.readAllResults() {
            if let id = result["resultId"]?.stringValue { copies[id, default: 0] += 1 }
        }
        for id in stalledIds + otherIds { #expect(copies[id] == 1, "\(id): \(copies[id] ?? 0) results") }
    }

    @Test("A slow app (every answer after 4 s) does not hold the others: its backlog goes at the gateway's pace")
    func aSlowAppDoesNotHoldTheOthers() async throws {
        let stack = try await WorkerStack.start(
            http2: ([], [:]),
            maxInFlight: Self.maxInFlight,
            parkedTopic: "apn.requests.parked",
            worker: ["moveAsideAfter": "100"],
            // 200 streams (two connections), each answered after 4 s: 50 a second.
            http2ResponseDelay: .seconds(4)
        )
        do {
            try await Self.otherAppGoesOn(
                stack,
                stalledApp: WorkerStack.http2App,
                otherApp: WorkerStack.app,
                backlogWithin: .seconds(150)
            ) { $0?["type"] == "transmitted" }
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("An app answered 429 to everything does not hold the others: each of its notifications gets the 429")
    func aRateLimitedAppDoesNotHoldTheOthers() async throws {
        let stack = try await WorkerStack.start(
            http2: ([], [:]),
            // Each notification answered 429 three times, after 2, 4 and 8 s: 14 s each.
            http2AppSettings: ["retryLimit: 3", "retryBaseDelayMs: 2000"],
            http2Status429Every: 1,
            maxInFlight: Self.maxInFlight,
            parkedTopic: "apn.requests.parked",
            worker: ["moveAsideAfter": "100"]
        )
        do {
            try await Self.otherAppGoesOn(
                stack,
                stalledApp: WorkerStack.http2App,
                otherApp: WorkerStack.app,
                backlogWithin: .seconds(150)
            ) { $0?["type"] == "transmissionError" && $0?["reason"] == "TooManyRequests" }
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test(
        "An unreachable app whose pool opens with its first notifications does not hold the others once it has taken the budget"
    )
    func anUnreachableAppOpenedLateDoesNotHoldTheOthers() async throws {
        let stack = try await WorkerStack.start(
            http2: ([], [:]),
            appSettings: ["reconnectBaseDelayMs: 20"],
            maxInFlight: Self.maxInFlight,
            parkedTopic: "apn.requests.parked",
            worker: ["moveAsideAfter": "100"]
        )
        do {
            await stack.stopGateway()
            let stalled = (0..<Self.backlog).map { DeviceToken.numbered($0, salt: 5) }
            try await stack.produce(stalled.map { WorkerStack.job(id: "stalled", tokens: [$0]) })
            let other = (0..<200).map { DeviceToken.numbered($0, salt: 6) }
            try await stack.produce(
                other.map { WorkerStack.job(id: "other", tokens: [$0], app: WorkerStack.http2App) }
            )
            try await stack.startWorker("w1")
            let otherIds = other.map { Jobs.id("other", $0) }
            try await stack.readResults(timeout: Self.otherWithin) { _ in
                otherIds.allSatisfy { stack.resultsById[$0] != nil }
            }
            for id in otherIds { #expect(stack.resultsById[id]?["type"] == "transmitted", "\(id)") }
            try await stack.restartGateway()
            let stalledIds = stalled.map { Jobs.id("stalled", $0) }
            try await stack.readResults(timeout: .seconds(90)) { _ in
                stalledIds.allSatisfy { stack.resultsById[$0] != nil }
            }
            for (token, id) in zip(stalled, stalledIds) {
                #expect(stack.resultsById[id]?["type"] == "transmitted", "\(id)")
                #expect(stack.acceptedByToken[token] == 1, "\(token.hex): \(stack.acceptedByToken[token] ?? 0)")
            }
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}
