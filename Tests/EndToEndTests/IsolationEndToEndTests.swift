import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// One app whose gateway cannot be reached does not stop the others (`docs/delivery.md`,
/// "Moving an app aside"): its notifications move aside to `kafka.parkedTopic`, the jobs behind
/// them are delivered, and when the gateway comes back its backlog is delivered, each
/// notification once.
@Suite("Isolation end to end", .serialized, .timeLimit(.minutes(4)))
struct IsolationEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    /// More jobs of the dead app than the in-flight budget: without moving aside, the worker
    /// stops consuming once they fill it, and the other app's jobs behind them wait.
    static let deadJobs = 3_000
    static let maxInFlight = 1_000

    @Test(
        "An unreachable app's backlog moves aside: the other app's jobs behind it are delivered, then the backlog once"
    )
    func anUnreachableAppMovesAside() async throws {
        let stack = try await WorkerStack.start(
            http2: ([], [:]),
            // The pool connects as the worker starts, so it reports the gateway unreachable
            // before the backlog is consumed.
            appSettings: ["minConnections: 1", "reconnectBaseDelayMs: 20"],
            maxInFlight: Self.maxInFlight,
            parkedTopic: "apn.requests.parked",
            worker: ["moveAsideAfter": "100"]
        )
        do {
            await stack.stopGateway()
            let dead = (0..<Self.deadJobs).map { DeviceToken.numbered($0) }
            try await stack.produce(dead.map { WorkerStack.job(id: "dead", tokens: [$0]) })
            let healthy = (0..<200).map { DeviceToken.numbered($0, salt: 7) }
            try await stack.produce(
                healthy.map { WorkerStack.job(id: "healthy", tokens: [$0], app: WorkerStack.http2App) }
            )
            try await stack.startWorker("w1")

            let healthyIds = healthy.map { Jobs.id("healthy", $0) }
            try await stack.readResults(timeout: .seconds(60)) { _ in
                healthyIds.allSatisfy { stack.resultsById[$0] != nil }
            }
            for id in healthyIds { #expect(stack.resultsById[id]?["type"] == "transmitted", "\(id)") }
            let deadIds = dead.map { Jobs.id("dead", $0) }
            #expect(deadIds.allSatisfy { stack.resultsById[$0] == nil }, "the dead app's notifications wait")
            #expect(stack.log(of: "w1").contains("Notifications moved aside"))

            try await stack.restartGateway()
            try await stack.readResults(timeout: .seconds(90)) { _ in
                deadIds.allSatisfy { stack.resultsById[$0] != nil }
            }
            #expect(try await stack.waitForAllCommitted())
            let all = try await stack.readAllResults()
            var copies: [String: Int] = [:]
            for result in all { if let id = result["resultId"]?.stringValue { copies[id, default: 0] += 1 } }
            for id in deadIds + healthyIds { #expect(copies[id] == 1, "\(id): \(copies[id] ?? 0) results") }
            for (token, id) in zip(dead, deadIds) {
                #expect(stack.resultsById[id]?["type"] == "transmitted", "\(id)")
                #expect(
                    stack.acceptedByToken[token] == 1,
                    "\(token.hex) accepted \(stack.acceptedByToken[token] ?? 0) times"
                )
            }
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("A moved-aside job whose staleAfter passes is answered expired while its gateway is still down")
    func aMovedAsideJobGoesStale() async throws {
        let stack = try await WorkerStack.start(
            appSettings: ["minConnections: 1", "reconnectBaseDelayMs: 20"],
            parkedTopic: "apn.requests.parked",
            worker: ["moveAsideAfter": "50"]
        )
        do {
            await stack.stopGateway()
            let tokens = (0..<400).map { DeviceToken.numbered($0, salt: 3) }
            try await stack.produce(tokens.map { Jobs.job("short", [$0], #""alert":"Now or never","staleAfter":12"#) })
            try await stack.startWorker("w1")
            let ids = tokens.map { Jobs.id("short", $0) }
            try await stack.readResults(timeout: .seconds(60)) { _ in ids.allSatisfy { stack.resultsById[$0] != nil } }
            for id in ids {
                let result = stack.resultsById[id]
                #expect(result?["status"] == .int(521), "\(result ?? [:])")
            }
            #expect(stack.log(of: "w1").contains("Notifications moved aside"))
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}
