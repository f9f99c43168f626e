import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// Jobs the broker deleted before they were read (`docs/operations.md`, "Retention and lag"): the
/// embedded broker keeps about 5 MiB per partition, so a backlog of large jobs on one partition,
/// produced while no worker runs, loses its oldest messages. The next worker counts them in
/// `apn_worker_messages_lost_to_retention_total` and logs the offsets; every other job of the
/// backlog gets its result.
@Suite("Jobs lost to retention", .serialized, .timeLimit(.minutes(3)))
struct RetentionLossEndToEndTests {
    @Test("A backlog deeper than the broker keeps: the deleted jobs are counted and logged, the rest answered")
    func deletedJobsAreCountedAndLogged() async throws {
        let stack = try await WorkerStack.start()
        do {
            let key = "one-partition"
            // A first job, so that the group commits an offset on the partition.
            try await stack.startWorker("w1")
            let first = WorkerStack.job(id: "first", tokens: [DeviceToken.numbered(1)])
            try await stack.produce([first], key: key)
            _ = try await stack.readResults { $0.contains { $0["jobId"] == "first" } }
            #expect(try await stack.waitForAllCommitted())
            await stack.stopWorker("w1")

            // 24 jobs of about 400 KB each on the same partition: about 9.6 MB, past the 5 MiB the
            // broker keeps. Each is a job whose payload does not fit (one result each).
            let blob = String(repeating: "b", count: 400_000)
            let big = (0..<24).map { i in
                Array(
                    #"{"id":"big-\#(i)","app":"\#(WorkerStack.app)","token":"\#(DeviceToken.numbered(2).hex)","alert":"x","payload":{"blob":"\#(blob)"}}"#
                        .utf8
                )
            }
            try await stack.produce(big, key: key)
            try await stack.produce([WorkerStack.job(id: "marker", tokens: [DeviceToken.numbered(3)])], key: key)

            try await stack.startWorker("w2")
            _ = try await stack.readResults { $0.contains { $0["jobId"] == "marker" } }
            let server = try #require(stack.statusServers["w2"])
            var lost = 0
            let counted = await eventually("the lost messages counted in the metrics", within: .seconds(10)) {
                let text = (try? await server.get("/metrics").text) ?? ""
                lost = Int(
                    StatusEndToEndTests.total(
                        "apn_worker_messages_lost_to_retention_total",
                        ["topic": "apn.requests"],
                        in: text
                    )
                )
                return lost > 0
            }
            #expect(counted, "no loss was counted")
            // Every job of the backlog was either answered or counted as deleted (results of one
            // partition of the requests can arrive on several of the results topic, in any order).
            func answered(_ results: [[String: JSONValue]]) -> Set<String> {
                Set(results.compactMap { $0["jobId"]?.stringValue }.filter { $0.hasPrefix("big-") })
            }
            let results = try await stack.readResults(timeout: .seconds(30)) { answered($0).count >= big.count - lost }
            #expect(lost + answered(results).count == big.count, "lost \(lost), answered \(answered(results).count)")
            let answeredJobs = answered(results)
            // The oldest were deleted: the answered ones are the newest.
            let newest = Set((big.count - answeredJobs.count..<big.count).map { "big-\($0)" })
            #expect(answeredJobs == newest)
            let log = stack.fullLog(of: "w2")
            #expect(
                log.contains("Kafka deleted \(lost) jobs before they were read: apn.requests["),
                "\(log.suffix(3000))"
            )
        } catch {
            Issue.record("\(error)\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }
}
