import APNSCore
import Foundation
import PushKafka
import PushRedis
import PushTestSupport
import PushWorker
import Testing

/// What a worker leaves in Redis once its results are written: a claim of 16 bytes per
/// notification and no outcome (`docs/architecture.md#compact-state`), and the duplicate jobs
/// those still recognise.
@Suite(.serialized, .timeLimit(.minutes(5))) struct CompactStateEndToEndTests {
    @Test(
        "once written, a worker's notifications leave only their claims; the same jobs produced again are neither sent nor answered"
    )
    func writtenNotificationsLeaveOnlyTheirClaims() async throws {
        let stack = try await WorkerStack.start()
        do {
            try await stack.startWorker("w1")
            let jobs = (0..<400).map { ("compact-\($0)", [DeviceToken.numbered($0)]) }
            try await stack.produce(jobs.map { WorkerStack.job(id: $0.0, tokens: $0.1) })
            let expected = WorkerEndToEndTests.expectedIds(jobs)
            try await stack.readResults { Set($0.compactMap { $0["resultId"]?.stringValue }).count >= expected.count }
            // A stop stores the last written positions and deletes the outcomes they pass.
            #expect(await stack.stopWorkerReporting("w1").status == 0)

            let redis = try await RedisConnection.connect(stack.redis.configuration())
            var states: [String: Int] = [:]
            for key in try await redis.send(["KEYS", "apn:c:*"]).array?.compactMap(\.string) ?? [] {
                for state in try await redis.send(["HVALS", key]).array?.compactMap(\.bytes) ?? [] {
                    states[state.count == 16 ? "P" : String(decoding: state, as: UTF8.self), default: 0] += 1
                }
            }
            var outcomes = 0
            for key in try await redis.send(["KEYS", "apn:o:*"]).array?.compactMap(\.string) ?? [] {
                outcomes += Int(try await redis.send(["HLEN", key]).int ?? 0)
            }
            await redis.close()
            #expect(states == ["P": expected.count], "states left: \(states)")
            #expect(outcomes == 0, "outcomes left: \(outcomes)")

            // The same jobs again, behind them a new one: only the new one is sent and answered.
            try await stack.startWorker("w2")
            let marker = DeviceToken.numbered(10_000)
            try await stack.produce(
                jobs.map { WorkerStack.job(id: $0.0, tokens: $0.1) } + [
                    WorkerStack.job(id: "compact-marker", tokens: [marker])
                ]
            )
            let markerId = WorkerResult.notificationId(jobId: "compact-marker", token: marker.hex)
            try await stack.readResults { $0.contains { $0["resultId"]?.stringValue == markerId } }
            #expect(try await stack.waitForAllCommitted())
            let results = try await stack.readAllResults()
            let ids = results.compactMap { $0["resultId"]?.stringValue }
            #expect(ids.count == expected.count + 1, "results written again: \(ids.count - expected.count - 1)")
            WorkerEndToEndTests.checkDelivered(expected, bad: [], stack: stack, allowPossibleDuplicates: false)
            #expect(stack.simulator.acceptedByToken[marker] == 1)
            #expect(await stack.stopWorkerReporting("w2").status == 0)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }
}
