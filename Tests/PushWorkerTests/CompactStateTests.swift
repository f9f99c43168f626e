import Foundation
import PushKafka
import PushRedis
import Testing

@testable import PushWorker

/// A settled notification keeps only its claim, 16 bytes in a small bucket, once its message is
/// before its partition's written position (`docs/architecture.md#compact-state`): duplicates
/// are still recognised, the message consumed again still needs nothing (or finds its outcome
/// before then), whoever's claim it finds, and a claim that meets a settled notification
/// leaves no claim behind. On a real `redis-server` and a real Redis Cluster.
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

    private static func settled(_ n: Int, offset: Int64, generation: Int64, store: NotificationStore) -> SettledRecord {
        SettledRecord(
            fingerprint: NotificationFingerprint(resultId: "compact-\(n)"),
            partition: TopicPartition(topic: topic, partition: 3),
            offset: offset,
            outcomeGeneration: generation
        )
    }

    /// Claims, records and writes notifications 0..<count of one message each (offsets
    /// 10...), then stores the written position past them, and deletes their outcomes, as the
    /// result stage does over its next two writes.
    private func settle(_ count: Int, store: NotificationStore, ttlSeconds: Int = 600) async throws {
        let requests = (0..<count).map { Self.request($0, offset: Int64(10 + $0)) }
        let claimed = try await store.claim(topic: Self.topic, requests, ttlSeconds: ttlSeconds, nowMilliseconds: 1_000)
        #expect(claimed.allSatisfy { $0 == .send })
        let generation = store.outcomeGeneration(ttlSeconds: ttlSeconds)
        try await store.write(
            records: (0..<count).map { Self.record($0, offset: Int64(10 + $0)) },
            unregistered: [],
            released: [],
            outcomeGeneration: generation,
            ttlSeconds: ttlSeconds
        )
        let settled = (0..<count).map { Self.settled($0, offset: Int64(10 + $0), generation: generation, store: store) }
        try await store.write(
            records: [],
            unregistered: [],
            released: [],
            positions: [TopicPartitionOffset(topic: Self.topic, partition: 3, offset: Int64(10 + count))],
            ttlSeconds: ttlSeconds
        )
        #expect(try await outcomes(store, generation: generation) == count, "deleted with the next write, not this one")
        try await store.write(records: [], unregistered: [], released: [], forgotten: settled, ttlSeconds: ttlSeconds)
    }

    /// The claim key of notification `n` in generation `generation`.
    private static func claims(_ n: Int, store: NotificationStore, generation: Int64, ttlSeconds: Int = 600) -> [UInt8]
    {
        let layout = store.fingerprintLayout(ttlSeconds: ttlSeconds)
        return store.keys.claims(
            generation: generation,
            bucket: layout.bucket(of: NotificationFingerprint(resultId: "compact-\(n)")),
            tag: store.keys.tag(token: token(n))
        )
    }

    /// The states of notifications 0..<count in this generation and the one before (`P` for
    /// any claim, `<claim id><message key>`), counted.
    private func states(_ count: Int, store: NotificationStore, ttlSeconds: Int = 600) async throws -> [String: Int] {
        let generation = store.outcomeGeneration(ttlSeconds: ttlSeconds)
        var states: [String: Int] = [:]
        for g in [generation, generation - 1] {
            let replies = try await store.redis.pipeline(
                (0..<count).map { n in
                    [
                        Array("HGET".utf8), Self.claims(n, store: store, generation: g),
                        Array(String(NotificationFingerprint(resultId: "compact-\(n)").member).utf8),
                    ]
                }
            )
            for state in replies.compactMap(\.bytes) {
                states[state.count == 16 ? "P" : String(decoding: state, as: UTF8.self), default: 0] += 1
            }
        }
        return states
    }

    /// The outcomes kept for partition 3 in `generation`.
    private func outcomes(_ store: NotificationStore, generation: Int64) async throws -> Int {
        let key = store.keys.outcomes(topic: Self.topic, partition: 3, generation: generation)
        return Int(try await store.redis.send([Array("HLEN".utf8), key]).int ?? -1)
    }

    @Test(
        "a settled notification keeps only its claim: consumed again it needs nothing, a duplicate job is recognised, a new one is sent",
        arguments: StoreBackend.allCases
    )
    func aSettledNotificationKeepsOnlyItsClaim(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            try await settle(200, store: store)
            #expect(try await states(200, store: store) == ["P": 200])
            #expect(try await outcomes(store, generation: store.outcomeGeneration(ttlSeconds: 600)) == 0)
            // The written position, which says the claims' results are written, lives as long as
            // a claim can: two periods.
            let position = store.keys.writtenPosition(topic: Self.topic, partition: 3)
            let positionTTL = try await store.redis.send([Array("TTL".utf8), position]).int ?? -1
            #expect((1_190...1_200).contains(positionTTL), "\(positionTTL)")
            // Small buckets stay listpacks: about 28 bytes a settled notification.
            let bucket = Self.claims(0, store: store, generation: store.outcomeGeneration(ttlSeconds: 600))
            var encoding = RedisCommands(capacity: 64)
            encoding.begin(words: ["OBJECT", "ENCODING"], arguments: 1)
            encoding.appendKey(bucket)
            #expect(try await store.redis.pipeline(encoding, scripts: []).first?.string == "listpack")
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
            // No claim is left behind.
            #expect(try await states(200, store: store) == ["P": 200])
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
        "before its position is written, a message consumed again finds its outcome, whoever claimed it; a duplicate job finds none",
        arguments: StoreBackend.allCases
    )
    func anUnwrittenOutcomeIsFoundByItsMessage(_ backend: StoreBackend) async throws {
        try await backend.withClients(2) { clients in
            let store = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-1")
            let other = NotificationStore(redis: clients[1], prefix: "test:", owner: "worker-2")
            try await store.prepare()
            try await store.heartbeat(ttlMilliseconds: 60_000)
            let requests = (0..<20).map { Self.request($0, offset: Int64(10 + $0)) }
            #expect(
                try await store.claim(topic: Self.topic, requests, ttlSeconds: 600, nowMilliseconds: 1_000).allSatisfy {
                    $0 == .send
                }
            )
            try await store.write(
                records: (0..<20).map { Self.record($0, offset: Int64(10 + $0)) },
                unregistered: [],
                released: [],
                outcomeGeneration: store.outcomeGeneration(ttlSeconds: 600),
                ttlSeconds: 600
            )
            // The claims still name worker-1 (alive) until they settle: another worker finds
            // the outcome, and so does worker-1 itself.
            for claimer in [other, store] {
                let decisions = try await claimer.claim(
                    topic: Self.topic,
                    requests,
                    ttlSeconds: 600,
                    nowMilliseconds: 2_000
                )
                for (n, decision) in decisions.enumerated() {
                    #expect(
                        decision == .recorded(result: Self.record(n, offset: Int64(10 + n)).result.value, feedback: nil)
                    )
                }
            }
            let duplicates = try await other.claim(
                topic: Self.topic,
                (0..<20).map { Self.request($0, offset: 9_000) },
                ttlSeconds: 600,
                nowMilliseconds: 2_000
            )
            #expect(duplicates.allSatisfy { $0 == .duplicate })
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
            #expect(try await states(30, store: store) == ["P": 30])
        }
    }

    @Test(
        "a claim released becomes F and is claimed afresh by the message consumed again",
        arguments: StoreBackend.allCases
    )
    func aReleasedClaimIsClaimedAfresh(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let requests = (0..<10).map { Self.request($0, offset: Int64(10 + $0)) }
            #expect(
                try await store.claim(topic: Self.topic, requests, ttlSeconds: 600, nowMilliseconds: 1_000).allSatisfy {
                    $0 == .send
                }
            )
            try await store.write(
                records: [],
                unregistered: [],
                released: (0..<10).map { ("compact-\($0)", Self.token($0)) },
                ttlSeconds: 600
            )
            #expect(try await states(10, store: store) == ["F": 10])
            #expect(
                try await store.claim(topic: Self.topic, requests, ttlSeconds: 600, nowMilliseconds: 2_000).allSatisfy {
                    $0 == .send
                }
            )
            #expect(try await states(10, store: store) == ["P": 10])
        }
    }

    @Test(
        "a claim released in the previous generation is claimed afresh in this one: sent, not taken for a resend",
        arguments: StoreBackend.allCases
    )
    func releasedInThePreviousGenerationIsSent(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let ttl = 600
            let generation = store.fingerprintLayout(ttlSeconds: ttl)
                .generation(at: Int64(Date().timeIntervalSince1970))
            // Notification 4 claimed by this worker in the generation before, then released
            // (never written to a gateway), as ``NotificationStore/write`` leaves it.
            let previous = Self.claims(4, store: store, generation: generation - 1)
            let member = Array(String(NotificationFingerprint(resultId: "compact-4").member).utf8)
            _ = try await store.redis.send([Array("HSET".utf8), previous, member, Array("F".utf8)])
            let decisions = try await store.claim(
                topic: Self.topic,
                [Self.request(4, offset: 20)],
                ttlSeconds: ttl,
                nowMilliseconds: 3_000
            )
            #expect(decisions == [.send])
            // Consumed again, the claim just made is this worker's own: a resend.
            let again = try await store.claim(
                topic: Self.topic,
                [Self.request(4, offset: 20)],
                ttlSeconds: ttl,
                nowMilliseconds: 3_000
            )
            #expect(again == [.resend])
        }
    }

    @Test(
        "a state in the previous generation is still found; a settled one wins over a claim left there; buckets expire two periods after their generation began",
        arguments: StoreBackend.allCases
    )
    func statesLiveTwoGenerations(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let ttl = 600
            let layout = store.fingerprintLayout(ttlSeconds: ttl)
            let now = Int64(Date().timeIntervalSince1970)
            let generation = layout.generation(at: now)
            func member(_ n: Int) -> [UInt8] {
                Array(String(NotificationFingerprint(resultId: "compact-\(n)").member).utf8)
            }
            // Notification 0 settled in the previous generation, written there directly.
            let previous = Self.claims(0, store: store, generation: generation - 1)
            _ = try await store.redis.send([Array("HSET".utf8), previous, member(0), Array("D".utf8)])
            let decisions = try await store.claim(
                topic: Self.topic,
                [Self.request(0, offset: 8_000), Self.request(1, offset: 8_000)],
                ttlSeconds: ttl,
                nowMilliseconds: 3_000
            )
            #expect(decisions == [.duplicate, .send])
            // The claim the first round made for notification 0 gave way.
            let current = Self.claims(0, store: store, generation: generation)
            #expect(try await store.redis.send([Array("HGET".utf8), current, member(0)]).string == "F")

            // Notification 2 claimed in the previous generation by a dead worker, its message
            // before the written position: written.
            let claimedBefore = Self.claims(2, store: store, generation: generation - 1)
            _ = try await store.redis.send([
                Array("HSET".utf8), claimedBefore, member(2),
                ClaimNames.owner("gone#x")
                    + ClaimNames.message(topic: Self.topic, partition: 3, offset: 12),
            ])
            _ = try await store.redis.send([
                Array("SET".utf8), store.keys.writtenPosition(topic: Self.topic, partition: 3), Array("13".utf8),
            ])
            let settled = try await store.claim(
                topic: Self.topic,
                [Self.request(2, offset: 12)],
                ttlSeconds: ttl,
                nowMilliseconds: 3_000
            )
            #expect(settled == [.written])

            // This generation's buckets are given their expiry when written.
            let outcomeGeneration = store.outcomeGeneration(ttlSeconds: ttl)
            try await store.write(
                records: [Self.record(1, offset: 8_000)],
                unregistered: [],
                released: [],
                outcomeGeneration: outcomeGeneration,
                ttlSeconds: ttl
            )
            let bucket = Self.claims(
                1,
                store: store,
                generation: layout.generation(at: Int64(Date().timeIntervalSince1970))
            )
            let expiresAt = try #require(try await store.redis.send([Array("EXPIRETIME".utf8), bucket]).int)
            #expect(expiresAt == layout.expiry(of: layout.generation(at: Int64(Date().timeIntervalSince1970))))
            #expect(expiresAt > now + Int64(ttl) - 1 && expiresAt <= now + 2 * Int64(ttl))
            let outcomes = store.keys.outcomes(topic: Self.topic, partition: 3, generation: outcomeGeneration)
            let outcomesExpireAt = try #require(try await store.redis.send([Array("EXPIRETIME".utf8), outcomes]).int)
            #expect(outcomesExpireAt == layout.expiry(of: outcomeGeneration))
        }
    }

    @Test(
        "a claim found without its outcome is written before its partition's written position; at or after it, a dead owner's is resent and a live owner's waits",
        arguments: StoreBackend.allCases
    )
    func aClaimWithoutAnOutcomeIsDecidedByTheWrittenPosition(_ backend: StoreBackend) async throws {
        try await backend.withClients(3) { clients in
            let store = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-1")
            let live = NotificationStore(redis: clients[1], prefix: "test:", owner: "worker-2")
            let dead = NotificationStore(redis: clients[2], prefix: "test:", owner: "worker-3")
            try await store.prepare()
            try await live.heartbeat(ttlMilliseconds: 60_000)
            // Notifications n of `range`, each of its own message at offset 10 + n of partition 3,
            // claimed by `by` after the written position is set to `position`.
            typealias Decisions = [NotificationStore.ClaimDecision]
            func claim(_ by: NotificationStore, _ range: Range<Int>, position: Int64? = nil) async throws -> Decisions {
                if let position {
                    _ = try await store.redis.send([
                        Array("SET".utf8), store.keys.writtenPosition(topic: Self.topic, partition: 3),
                        Array(String(position).utf8),
                    ])
                }
                return try await by.claim(
                    topic: Self.topic,
                    range.map { Self.request($0, offset: Int64(10 + $0)) },
                    ttlSeconds: 600,
                    nowMilliseconds: 1_000
                )
            }
            // worker-2 (alive) claims notifications 0..<10 and worker-3 (never alive) 10..<20;
            // their outcomes are never recorded (as after settling, which deletes them).
            #expect(try await claim(live, 0..<10).allSatisfy { $0 == .send })
            #expect(try await claim(dead, 10..<20).allSatisfy { $0 == .send })
            let live10 = try await claim(store, 0..<10, position: 15)
            #expect(live10 == Array(repeating: .written, count: 5) + Array(repeating: .busy, count: 5))
            let dead10 = try await claim(store, 10..<20, position: 25)
            #expect(dead10 == Array(repeating: .written, count: 5) + Array(repeating: .resend, count: 5))
            // Taken over, the claims now name worker-1: consumed again, still written or resent.
            #expect(try await claim(store, 10..<20) == dead10)
        }
    }

    @Test(
        "an earlier build's claims: its settled D and its claims of other messages are duplicates; its claim of this message is taken over, written before the position",
        arguments: StoreBackend.allCases
    )
    func claimsOfAnEarlierBuildAreRead(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let generation = store.outcomeGeneration(ttlSeconds: 600)
            let mark = NotificationStore.legacyTopicMark(Self.topic)
            #expect(mark.count == 6 && mark.hasPrefix("|") && mark.hasSuffix("|"))
            // Notifications 0..<4, as an earlier build left them: settled; claimed by message 3@12
            // (before the written position, 13), by 3@30 (after it), by 3@99 (another message).
            let states = ["D", "old#1\(mark)3|12", "old#1\(mark)3|30", "old#1\(mark)3|99"]
            for (n, state) in states.enumerated() {
                _ = try await store.redis.send([
                    Array("HSET".utf8), Self.claims(n, store: store, generation: generation),
                    Array(String(NotificationFingerprint(resultId: "compact-\(n)").member).utf8), Array(state.utf8),
                ])
            }
            _ = try await store.redis.send([
                Array("SET".utf8), store.keys.writtenPosition(topic: Self.topic, partition: 3), Array("13".utf8),
            ])
            let decisions = try await store.claim(
                topic: Self.topic,
                [
                    Self.request(0, offset: 50), Self.request(1, offset: 12), Self.request(2, offset: 30),
                    Self.request(3, offset: 30),
                ],
                ttlSeconds: 600,
                nowMilliseconds: 1_000
            )
            #expect(decisions == [.duplicate, .written, .resend, .duplicate])
            // The two taken over are this build's claims now.
            #expect(try await self.states(4, store: store) == ["D": 1, "P": 2, "old#1\(mark)3|99": 1])
        }
    }

    @Test(
        "a long owner is cut to 24 bytes; a claim names its owner and its message in 8 bytes each"
    )
    func longOwnersAreCut() {
        #expect(NotificationStore.claimOwner("worker-1#ab12") == "worker-1#ab12")
        let long = NotificationStore.claimOwner("apn-worker-7d9f8b6c5-x2x9z#0123456789abcdef")
        #expect(long.utf8.count == 24)
        #expect(long.hasPrefix("apn-wor~"))
        #expect(long != NotificationStore.claimOwner("apn-worker-7d9f8b6c5-x2x9z#0123456789abcdee"))
        #expect(ClaimNames.owner(long).count == 8)
        #expect(ClaimNames.owner(long) != ClaimNames.owner("worker-1#ab12"))
        // A message is named by 8 bytes of its topic, partition and offset.
        let key = ClaimNames.message(topic: "apn.requests", partition: 3, offset: 12)
        #expect(key.count == 8)
        #expect(key == ClaimNames.message(topic: "apn.requests", partition: 3, offset: 12))
        var keys: Set<[UInt8]> = [key]
        for topic in ["apn.requests", "apn.requests.high"] {
            for partition in Int32(0)..<64 {
                for offset in Int64(0)..<64 {
                    keys.insert(ClaimNames.message(topic: topic, partition: partition, offset: offset))
                }
            }
        }
        #expect(keys.count == 2 * 64 * 64, "every message has a key of its own")
    }

    @Test(
        "fingerprints: 64 bits of member and 64 of bucket, a worker id's own or its SHA-256, spread evenly over the buckets"
    )
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
        // A worker's result ids are the hex of a digest: their own bits are the fingerprint,
        // spread as evenly.
        var idCounts = [Int](repeating: 0, count: 64)
        var idMembers = Set<Int64>()
        for n in 0..<64_000 {
            let id = WorkerResult.notificationId(jobId: "job-\(n)", token: Self.token(n))
            let fingerprint = NotificationFingerprint(resultId: id)
            #expect(fingerprint.member == Int64(bitPattern: UInt64(id.prefix(16), radix: 16)!))
            #expect(fingerprint.bucketBits == UInt64(id.suffix(16), radix: 16)!)
            idCounts[layout.bucket(of: fingerprint)] += 1
            idMembers.insert(fingerprint.member)
        }
        #expect(idMembers.count == 64_000)
        #expect(idCounts.allSatisfy { (800...1_200).contains($0) }, "\(idCounts)")
        // Any other id, uppercase hex or a digit short included, is hashed (the hashed ones are
        // the first test's above).
        let others = [
            "a", String(repeating: "A", count: 32), String(repeating: "a", count: 31),
            String(repeating: "a", count: 33),
            "0123456789abcdef0123456789abcdeg",
        ]
        for id in others { #expect(NotificationFingerprint.digestBits(id) == nil, "\(id)") }
        #expect(
            NotificationFingerprint.digestBits(String(repeating: "f", count: 32)).map { [$0.0, $0.1] } == [.max, .max]
        )
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
