import APNSCore
import Foundation
import PushRedis
import PushTestSupport
import PushWorker
import Testing

/// `apn-worker run` against a redis-server that only speaks TLS.
@Suite("Worker end to end with Redis over TLS", .serialized, .timeLimit(.minutes(4)))
struct RedisTLSEndToEndTests {
    @Test(
        "2,000 jobs through 2 workers over rediss://: one result each, each valid notification accepted once, a job repeated is sent once"
    )
    func jobsOverTLSRedis() async throws {
        let bad = Set((0..<2_000).filter { $0 % 100 == 13 }.map { DeviceToken.numbered($0) })
        let stack = try await WorkerStack.start(badTokens: bad, redisTLS: true)
        do {
            for id in ["w1", "w2"] { try await stack.startWorker(id) }
            var jobs: [(String, [DeviceToken])] = []
            var messages: [[UInt8]] = []
            for i in 0..<2_000 {
                jobs.append(("tls-\(i)", [DeviceToken.numbered(i)]))
                messages.append(WorkerStack.job(id: "tls-\(i)", tokens: [DeviceToken.numbered(i)], alert: "Hello \(i)"))
                if i % 200 == 0 { messages.append(messages.last!) }  // the same job twice: the claim dedupes it
            }
            try await stack.produce(messages)
            let expected = WorkerEndToEndTests.expectedIds(jobs)
            let results = try await stack.readResults { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count
            }
            WorkerEndToEndTests.checkDelivered(expected, bad: bad, stack: stack, allowPossibleDuplicates: false)
            let ids = results.compactMap { $0["resultId"]?.stringValue }
            #expect(ids.count == Set(ids).count, "repeated results: \(ids.count - Set(ids).count)")
            #expect(try await stack.waitForAllCommitted(), "offsets not committed to the end")

            // The worker wrote its state into the TLS-only Redis.
            var configuration = stack.redis.configuration()
            configuration.tls = RedisTLS(caFile: stack.directory + "/certs/ca.pem")
            let redis = try await RedisConnection.connect(configuration)
            #expect((try await redis.send(["DBSIZE"]).int ?? 0) > 0)
            await redis.close()
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }
}
