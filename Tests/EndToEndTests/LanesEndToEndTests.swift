import APNSCore
import Foundation
import PushTestSupport
import Testing

/// Priority lanes through `apn-worker run`: a worker reading `[apn.requests.urgent, apn.requests]`
/// serves urgent jobs ahead of a bulk backlog that fills its in-flight budget, and the backlog
/// still drains.
@Suite("Priority lanes end to end", .serialized, .timeLimit(.minutes(3)))
struct LanesEndToEndTests {
    static let urgentTopic = "apn.requests.urgent"

    @Test("Urgent jobs overtake a bulk backlog that holds the in-flight budget; the backlog drains")
    func urgentJobsOvertakeABulkBacklog() async throws {
        // The bulk app sends 1,000 a second, so its 8,000 jobs take eight seconds and keep the
        // worker's 2,000 in-flight places full meanwhile; the urgent jobs are for the HTTP/2 app,
        // which has no rate limit.
        let stack = try await WorkerStack.start(
            http2: ([], [:]),
            appSettings: ["appPerSecond: 1000"],
            requestsTopics: [Self.urgentTopic, "apn.requests"],
            maxInFlight: 2000
        )
        do {
            let bulk = (0..<8000).map { DeviceToken.numbered($0, salt: 1) }
            try await stack.produce(bulk.enumerated().map { WorkerStack.job(id: "bulk-\($0)", tokens: [$1]) })
            try await stack.startWorker("w1")
            // The worker is busy with the backlog once its first results are out.
            try await stack.readResults { $0.count >= 100 }
            let urgent = (0..<20).map { DeviceToken.numbered($0, salt: 2) }
            try await stack.produce(
                urgent.enumerated().map { WorkerStack.job(id: "otp-\($0)", tokens: [$1], app: WorkerStack.http2App) },
                topic: Self.urgentTopic
            )
            func isUrgent(_ result: [String: JSONValue]) -> Bool {
                result["jobId"]?.stringValue?.hasPrefix("otp-") == true
            }
            let whenUrgentDone = try await stack.readResults(timeout: .seconds(60)) {
                $0.filter(isUrgent).count >= urgent.count
            }
            let urgentResults = whenUrgentDone.filter(isUrgent)
            let bulkBefore = whenUrgentDone.count - urgentResults.count
            #expect(urgentResults.count == urgent.count)
            #expect(urgentResults.allSatisfy { $0["type"] == "transmitted" }, "\(urgentResults)")
            #expect(
                urgentResults.allSatisfy { $0["topic"]?.stringValue == Self.urgentTopic },
                "each result names the topic its job came from"
            )
            #expect(
                bulkBefore < bulk.count / 2,
                "the urgent jobs were served while most of the backlog waited, not after it: \(bulkBefore) bulk results came first"
            )
            // The lower lane goes on once the higher one is idle: the whole backlog is delivered.
            let all = try await stack.readResults(timeout: .seconds(60)) {
                $0.count - $0.filter(isUrgent).count >= bulk.count
            }
            let bulkResults = all.filter { !isUrgent($0) }
            #expect(Set(bulkResults.compactMap { $0["resultId"]?.stringValue }).count == bulk.count)
            #expect(bulkResults.allSatisfy { $0["type"] == "transmitted" && $0["topic"] == "apn.requests" })
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}
