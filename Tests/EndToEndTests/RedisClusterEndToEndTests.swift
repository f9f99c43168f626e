import APNSCore
import Foundation
import PushLocalStack
import PushRedis
import PushTestSupport
import PushWorker
import Synchronization
import Testing

/// `apn-worker run` against a Redis Cluster of real redis-server processes (3 primaries, a
/// replica each), while the cluster changes under it.
@Suite("Worker end to end on a Redis Cluster", .serialized, .timeLimit(.minutes(5)))
struct RedisClusterEndToEndTests {
    /// The cluster's primaries: node index and node id.
    private static func primaries(_ cluster: RedisClusterProcess) async throws -> [(index: Int, id: String)] {
        var found: [(Int, String)] = []
        for index in cluster.nodes.indices where cluster.nodes[index].isRunning {
            let direct = try await RedisConnection.connect(cluster.configuration(index))
            if try await direct.send(["ROLE"]).array?.first?.string == "master" {
                found.append((index, try await direct.send(["CLUSTER", "MYID"]).string ?? ""))
            }
            await direct.close()
        }
        return found
    }

    private static func jobs(_ prefix: String, _ range: Range<Int>, salt: Int) -> [(String, [DeviceToken])] {
        range.map { ("\(prefix)-\($0)", [DeviceToken.numbered($0, salt: salt)]) }
    }

    @Test(
        "Jobs through 2 workers all the while 2,000 slots move between primaries: one result each, each valid notification accepted once, a repeated job sent once, rejected tokens remembered"
    )
    func slotsMigratedMidRun() async throws {
        let bad = Set((0..<20_000).filter { $0 % 100 == 13 }.map { DeviceToken.numbered($0, salt: 21) })
        let stack = try await WorkerStack.start(badTokens: bad, redisCluster: true)
        do {
            let cluster = try #require(stack.redisCluster)
            for id in ["w1", "w2"] { try await stack.startWorker(id) }
            var jobs: [(String, [DeviceToken])] = []
            func wave(_ count: Int) async throws {
                let next = Self.jobs("mig", jobs.count..<jobs.count + count, salt: 21)
                jobs += next
                var messages = next.map { WorkerStack.job(id: $0.0, tokens: $0.1) }
                messages.append(messages[0])  // a repeated job: the claim dedupes it
                try await stack.produce(messages)
            }
            try await wave(1_000)
            try await stack.readResults { $0.count >= 300 }

            // Move 2,000 slots from one primary to another with redis-cli (MIGRATE and
            // CLUSTER SETSLOT), while the workers claim and record: jobs keep coming until the
            // move is over.
            let primaries = try await Self.primaries(cluster)
            try #require(primaries.count == 3)
            let done = DoneFlag()
            let reshard = Task {
                defer { done.set() }
                return try await RedisClusterProcess.run(
                    "/usr/bin/timeout",
                    [
                        "120", "/usr/bin/redis-cli", "--cluster", "reshard",
                        "127.0.0.1:\(cluster.nodes[primaries[0].index].port)",
                        "--cluster-from", primaries[0].id, "--cluster-to", primaries[1].id, "--cluster-slots", "2000",
                        "--cluster-yes",
                    ]
                )
            }
            while !done.isSet, jobs.count < 19_000 {
                try await wave(200)
                try await Task.sleep(for: .milliseconds(50))  // pacing the load, not synchronisation
            }
            let moved = try await reshard.value
            #expect(moved.status == 0, "redis-cli --cluster reshard: \(moved.text.suffix(2000))")
            try await wave(500)

            let expected = WorkerEndToEndTests.expectedIds(jobs)
            let results = try await stack.readResults(timeout: .seconds(120)) { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count
            }
            WorkerEndToEndTests.checkDelivered(expected, bad: bad, stack: stack, allowPossibleDuplicates: false)
            let ids = results.compactMap { $0["resultId"]?.stringValue }
            #expect(ids.count == Set(ids).count, "repeated results: \(ids.count - Set(ids).count)")

            // The unregistered store on the cluster: a new job to a rejected token is not sent.
            let rejected = DeviceToken.numbered(13, salt: 21)  // in the first wave, rejected with status 8
            try await stack.produce([WorkerStack.job(id: "after-8", tokens: [rejected])])
            let afterId = WorkerResult.notificationId(jobId: "after-8", token: rejected.hex)
            try await stack.readResults { _ in stack.resultsById[afterId] != nil }
            #expect(stack.resultsById[afterId]?["status"] == .int(519))
            #expect(try await stack.waitForAllCommitted(), "offsets not committed to the end")

            // The records are spread over the primaries, the moved slots' at their new owner.
            var counts: [Int] = []
            for primary in try await Self.primaries(cluster) {
                let direct = try await RedisConnection.connect(cluster.configuration(primary.index))
                counts.append(Int(try await direct.send(["DBSIZE"]).int ?? 0))
                await direct.close()
            }
            #expect(counts.count == 3 && counts.allSatisfy { $0 > 100 }, "keys per primary: \(counts)")
            // The premise: the workers met the migration (ASK and MOVED redirections).
            var redirects = 0
            for id in ["w1", "w2"] {
                let (status, report) = await stack.stopWorkerReporting(id)
                #expect(status == 0)
                redirects += Int(report?["redisRedirects"]?.intValue ?? 0)
            }
            #expect(redirects > 0, "the workers followed no redirection: the slots moved before or after the run")
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }

    @Test(
        "A primary killed mid-run, its replica promoted: no notification lost, none sent twice without possibleDuplicate"
    )
    func primaryKilledMidRun() async throws {
        let stack = try await WorkerStack.start(redisCluster: true)
        do {
            let cluster = try #require(stack.redisCluster)
            for id in ["w1", "w2"] { try await stack.startWorker(id) }
            let jobs = Self.jobs("kill", 0..<4_000, salt: 22)
            let messages = jobs.map { WorkerStack.job(id: $0.0, tokens: $0.1) }
            try await stack.produce(Array(messages[..<2_000]))
            try await stack.readResults { $0.count >= 500 }
            let victim = try #require(try await Self.primaries(cluster).first)
            await cluster.nodes[victim.index].stop()  // SIGKILL
            try await stack.produce(Array(messages[2_000...]))

            let expected = WorkerEndToEndTests.expectedIds(jobs)
            try await stack.readResults(timeout: .seconds(180)) { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count
            }
            WorkerEndToEndTests.checkDelivered(expected, bad: [], stack: stack, allowPossibleDuplicates: true)
            #expect(try await stack.waitForAllCommitted(), "offsets not committed to the end")
            // The replica took over: three primaries serve the slots again.
            #expect(try await Self.primaries(cluster).count == 3)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }
}

/// Set once by one task, read by another.
private final class DoneFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}
