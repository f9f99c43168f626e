import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// `staleAfter` through `apn-worker run`: a job consumed later than its `staleAfter` after it was
/// produced is answered `expired` (521) and never reaches the gateway; a fresh one is sent.
@Suite("Stale jobs end to end", .serialized, .timeLimit(.minutes(3)))
struct StaleJobsEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    @Test("A backlog consumed after its staleAfter is reported expired and not sent; a fresh job is sent")
    func aBacklogPastItsStaleAfterIsNotSent() async throws {
        let stack = try await WorkerStack.start()
        do {
            let stale = [DeviceToken.numbered(1), DeviceToken.numbered(2)]
            let fresh = DeviceToken.numbered(3)
            try await stack.produce([
                Jobs.job("otp", stale, #""alert":"Your code is 123456","staleAfter":1"#),
                Jobs.job("news", [fresh], #""alert":"Still worth reading","staleAfter":"1h""#),
            ])
            // The backlog: no worker consumes for longer than the first job's staleAfter.
            try await Task.sleep(for: .milliseconds(1500))
            try await stack.startWorker("w1")
            let ids = stale.map { Jobs.id("otp", $0) } + [Jobs.id("news", fresh)]
            let byId = try await Jobs.results(stack, ids)
            for token in stale {
                let result = byId[Jobs.id("otp", token)]
                #expect(result?["status"] == .int(521), "\(result ?? [:])")
                #expect(result?["reason"]?.stringValue?.contains("staleAfter passed before it could be sent") == true)
                #expect(stack.acceptedByToken[token] == nil, "a stale notification never reaches the gateway")
            }
            #expect(byId[Jobs.id("news", fresh)]?["type"] == "transmitted")
            #expect(stack.acceptedByToken[fresh] == 1)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}
