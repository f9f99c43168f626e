import Foundation
import PushKafka
import PushLocalStack
import PushRedis
import PushTestSupport
import Testing

@testable import PushWorker

/// Where a store test runs: one `redis-server`, or a Redis Cluster of three primaries.
enum StoreBackend: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case server
    case cluster
    var testDescription: String { rawValue }

    /// Runs `body` with `count` clients of one fresh Redis of this kind, then stops it.
    func withClients(_ count: Int, _ body: ([RedisClient]) async throws -> Void) async throws {
        let connect: @Sendable () async throws -> RedisClient
        let stop: @Sendable () async -> Void
        switch self {
        case .server:
            let server = try await RedisServerProcess.start()
            connect = { .server(try await RedisConnection.connect(server.configuration())) }
            stop = { await server.stop() }
        case .cluster:
            let cluster = try await RedisClusterProcess.start(primaries: 3, replicas: 0)
            connect = { try await RedisClient.connect(seeds: cluster.seeds, cluster: true) }
            stop = { await cluster.stop() }
        }
        do {
            var clients: [RedisClient] = []
            for _ in 0..<count { clients.append(try await connect()) }
            try await body(clients)
            for client in clients { await client.close() }
            await stop()
        } catch {
            await stop()
            throw error
        }
    }
}

