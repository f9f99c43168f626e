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

    // MARK: Crashes between the two topics

    /// A stack whose binary app's gateway is down, with `count` jobs of it produced.
    static func deadBacklog(_ count: Int) async throws -> (WorkerStack, [DeviceToken]) {
        let stack = try await WorkerStack.start(
            appSettings: ["minConnections: 1", "reconnectBaseDelayMs: 20"],
            maxInFlight: maxInFlight,
            parkedTopic: "apn.requests.parked",
            worker: ["moveAsideAfter": "100"]
        )
        await stack.stopGateway()
        let tokens = (0..<count).map { DeviceToken.numbered($0, salt: 11) }
        try await stack.produce(tokens.map { WorkerStack.job(id: "backlog", tokens: [$0]) })
        return (stack, tokens)
    }

    /// Every token has a result; none was accepted twice without a `possibleDuplicate` result.
    static func expectDeliveredOnce(_ stack: WorkerStack, _ tokens: [DeviceToken]) async throws {
        let ids = tokens.map { Jobs.id("backlog", $0) }
        try await stack.readResults(timeout: .seconds(120)) { _ in ids.allSatisfy { stack.resultsById[$0] != nil } }
        #expect(try await stack.waitForAllCommitted())
        var flagged: Set<String> = []
        for result in try await stack.readAllResults() where result["possibleDuplicate"] == .bool(true) {
            if let id = result["resultId"]?.stringValue { flagged.insert(id) }
        }
        for (token, id) in zip(tokens, ids) {
            let accepted = stack.acceptedByToken[token] ?? 0
            #expect(accepted >= 1, "\(token.hex) never reached the gateway")
            #expect(
                accepted <= 1 || flagged.contains(id),
                "\(token.hex) accepted \(accepted) times, no possibleDuplicate"
            )
        }
    }

    /// How many notifications a worker's log says it moved aside.
    static func movedAside(in log: String) -> Int {
        log.split(separator: "\n").filter { $0.contains("Notifications moved aside") }.reduce(0) { sum, line in
            guard let range = line.range(of: #""notifications":"(\d+)""#, options: .regularExpression) else {
                return sum
            }
            return sum + (Int(line[range].filter(\.isNumber)) ?? 0)
        }
    }

    @Test(
        "A worker SIGKILLed while it moves a backlog aside loses nothing: the next one delivers each notification once"
    )
    func killedWhileMovingAside() async throws {
        let (stack, tokens) = try await Self.deadBacklog(4_000)
        do {
            try await stack.startWorker("w1")
            await eventually("w1 moves notifications aside", within: .seconds(60)) {
                stack.log(of: "w1").contains("Notifications moved aside")
            }
            await stack.killWorker("w1")
            try await stack.restartGateway()
            try await stack.startWorker("w2")
            try await Self.expectDeliveredOnce(stack, tokens)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }

    @Test(
        "A worker SIGKILLed while it brings a backlog back loses nothing: what it may have sent is flagged possibleDuplicate"
    )
    func killedWhileBringingBack() async throws {
        let (stack, tokens) = try await Self.deadBacklog(4_000)
        do {
            try await stack.startWorker("w1")
            await eventually("w1 moves most of the backlog aside", within: .seconds(60)) {
                Self.movedAside(in: stack.log(of: "w1")) >= 3_000
            }
            try await stack.restartGateway()
            await eventually("w1 brings the backlog back", within: .seconds(60)) {
                stack.acceptedByToken.count >= 500
            }
            await stack.killWorker("w1")
            try await stack.startWorker("w2")
            try await Self.expectDeliveredOnce(stack, tokens)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }
}
