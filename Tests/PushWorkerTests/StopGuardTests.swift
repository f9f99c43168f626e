import PushLocalStack
import PushRedis
import Testing

@testable import PushKafka
@testable import PushWorker

/// The stop guard's rules without I/O (what a record charges, how suspects are split into
/// careful steps, which message is skipped), and its records in a real Redis.
@Suite(.timeLimit(.minutes(2))) struct StopGuardTests {
    static let partition = TopicPartition(topic: "apn.requests", partition: 3)

    static func messages(_ offsets: some Sequence<Int64>, partition: Int32 = 3) -> [KafkaMessage] {
        offsets.map {
            KafkaMessage(
                topic: "apn.requests",
                partition: partition,
                offset: $0,
                key: nil,
                value: [],
                headers: [],
                timestamp: 1_700_000_000_000
            )
        }
    }

    /// Each step as (kind, offsets, stops).
    static func shape(_ steps: [StopGuard.Step]) -> [String] {
        steps.map { step in
            switch step {
            case .together(let m): "together \(m.map { "\($0.partition):\($0.offset)" }.joined(separator: ","))"
            case .careful(_, let m, let stops): "careful \(m.map { "\($0.offset)" }.joined(separator: ",")) x\(stops)"
            case .skip(let m, let stops): "skip \(m.offset) x\(stops)"
            }
        }
    }

    @Test("without suspects a batch is processed together, as it always was")
    func withoutSuspectsEverythingGoesTogether() {
        let guardState = StopGuard(limit: 3)
        #expect(Self.shape(guardState.plan(Self.messages(0..<4))) == ["together 3:0,3:1,3:2,3:3"])
        #expect(guardState.plan([]).isEmpty)
    }

    @Test("a dead owner's record charges its messages from the written position on one stop more")
    func aRecordChargesOneStopFromTheWrittenPosition() {
        var guardState = StopGuard(limit: 3)
        let learned = guardState.learn(
            Self.partition,
            dead: ["a": .init(from: 10, to: 20, stops: 0), "b": .init(from: 5, to: 8, stops: 1)],
            written: 12
        )
        // b's messages are all written: nothing to suspect.
        #expect(learned == [.init(from: 12, to: 20, stops: 1)])
        #expect(guardState.charge(Self.partition, 11) == nil)
        #expect(guardState.charge(Self.partition, 12)?.stops == 1)
        #expect(guardState.deadOwners[Self.partition] == ["a", "b"])
        // One stop is what any kill looks like: processed together, the record says so.
        #expect(Self.shape(guardState.plan(Self.messages(11...14))) == ["together 3:11,3:12,3:13,3:14"])
        #expect(
            guardState.record(Self.partition, first: 11, last: 14, committable: 9)
                == .init(from: 9, to: 14, stops: 1)
        )
    }

    @Test("two stops: the suspects are processed one message per careful step, what follows them together")
    func twoStopsMakeCarefulSingles() {
        var guardState = StopGuard(limit: 3)
        guardState.learn(Self.partition, dead: ["a": .init(from: 10, to: 12, stops: 1)], written: nil)
        let other = Self.messages([7], partition: 4)
        let steps = guardState.plan(Self.messages(8...14) + other)
        #expect(
            Self.shape(steps) == [
                "together 3:8,3:9,4:7", "careful 10 x2", "careful 11 x2", "careful 12 x2", "together 3:13,3:14",
            ]
        )
    }

    @Test("many suspects are split into steps of about the square root of their number, aligned to the range")
    func manySuspectsMakeSquareRootSteps() {
        var guardState = StopGuard(limit: 3)
        guardState.learn(Self.partition, dead: ["a": .init(from: 100, to: 1_099, stops: 1)], written: nil)
        #expect(StopGuard.stepSize(.init(from: 100, to: 1_099, stops: 2)) == 32)
        #expect(StopGuard.stepSize(.init(from: 0, to: 63, stops: 2)) == 1)
        let steps = guardState.plan(Self.messages(120...170))
        // Groups of 32 from 100: the batch starts inside the first (100...131).
        let groups = steps.map { step -> [Int64] in
            guard case .careful(_, let messages, 2) = step else { return [] }
            return messages.map(\.offset)
        }
        #expect(groups == [Array(120...131), Array(132...163), Array(164...170)])
    }

    @Test(
        "a message alone in its step when charged its last stop, with the limit reached, is skipped; one in a group is not"
    )
    func onlyAMessageAloneAtTheLimitIsSkipped() {
        var alone = StopGuard(limit: 3)
        alone.learn(Self.partition, dead: ["c": .init(from: 11, to: 11, stops: 2)], written: nil)
        alone.learn(Self.partition, dead: ["b": .init(from: 10, to: 12, stops: 1)], written: nil)
        #expect(
            Self.shape(alone.plan(Self.messages(10...13))) == [
                "careful 10 x2", "skip 11 x3", "careful 12 x2", "together 3:13",
            ]
        )
        // Charged three stops, but with another message in flight at the last one: narrowed, not skipped.
        var group = StopGuard(limit: 3)
        group.learn(Self.partition, dead: ["c": .init(from: 11, to: 12, stops: 2)], written: nil)
        #expect(Self.shape(group.plan(Self.messages(11...12))) == ["careful 11 x3", "careful 12 x3"])
        // Below the limit, a message alone is processed again, alone.
        var below = StopGuard(limit: 4)
        below.learn(Self.partition, dead: ["c": .init(from: 11, to: 11, stops: 2)], written: nil)
        #expect(Self.shape(below.plan(Self.messages(11...11))) == ["careful 11 x3"])
        // Off: nothing is planned carefully.
        var off = StopGuard(limit: 0)
        off.learn(Self.partition, dead: ["c": .init(from: 11, to: 11, stops: 9)], written: nil)
        #expect(Self.shape(off.plan(Self.messages(11...11))) == ["together 3:11"])
    }

    @Test("suspects passed by the written results are dropped; the dead owners' records go once all are")
    func passedSuspectsAreDroppedAndTheirRecordsRemoved() {
        var guardState = StopGuard(limit: 3)
        guardState.learn(
            Self.partition,
            dead: ["a": .init(from: 10, to: 12, stops: 1), "b": .init(from: 30, to: 40, stops: 0)],
            written: nil
        )
        #expect(guardState.passed(Self.partition, committable: 13).isEmpty)
        #expect(guardState.charge(Self.partition, 12) == nil)
        #expect(guardState.charge(Self.partition, 30) != nil)
        #expect(guardState.passed(Self.partition, committable: 41) == ["a", "b"])
        #expect(guardState.suspects.isEmpty && guardState.deadOwners.isEmpty)
        #expect(guardState.passed(Self.partition, committable: 50).isEmpty)
    }

    @Test("a record covers a batch within its range that it charges at least as many stops")
    func aRecordCoversWhatItSaysAtLeast() {
        let record = StopGuard.Record(from: 10, to: 1_034, stops: 1)
        #expect(record.covers(10, 20, 0) && record.covers(12, 1_034, 1))
        #expect(!record.covers(9, 20, 0), "an earlier message in flight")
        #expect(!record.covers(10, 1_035, 0), "a later one")
        #expect(!record.covers(10, 20, 2), "more stops")
    }

    @Test("records are read back only as written; anything else is unreadable")
    func recordsParseStrictly() {
        #expect(StopGuard.Record(text: "1|5|2") == .init(from: 1, to: 5, stops: 2))
        for text in ["", "1|5", "5|1|0", "-1|5|0", "1|5|-1", "a|b|c", "1|5|2|3", "1|9223372036854775808|0"] {
            #expect(StopGuard.Record(text: text) == nil, "\(text)")
        }
        #expect(StopGuard.Suspects(from: 0, to: .max, stops: 1).span == .max)
    }

    @Test(
        "stop records in Redis: each owner's replaces its last, a removed one is gone, dead owners are told from live ones",
        arguments: StoreBackend.allCases
    )
    func recordsInRedis(_ backend: StoreBackend) async throws {
        try await backend.withClients(2) { clients in
            let a = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-a#1")
            let b = NotificationStore(redis: clients[1], prefix: "test:", owner: "worker-b#1")
            try await a.heartbeat(ttlMilliseconds: 60_000)
            let other = TopicPartition(topic: "apn.requests", partition: 9)
            try await a.writeStopRecords([(Self.partition, .init(from: 1, to: 4, stops: 0))], ttlSeconds: 60)
            try await a.writeStopRecords(
                [(Self.partition, .init(from: 3, to: 9, stops: 1)), (other, .init(from: 0, to: 0, stops: 0))],
                ttlSeconds: 60
            )
            try await b.writeStopRecords([(Self.partition, .init(from: 8, to: 8, stops: 2))], ttlSeconds: 60)
            let found = try await a.stopRecords([Self.partition, other, .init(topic: "apn.requests", partition: 1)])
            #expect(found.count == 2)
            #expect(
                found[Self.partition]?.records == [
                    a.stopRecordOwner: .init(from: 3, to: 9, stops: 1),
                    b.stopRecordOwner: .init(from: 8, to: 8, stops: 2),
                ]
            )
            // b never beat: dead; a is alive.
            #expect(
                try await a.deadStopRecordOwners([a.stopRecordOwner, b.stopRecordOwner, "zz"])
                    == [b.stopRecordOwner, "zz"]
            )
            // Kept two dedupe TTLs (here the 60 s given).
            let ttl = try await a.redis.send(["TTL", "test:pp:apn.requests:3"]).int ?? -1
            #expect(ttl > 0 && ttl <= 60)
            // a hands the partition on: its record goes, b's stays until its reader removes it.
            try await a.removeStopRecords([Self.partition])
            #expect(
                try await a.stopRecords([Self.partition])[Self.partition]?.records.keys.sorted() == [b.stopRecordOwner]
            )
            try await a.writeStopRecords([], ttlSeconds: 60, removing: [(Self.partition, [b.stopRecordOwner])])
            #expect(try await a.stopRecords([Self.partition])[Self.partition] == nil)
            // The written position comes with them.
            _ = try await a.redis.send(["SET", "test:pw:apn.requests:9", "17"])
            #expect(try await a.stopRecords([other])[other]?.written == 17)
        }
    }
}