/// The notification records in a real `redis-server` and a real Redis Cluster: what a message
/// consumed again after a crash finds there, and the claim's rules, the same on both.
@Suite(.timeLimit(.minutes(3))) struct NotificationStoreTests {
    private static let token = String(repeating: "ab", count: 32)

    private func request(
        _ resultId: String,
        offset: Int64,
        token: String = Self.token,
        appPerSecond: Int = 0,
        devicePerHour: Int = 0,
        registeredAt: Int64? = nil
    ) -> NotificationStore.ClaimRequest {
        .init(
            resultId: resultId,
            partition: 3,
            offset: offset,
            app: "com.example.app",
            environment: "production",
            tokenHex: token,
            registeredAt: registeredAt,
            appPerSecond: appPerSecond,
            devicePerHour: devicePerHour
        )
    }

    private static func record(
        _ resultId: String,
        offset: Int64,
        _ result: [UInt8],
        feedback: [UInt8]? = nil
    ) -> RecordedResult {
        RecordedResult(
            ref: MessageRef(partition: TopicPartition(topic: "apn.requests", partition: 3), offset: offset),
            resultId: resultId,
            token: token,
            result: ResultMessage(key: nil, value: result),
            feedback: feedback.map { ResultMessage(key: nil, value: $0) }
        )
    }

    private func withStore(_ backend: StoreBackend, _ body: (NotificationStore) async throws -> Void) async throws {
        try await backend.withClients(1) { clients in
            let store = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-1")
            try await store.prepare()
            try await body(store)
        }
    }

    @Test("the feedback lock: one worker at a time polls an app's feedback, until the lock expires")
    func feedbackLockIsExclusiveAndExpires() async throws {
        try await StoreBackend.server.withClients(2) { clients in
            let a = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-a")
            let b = NotificationStore(redis: clients[1], prefix: "test:", owner: "worker-b")
            #expect(
                try await a.tryFeedbackLock(app: "com.example.app", environment: "production", ttlMilliseconds: 60_000)
            )
            #expect(
                try await !b.tryFeedbackLock(app: "com.example.app", environment: "production", ttlMilliseconds: 60_000)
            )
            #expect(
                try await !a.tryFeedbackLock(app: "com.example.app", environment: "production", ttlMilliseconds: 60_000)
            )
            // Another environment (or app) has a lock of its own.
            #expect(
                try await b.tryFeedbackLock(app: "com.example.app", environment: "sandbox", ttlMilliseconds: 60_000)
            )
            // The lock carries its expiry, so a worker that dies holding it does not stop polling for good.
            let key = "test:fl:com.example.app:production"
            let ttl = try await a.redis.send(["PTTL", key]).int ?? -1
            #expect(ttl > 0 && ttl <= 60_000)
            // Once it has expired, the other worker takes it.
            _ = try await a.redis.send(["PEXPIRE", key, "1"])
            let deadline = ContinuousClock.now + .seconds(5)
            while try await a.redis.send(["EXISTS", key]).int == 1, ContinuousClock.now < deadline {
                await Task.yield()
            }
            #expect(
                try await b.tryFeedbackLock(app: "com.example.app", environment: "production", ttlMilliseconds: 60_000)
            )
        }
    }

    @Test(arguments: StoreBackend.allCases)
    func aRecordedOutcomeIsReturnedWithItsFeedbackResult(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let result = Array(#"{"type":"transmissionError","status":410}"#.utf8)
            let feedback = Array(#"{"type":"feedback","timestamp":1700000000}"#.utf8)
            #expect(
                try await store.claim(
                    topic: "apn.requests",
                    [request("r1", offset: 7), request("r2", offset: 8)],
                    ttlSeconds: 60,
                    nowMilliseconds: 1_000
                ) == [.send, .send]
            )
            try await store.write(
                records: [
                    Self.record("r1", offset: 7, result, feedback: feedback),
                    Self.record("r2", offset: 8, Array(#"{"type":"transmitted"}"#.utf8)),
                ],
                unregistered: [],
                released: [],
                ttlSeconds: 60
            )
            // The same messages consumed again (after a crash before the commit).
            let again = try await store.claim(
                topic: "apn.requests",
                [request("r1", offset: 7), request("r2", offset: 8)],
                ttlSeconds: 60,
                nowMilliseconds: 2_000
            )
            #expect(
                again == [
                    .recorded(result: result, feedback: feedback),
                    .recorded(result: Array(#"{"type":"transmitted"}"#.utf8), feedback: nil),
                ]
            )
            // Another message with the same notification is a duplicate job.
            #expect(
                try await store.claim(
                    topic: "apn.requests",
                    [request("r1", offset: 9)],
                    ttlSeconds: 60,
                    nowMilliseconds: 3_000
                )
                    == [.duplicate]
            )
        }
    }

    @Test(arguments: StoreBackend.allCases)
    func aRecordedOutcomeBeforeItsPartitionsWrittenPositionNeedsNoResultAgain(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let result = Array(#"{"type":"transmitted"}"#.utf8)
            #expect(
                try await store.claim(
                    topic: "apn.requests",
                    [request("r1", offset: 7), request("r2", offset: 8)],
                    ttlSeconds: 60,
                    nowMilliseconds: 1_000
                ) == [.send, .send]
            )
            // Both recorded; every result before offset 8 of partition 3 is written.
            try await store.write(
                records: [
                    Self.record("r1", offset: 7, result),
                    Self.record("r2", offset: 8, result),
                ],
                unregistered: [],
                released: [],
                positions: [TopicPartitionOffset(topic: "apn.requests", partition: 3, offset: 8)],
                ttlSeconds: 60
            )
            // Consumed again by the partition's next owner: the first needs nothing, the second's
            // result may not have been written yet, so it is produced again.
            let again = try await store.claim(
                topic: "apn.requests",
                [request("r1", offset: 7), request("r2", offset: 8)],
                ttlSeconds: 60,
                nowMilliseconds: 2_000
            )
            #expect(again == [.written, .recorded(result: result, feedback: nil)])
            // A new owner that starts behind it does not move the position back.
            try await store.write(
                records: [],
                unregistered: [],
                released: [],
                positions: [TopicPartitionOffset(topic: "apn.requests", partition: 3, offset: 2)],
                ttlSeconds: 60
            )
            #expect(
                try await store.claim(
                    topic: "apn.requests",
                    [request("r1", offset: 7)],
                    ttlSeconds: 60,
                    nowMilliseconds: 3_000
                )
                    == [.written]
            )
        }
    }

    @Test(
        "hand-off marks: what one worker leaves for several partitions, the next reads back; a partition without one has none",
        arguments: StoreBackend.allCases
    )
    func handOffMarksAreReadBack(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let partitions = (0..<6).map { TopicPartition(topic: "apn.requests", partition: $0) }
            try await store.storeHandoffs(
                [
                    TopicPartitionOffset(topic: "apn.requests", partition: 1, offset: 40),
                    TopicPartitionOffset(topic: "apn.requests", partition: 4, offset: 7),
                ],
                at: 1_700_000_000_000,
                ttlSeconds: 60
            )
            let marks = try await store.handoffs(partitions)
            #expect(
                marks == [
                    partitions[1]: .init(offset: 40, at: 1_700_000_000_000),
                    partitions[4]: .init(offset: 7, at: 1_700_000_000_000),
                ]
            )
            // Kept as long as the records they stand for.
            let ttl = try await store.redis.send(["TTL", "test:ph:apn.requests:1"]).int ?? -1
            #expect(ttl > 0 && ttl <= 60)
            // A later hand-off of the same partition replaces it.
            try await store.storeHandoffs(
                [TopicPartitionOffset(topic: "apn.requests", partition: 1, offset: 55)],
                at: 1_700_000_001_000,
                ttlSeconds: 60
            )
            #expect(
                try await store.handoffs([partitions[1]]) == [partitions[1]: .init(offset: 55, at: 1_700_000_001_000)]
            )
        }
    }

    @Test(
        "many tokens in one claim: each notification once, wherever its slot; a released claim can be claimed again",
        arguments: StoreBackend.allCases
    )
    func manyTokensAreClaimedOnceEach(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let tokens = (0..<300).map { String(format: "%064x", $0 * 7919) }
            let requests = tokens.enumerated().map { request("m\($0)", offset: Int64(100 + $0 / 10), token: $1) }
            #expect(
                try await store.claim(topic: "apn.requests", requests, ttlSeconds: 60, nowMilliseconds: 1_000)
                    .allSatisfy { $0 == .send }
            )
            // The same requests again from this worker (a retry after a lost reply): its own claims.
            #expect(
                try await store.claim(topic: "apn.requests", requests, ttlSeconds: 60, nowMilliseconds: 1_000)
                    .allSatisfy { $0 == .resend }
            )
            // Another message with the same notifications: duplicates.
            let copies = tokens.enumerated().map { request("m\($0)", offset: 5_000, token: $1) }
            #expect(
                try await store.claim(topic: "apn.requests", copies, ttlSeconds: 60, nowMilliseconds: 1_000).allSatisfy
                { $0 == .duplicate }
            )
            // Released claims (never sent) are claimed afresh.
            try await store.write(
                records: [],
                unregistered: [],
                released: tokens.enumerated().map { ("m\($0)", $1) },
                ttlSeconds: 60
            )
            #expect(
                try await store.claim(topic: "apn.requests", requests, ttlSeconds: 60, nowMilliseconds: 1_000)
                    .allSatisfy { $0 == .send }
            )
            if backend == .cluster {
                // The keys are spread over the primaries, each token's keys in one slot.
                var counts: [Int] = []
                if case .cluster(let cluster) = store.redis {
                    for primary in cluster.primaries {
                        let parts = primary.split(separator: ":")
                        var configuration = RedisConfiguration(host: String(parts[0]), port: Int(parts[1])!)
                        configuration.commandTimeout = .seconds(5)
                        let direct = try await RedisConnection.connect(configuration)
                        counts.append(Int(try await direct.send(["DBSIZE"]).int ?? 0))
                        await direct.close()
                    }
                }
                #expect(counts.count == 3 && counts.allSatisfy { $0 > 50 }, "records per primary: \(counts)")
            }
        }
    }

    @Test(
        "usual notifications claimed with plain commands and the others by the script, in one batch, decide as the script alone",
        arguments: StoreBackend.allCases
    )
    func plainAndScriptedClaimsDecideAlike(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let tokens = (0..<40).map { String(format: "%064x", 5_000 + $0 * 31) }
            // Apple reported the first ten tokens unregistered at 1,500.
            try await store.write(
                records: [],
                unregistered: tokens[..<10].map { ("com.example.app", "production", $0, 1_500, "Unregistered") },
                released: [],
                ttlSeconds: 60
            )
            // Tokens 20–29 were claimed by this worker before (a lost reply).
            let before = tokens[20..<30].enumerated().map { request("p\($0 + 20)", offset: 40, token: $1) }
            #expect(
                try await store.claim(topic: "apn.requests", before, ttlSeconds: 60, nowMilliseconds: 1_000).allSatisfy
                { $0 == .send }
            )
            // Odd tokens give registeredAt 2,000 (after Apple's report), which only the script reads.
            let requests = tokens.enumerated().map { n, token in
                request("p\(n)", offset: 40, token: token, registeredAt: n % 2 == 1 ? 2_000 : nil)
            }
            let decisions = try await store.claim(
                topic: "apn.requests",
                requests,
                ttlSeconds: 60,
                nowMilliseconds: 2_000
            )
            let expected: [NotificationStore.ClaimDecision] = (0..<40).map { n in
                if n < 10 {
                    return n % 2 == 1 ? .send : .unregistered(TokenVerdict(reason: "Unregistered", since: 1_500))
                }
                return (20..<30).contains(n) ? .resend : .send
            }
            #expect(decisions == expected)
            // Every one is claimed now: another message with them is a duplicate.
            let copies = tokens.enumerated().map { request("p\($0)", offset: 41, token: $1) }
            #expect(
                try await store.claim(topic: "apn.requests", copies, ttlSeconds: 60, nowMilliseconds: 3_000).allSatisfy
                { $0 == .duplicate }
            )
        }
    }

    @Test(
        "a token verdict is kept, with its reason, in this generation's hash and the next, each for two periods",
        arguments: StoreBackend.allCases
    )
    func tokenVerdictsExpireByGeneration(_ backend: StoreBackend) async throws {
        try await withStore(backend) { base in
            let store = NotificationStore(
                redis: base.redis,
                prefix: "test:",
                owner: "worker-1",
                invalidTokenTTL: .seconds(100)
            )
            let tokens = (0..<2).map { String(format: "%064x", 9_000 + $0) }
            try await store.write(
                records: [],
                unregistered: [("com.example.app", "production", tokens[0], 1_500, "BadDeviceToken")],
                released: [],
                ttlSeconds: 60
            )
            let now = Int64(Date().timeIntervalSince1970)
            let generation = store.keys.verdictGeneration(at: now)
            let tag = store.keys.tag(token: tokens[0])
            for g in [generation, generation + 1] {
                var key: [UInt8] = []
                store.keys.appendUnregistered(
                    app: "com.example.app",
                    environment: "production",
                    generation: g,
                    tag: tag,
                    to: &key
                )
                let name = String(decoding: key, as: UTF8.self)
                #expect(try await store.redis.send(["HGET", name, tokens[0]]).string == "1500|BadDeviceToken")
                let ttl = try await store.redis.send(["TTL", name]).int ?? -1
                #expect((190...200).contains(ttl), "\(name) expires in \(ttl) s")
            }
            // Both claim paths find it (the second request has a registeredAt: the script).
            let decisions = try await store.claim(
                topic: "apn.requests",
                [
                    request("v0", offset: 1, token: tokens[0]),
                    request("v1", offset: 1, token: tokens[0], registeredAt: 1_000),
                ],
                ttlSeconds: 60,
                nowMilliseconds: 1_000
            )
            let verdict = TokenVerdict(reason: "BadDeviceToken", since: 1_500)
            #expect(decisions == [.unregistered(verdict), .unregistered(verdict)])
            #expect(store.keys.verdictGeneration(at: now + 200) == generation + 2)
        }
    }

    @Test(
        "the app's rate, the device's hourly limit and the unregistered store decide as on one server",
        arguments: StoreBackend.allCases
    )
    func limitsAndTheUnregisteredStore(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let tokens = (0..<6).map { String(format: "%064x", 1_000 + $0) }
            // Apple reported tokens[0] unregistered at 1,500; the job registered tokens[1] after that.
            try await store.write(
                records: [],
                unregistered: [
                    ("com.example.app", "production", tokens[0], 1_500, "Unregistered"),
                    ("com.example.app", "production", tokens[1], 1_500, "Unregistered"),
                ],
                released: [],
                ttlSeconds: 60
            )
            // 3 per second for the app: the claim takes 3 permits for the first three notifications;
            // the unregistered one does not use its permit and gives it back, so the app's counter
            // holds the two sent, and the other three wait for the next second.
            let first = tokens.enumerated().map {
                request("a\($0)", offset: 10, token: $1, appPerSecond: 3, registeredAt: $0 == 1 ? 2_000 : nil)
            }
            let decisions = try await store.claim(topic: "apn.requests", first, ttlSeconds: 60, nowMilliseconds: 7_000)
            #expect(
                decisions == [
                    .unregistered(TokenVerdict(reason: "Unregistered", since: 1_500)), .send, .send, .throttled,
                    .throttled, .throttled,
                ]
            )
            #expect(try await store.redis.send(["GET", "test:ra:com.example.app:7"]).string == "2")
            // The same second has room for one more.
            let more = try await store.claim(
                topic: "apn.requests",
                Array(first[3...]),
                ttlSeconds: 60,
                nowMilliseconds: 7_500
            )
            #expect(more == [.send, .throttled, .throttled])
            // The next second has room again.
            let later = try await store.claim(
                topic: "apn.requests",
                Array(first[4...]),
                ttlSeconds: 60,
                nowMilliseconds: 8_000
            )
            #expect(later == [.send, .send])
            #expect(try await store.redis.send(["GET", "test:ra:com.example.app:8"]).string == "2")
            // 2 per hour for a device: the third notification to it in the hour is refused.
            let device = (0..<3).map { request("d\($0)", offset: 20 + Int64($0), token: tokens[5], devicePerHour: 2) }
            #expect(
                try await store.claim(topic: "apn.requests", device, ttlSeconds: 60, nowMilliseconds: 9_000) == [
                    .send, .send, .rateLimited,
                ]
            )
        }
    }

    @Test(
        "another worker's claim for the same message waits while it lives, and is taken over once it is gone",
        arguments: StoreBackend.allCases
    )
    func aDeadWorkersClaimIsTakenOver(_ backend: StoreBackend) async throws {
        try await backend.withClients(2) { clients in
            let a = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-a#1")
            let b = NotificationStore(redis: clients[1], prefix: "test:", owner: "worker-b#1")
            try await a.prepare()
            try await a.heartbeat(ttlMilliseconds: 60_000)
            let requests = (0..<40).map { request("t\($0)", offset: 30, token: String(format: "%064x", 77 * $0)) }
            #expect(
                try await a.claim(topic: "apn.requests", requests, ttlSeconds: 60, nowMilliseconds: 1_000).allSatisfy {
                    $0 == .send
                }
            )
            #expect(
                try await b.claim(topic: "apn.requests", requests, ttlSeconds: 60, nowMilliseconds: 1_000).allSatisfy {
                    $0 == .busy
                }
            )
            try await a.retire()
            #expect(
                try await b.claim(topic: "apn.requests", requests, ttlSeconds: 60, nowMilliseconds: 1_000).allSatisfy {
                    $0 == .resend
                }
            )
            // Now b's: a (were it back) waits for b.
            try await b.heartbeat(ttlMilliseconds: 60_000)
            #expect(
                try await a.claim(topic: "apn.requests", requests, ttlSeconds: 60, nowMilliseconds: 1_000).allSatisfy {
                    $0 == .busy
                }
            )
        }
    }
}
