import Foundation
import PushKafka
import PushRedis
import Testing

@testable import PushWorker

/// A settled notification's record gives way to its fingerprint once its message is before its
/// partition's written position (`docs/architecture.md#compact-state`): duplicates are still
/// recognised, the message consumed again still needs nothing, and a claim that meets a
/// fingerprint leaves no claim behind. On a real `redis-server` and a real Redis Cluster.
@Suite(.timeLimit(.minutes(3))) struct CompactStateTests {
    private static let topic = "apn.requests"

    private static func token(_ n: Int) -> String { String(format: "%064x", 0xC0_FFEE + n * 7919) }

    private static func request(
        _ n: Int,
        offset: Int64,
        registeredAt: Int64? = nil,
        devicePerHour: Int = 0,
        appPerSecond: Int = 0
    ) -> NotificationStore.ClaimRequest {
        .init(
            resultId: "compact-\(n)",
            partition: 3,
            offset: offset,
            app: "com.example.app",
            environment: "production",
            tokenHex: token(n),
            registeredAt: registeredAt,
            appPerSecond: appPerSecond,
            devicePerHour: devicePerHour
        )
    }

    private static func record(_ n: Int, offset: Int64) -> RecordedResult {
        RecordedResult(
            ref: MessageRef(partition: TopicPartition(topic: topic, partition: 3), offset: offset),
            resultId: "compact-\(n)",
            token: token(n),
            result: ResultMessage(key: nil, value: Array(#"{"type":"transmitted","n":\#(n)}"#.utf8))
        )
    }

    private func withStore(_ backend: StoreBackend, _ body: (NotificationStore) async throws -> Void) async throws {
        try await backend.withClients(1) { clients in
            let store = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-1")
            try await store.prepare()
            try await body(store)
        }
    }

    /// Claims, records and writes notifications 0..<count of one message each (offsets
    /// 10...), then stores the written position past them and compacts them.
    private func settle(_ count: Int, store: NotificationStore, ttlSeconds: Int = 600) async throws {
        let requests = (0..<count).map { Self.request($0, offset: Int64(10 + $0)) }
        let claimed = try await store.claim(topic: Self.topic, requests, ttlSeconds: ttlSeconds, nowMilliseconds: 1_000)
        #expect(claimed.allSatisfy { $0 == .send })
        try await store.write(
            records: (0..<count).map { Self.record($0, offset: Int64(10 + $0)) },
            unregistered: [],
            released: [],
            ttlSeconds: ttlSeconds
        )
        try await store.write(
            records: [],
            unregistered: [],
            released: [],
            positions: [TopicPartitionOffset(topic: Self.topic, partition: 3, offset: Int64(10 + count))],
            compacted: (0..<count).map { SettledRecord(resultId: "compact-\($0)", token: Self.token($0)) },
            ttlSeconds: ttlSeconds
        )
    }

    /// How many of notifications 0..<count still have a record.
    private func records(_ count: Int, store: NotificationStore) async throws -> Int {
        let replies = try await store.redis.pipeline(
            (0..<count).map { n in
                [
                    Array("EXISTS".utf8),
                    store.keys.record(resultId: "compact-\(n)", tag: store.keys.tag(token: Self.token(n))),
                ]
            }
        )
        return replies.reduce(0) { $0 + Int($1.int ?? 0) }
    }

    @Test(
        "a settled record gives way to its fingerprint: consumed again it needs nothing, a duplicate job is recognised, a new one is sent",
        arguments: StoreBackend.allCases
    )
    func aSettledRecordGivesWayToItsFingerprint(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            try await settle(200, store: store)
            #expect(try await records(200, store: store) == 0)
            // The same messages consumed again (a crash before the commit): nothing to do.
            let again = try await store.claim(
                topic: Self.topic,
                (0..<200).map { Self.request($0, offset: Int64(10 + $0)) },
                ttlSeconds: 600,
                nowMilliseconds: 2_000
            )
            #expect(again.allSatisfy { $0 == .written }, "\(Set(again.map { "\($0)" }))")
            // The same notifications in later messages (a duplicate job): no send, no result.
            let duplicates = try await store.claim(
                topic: Self.topic,
                (0..<200).map { Self.request($0, offset: 5_000) },
                ttlSeconds: 600,
                nowMilliseconds: 2_000
            )
            #expect(duplicates.allSatisfy { $0 == .duplicate }, "\(Set(duplicates.map { "\($0)" }))")
            // The claims those lookups made were deleted again: no record is left behind.
            #expect(try await records(200, store: store) == 0)
            // Notifications never settled are new.
            let fresh = try await store.claim(
                topic: Self.topic,
                (200..<400).map { Self.request($0, offset: 6_000) },
                ttlSeconds: 600,
                nowMilliseconds: 2_000
            )
            #expect(fresh.allSatisfy { $0 == .send })
        }
    }

    @Test(
        "claims through the script (a registration time, a device limit, no permit) also meet the fingerprint and leave no claim",
        arguments: StoreBackend.allCases
    )
    func scriptedClaimsMeetTheFingerprint(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            try await settle(30, store: store)
            let requests = (0..<30).map { n in
                switch n % 3 {
                case 0: Self.request(n, offset: 7_000, registeredAt: 1)
                case 1: Self.request(n, offset: 7_000, devicePerHour: 5)
                default: Self.request(n, offset: 7_000, appPerSecond: 10)
                }
            }
            let decisions = try await store.claim(topic: Self.topic, requests, ttlSeconds: 600, nowMilliseconds: 3_000)
            #expect(decisions.allSatisfy { $0 == .duplicate }, "\(decisions)")
            #expect(try await records(30, store: store) == 0)
        }
    }

    @Test(
        "a fingerprint written in the previous generation is still found; its bucket expires two periods after its generation began",
        arguments: StoreBackend.allCases
    )
    func fingerprintsLiveTwoGenerations(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let ttl = 600
            let layout = store.fingerprintLayout(ttlSeconds: ttl)
            let now = Int64(Date().timeIntervalSince1970)
            let generation = layout.generation(at: now)
            // Notification 0 settled in the previous generation, written there directly.
            let fingerprint = NotificationFingerprint(resultId: "compact-0")
            var key: [UInt8] = []
            store.keys.appendFingerprints(
                generation: generation - 1,
                bucket: layout.bucket(of: fingerprint),
                tag: store.keys.tag(token: Self.token(0)),
                to: &key
            )
            _ = try await store.redis.send([Array("SADD".utf8), key, Array(String(fingerprint.member).utf8)])
            let decisions = try await store.claim(
                topic: Self.topic,
                [Self.request(0, offset: 8_000), Self.request(1, offset: 8_000)],
                ttlSeconds: ttl,
                nowMilliseconds: 3_000
            )
            #expect(decisions == [.duplicate, .send])

            // This generation's buckets are given their expiry when written.
            try await store.write(
                records: [Self.record(1, offset: 8_000)],
                unregistered: [],
                released: [],
                compacted: [SettledRecord(resultId: "compact-1", token: Self.token(1))],
                ttlSeconds: ttl
            )
            let settled = NotificationFingerprint(resultId: "compact-1")
            var current: [UInt8] = []
            store.keys.appendFingerprints(
                generation: layout.generation(at: Int64(Date().timeIntervalSince1970)),
                bucket: layout.bucket(of: settled),
                tag: store.keys.tag(token: Self.token(1)),
                to: &current
            )
            let expiresAt = try #require(try await store.redis.send([Array("EXPIRETIME".utf8), current]).int)
            #expect(expiresAt == layout.expiry(of: layout.generation(at: Int64(Date().timeIntervalSince1970))))
            #expect(expiresAt > now + Int64(ttl) - 1 && expiresAt <= now + 2 * Int64(ttl))
            #expect(try await records(2, store: store) == 0)
        }
    }

    @Test("fingerprints: 64 bits of member and 64 of bucket from SHA-256, spread evenly over the buckets")
    func fingerprintsSpreadEvenly() {
        let layout = FingerprintLayout(period: 86_400, buckets: 64, isCluster: false)
        var counts = [Int](repeating: 0, count: 64)
        var members = Set<Int64>()
        for n in 0..<64_000 {
            let fingerprint = NotificationFingerprint(resultId: "job-\(n):\(Self.token(n))")
            counts[layout.bucket(of: fingerprint)] += 1
            members.insert(fingerprint.member)
        }
        #expect(members.count == 64_000)
        // 1,000 expected per bucket; a uniform spread stays within ±20% (about 6 standard deviations).
        #expect(counts.allSatisfy { (800...1_200).contains($0) }, "\(counts)")
        #expect(NotificationFingerprint(resultId: "a") == NotificationFingerprint(resultId: "a"))
        #expect(NotificationFingerprint(resultId: "a") != NotificationFingerprint(resultId: "b"))
        // On a cluster each of the 16,384 tags has its share of the buckets.
        #expect(FingerprintLayout(period: 60, buckets: 65_536, isCluster: true).bucketsPerTag == 4)
        #expect(FingerprintLayout(period: 60, buckets: 1_000, isCluster: true).bucketsPerTag == 1)
    }

    @Test("a bucket's expiry is set once per generation, and again after a failed write")
    func expiriesAreSetOncePerGeneration() {
        var expiries = FingerprintExpiries()
        var answers: [Bool] = []
        answers.append(expiries.needsExpiry(place: 5, generation: 1, places: 64))
        answers.append(expiries.needsExpiry(place: 5, generation: 1, places: 64))
        answers.append(expiries.needsExpiry(place: 6, generation: 1, places: 64))
        expiries.forget([6], generation: 1)
        answers.append(expiries.needsExpiry(place: 6, generation: 1, places: 64))
        answers.append(expiries.needsExpiry(place: 5, generation: 2, places: 64))
        #expect(answers == [true, false, true, true, true])
    }
}
