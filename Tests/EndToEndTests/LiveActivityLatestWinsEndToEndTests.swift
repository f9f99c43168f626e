import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// Latest wins and the priority budget through `apn-worker run` (`docs/delivery.md`, "Latest
/// wins"; `docs/jobs.md`, "Priority budget"): updates of one Live Activity that wait in the
/// worker are answered `superseded` except the newest, an update older than one Apple accepted
/// is not sent, and `"priority": "auto"` spends the activity's hourly budget at 10, then sends 5.
@Suite("Live Activities: latest wins and the priority budget", .serialized, .timeLimit(.minutes(4)))
struct LiveActivityLatestWinsEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    static func update(
        _ id: String,
        _ token: DeviceToken,
        timestamp: Int64,
        event: String = "update",
        _ extra: String = ""
    )
        -> [UInt8]
    {
        Jobs.job(
            id,
            [token],
            app: WorkerStack.http2App,
            #""liveActivity":{"event":"\#(event)","contentState":{"score":"\#(id)"},"timestamp":\#(timestamp)}\#(extra)"#
        )
    }

    @Test(
        "50 updates of one activity produced while its gateway is down: Apple receives the newest, each of the 49 others is superseded by a newer one"
    )
    func onlyTheNewestWaitingUpdateIsSent() async throws {
        let stack = try await WorkerStack.start(
            http2: ([], [:]),
            http2AppSettings: ["reconnectBaseDelayMs: 20"]
        )
        await Jobs.withStack(stack) { stack in
            let server = try #require(stack.statusServers["w1"])
            await stack.stopHTTP2Gateway()
            let token = DeviceToken.numbered(1, salt: 44)
            let base = Int64(Date().timeIntervalSince1970) - 600
            try await stack.produce((0..<50).map { Self.update("la-\($0)", token, timestamp: base + Int64($0)) })
            // Every update is in the worker before the gateway comes back: the older ones
            // answered at once or waiting with the newest, which waits for the gateway.
            await eventually("the 50 updates in the worker, the newest waiting for the gateway", within: .seconds(60)) {
                let text = (try? await server.get("/metrics").text) ?? ""
                let waiting = StatusEndToEndTests.total(
                    "apn_worker_notifications_waiting",
                    ["app": WorkerStack.http2App],
                    in: text
                )
                return StatusEndToEndTests.total("apn_worker_messages_consumed_total", in: text) == 50 && waiting >= 1
            }
            #expect(stack.http2Simulator?.acceptedByToken[token] == nil)
            try await stack.restartHTTP2Gateway()
            let ids = (0..<50).map { Jobs.id("la-\($0)", token) }
            let byId = try await Jobs.results(stack, ids)
            #expect(byId[ids[49]]?["type"] == "transmitted", "\(byId[ids[49]] ?? [:])")
            // Each names the update that replaced it when it was answered: the newest the
            // worker held then (the updates arrive in batches), itself superseded in turn.
            for (index, id) in ids.dropLast().enumerated() {
                #expect(byId[id]?["status"] == .int(522), "\(id): \(byId[id] ?? [:])")
                #expect(byId[id]?["statusName"] == "superseded")
                let by = byId[id]?["supersededBy"]?.stringValue.flatMap { Int($0.dropFirst(3)) } ?? -1
                #expect(by > index && by <= 49, "\(id): \(byId[id] ?? [:])")
            }
            #expect(stack.http2Simulator?.acceptedByToken[token] == 1)

            // Later: an update older than the one Apple accepted is not sent; an end wins
            // whatever its timestamp; an update after the end is not sent.
            try await stack.produce([Self.update("la-late", token, timestamp: base + 10)])
            let late = try await Jobs.results(stack, [Jobs.id("la-late", token)])[Jobs.id("la-late", token)]
            #expect(late?["status"] == .int(522), "\(late ?? [:])")
            #expect(late?["supersededBy"] == "la-49")
            try await stack.produce([Self.update("la-end", token, timestamp: base + 5, event: "end")])
            let end = try await Jobs.results(stack, [Jobs.id("la-end", token)])[Jobs.id("la-end", token)]
            #expect(end?["type"] == "transmitted", "\(end ?? [:])")
            try await stack.produce([Self.update("la-after", token, timestamp: base + 100)])
            let after = try await Jobs.results(stack, [Jobs.id("la-after", token)])[Jobs.id("la-after", token)]
            #expect(after?["supersededBy"] == "la-end", "\(after ?? [:])")
            #expect(stack.http2Simulator?.acceptedByToken[token] == 2)

            #expect(try await stack.waitForAllCommitted())
            var copies: [String: Int] = [:]
            for result in try await stack.readAllResults() {
                if let id = result["resultId"]?.stringValue { copies[id, default: 0] += 1 }
            }
            for id in ids { #expect(copies[id] == 1, "\(id): \(copies[id] ?? 0) results") }
            let metrics = (try? await server.get("/metrics").text) ?? ""
            #expect(StatusEndToEndTests.total("apn_worker_live_activity_superseded_total", in: metrics) == 51)
        }
    }

    @Test("20 updates of one activity, one at a time, with a budget of 6 an hour: 6 go at priority 10, the rest at 5")
    func thePriorityBudget() async throws {
        let stack = try await WorkerStack.start(
            http2: ([], [:]),
            http2AppSettings: ["liveActivityHighPriorityPerHour: 6"]
        )
        await Jobs.withStack(stack) { stack in
            let token = DeviceToken.numbered(2, salt: 44)
            let base = Int64(Date().timeIntervalSince1970) - 600
            var priorities: [Int] = []
            for n in 0..<20 {
                // One at a time, as a score changes: each is the newest when it is sent.
                let id = "auto-\(n)"
                try await stack.produce([Self.update(id, token, timestamp: base + Int64(n), #","priority":"auto""#)])
                let result = try await Jobs.results(stack, [Jobs.id(id, token)])[Jobs.id(id, token)]
                #expect(result?["type"] == "transmitted", "\(id): \(result ?? [:])")
                priorities.append(result?["priority"]?.intValue.map(Int.init) ?? 0)
            }
            #expect(priorities == Array(repeating: 10, count: 6) + Array(repeating: 5, count: 14), "\(priorities)")
            let sent = (stack.http2Simulator?.accepted ?? []).filter { $0.token == token }.map(\.priority)
            #expect(sent == priorities.map { Optional($0) }, "\(sent)")
            // Past the budget: an update with an alert keeps 10, and so does an end.
            try await stack.produce([
                Jobs.job(
                    "auto-alert",
                    [token],
                    app: WorkerStack.http2App,
                    #""liveActivity":{"event":"update","contentState":{"score":"goal"},"timestamp":\#(base + 30),"alert":{"title":"Goal","body":"1-0"}},"priority":"auto""#
                )
            ])
            let alert = try await Jobs.results(stack, [Jobs.id("auto-alert", token)])[Jobs.id("auto-alert", token)]
            #expect(alert?["priority"] == .int(10), "an update with an alert keeps 10: \(alert ?? [:])")
            try await stack.produce([
                Self.update("auto-end", token, timestamp: base + 40, event: "end", #","priority":"auto""#)
            ])
            let end = try await Jobs.results(stack, [Jobs.id("auto-end", token)])[Jobs.id("auto-end", token)]
            #expect(end?["priority"] == .int(10), "an end keeps 10: \(end ?? [:])")
        }
    }
}
