import APNSCore
import Foundation
import PushConfiguration
import PushRedis
import Testing

@testable import PushKafka
@testable import PushWorker

/// The parked topic's records (``ParkedRecord``) and what intake makes of them: the job as it
/// was consumed, only the tokens it still owes, each with the result id it had before.
@Suite(.timeLimit(.minutes(1))) struct ParkedRecordTests {
    static let owed = String(repeating: "ab", count: 32)
    static let answered = String(repeating: "cd", count: 32)
    static let job = #"{"id":"j1","app":"a","tokens":["\#(answered)","\#(owed)"],"alert":"Hi","summary":true}"#

    @Test("A record reads back as written: origin, time, owed tokens and the job's bytes")
    func aRecordRoundTrips() throws {
        let record = ParkedRecord(
            origin: TopicPartitionOffset(topic: "apn.requests", partition: 7, offset: 123_456),
            movedAt: 1_700_000_000_999,
            tokens: [Self.owed],
            job: Array(Self.job.utf8)
        )
        #expect(try ParkedRecord(decoding: record.encoded()) == record)
        #expect(ParkedRecord.staleAt(of: record.encoded()) == nil)
        var stale = record
        stale.staleAt = 1_700_000_060_000
        #expect(try ParkedRecord(decoding: stale.encoded()) == stale)
        #expect(ParkedRecord.staleAt(of: stale.encoded()) == 1_700_000_060_000, "read from the envelope alone")
        let key = ParkedRecord.key(PoolKey(app: "com.example/app", environment: .sandbox), partition: 7)
        #expect(String(decoding: key, as: UTF8.self) == "com.example/app/sandbox/7")
        #expect(ParkedRecord.pool(key: key) == PoolKey(app: "com.example/app", environment: .sandbox))
        #expect(ParkedRecord.pool(key: Array("no-environment".utf8)) == nil)
        #expect(ParkedRecord.pool(key: Array("a/production".utf8)) == nil, "no partition")
        #expect(ParkedRecord.pool(key: Array("a/staging/3".utf8)) == nil)
    }

    @Test("A record that cannot be read says why")
    func unreadableRecordsSayWhy() {
        func why(_ text: String) -> String? {
            do {
                _ = try ParkedRecord(decoding: Array(text.utf8))
                return nil
            } catch {
                return error.message
            }
        }
        #expect(why("{}") == "it has no envelope line")
        #expect(why("{\n{}")?.hasPrefix("its envelope is not JSON") == true)
        #expect(why("{\"tokens\":[]}\n{}")?.contains("lacks origin.topic") == true)
        let badToken = #"{"movedAt":1,"origin":{"offset":1,"partition":0,"topic":"t"},"tokens":[1]}"# + "\n{}"
        #expect(why(badToken) == "a token of its envelope is not a string")
    }

    @Test("Intake reads a parked record as its job with the owed tokens only, their result ids unchanged, no summary")
    func intakeReadsOnlyTheOwedTokens() async throws {
        var configuration = try StageTests().intakeConfiguration()
        configuration.kafka.parkedTopic = "apn.requests.parked"
        let intake = IntakeStage(
            configuration: configuration,
            factory: ResultFactory(worker: "w1", now: { 1_700_000_000_123 }),
            logger: .init(label: "test")
        )
        let record = ParkedRecord(
            origin: TopicPartitionOffset(topic: "apn.requests", partition: 3, offset: 40),
            movedAt: 1_700_000_000_100,
            tokens: [Self.owed],
            job: Array(Self.job.utf8)
        )
        let messages = [
            KafkaMessage(
                topic: "apn.requests.parked",
                partition: 0,
                offset: 5,
                key: ParkedRecord.key(PoolKey(app: "a", environment: .production), partition: 3),
                value: record.encoded(),
                headers: [],
                timestamp: 1_700_000_000_000
            ),
            KafkaMessage(
                topic: "apn.requests.parked",
                partition: 0,
                offset: 6,
                key: nil,
                value: Array("not a record".utf8),
                headers: [],
                timestamp: 1_700_000_000_000
            ),
        ]
        var all = IntakeStage.Chunk()
        await intake.parse(messages) { chunk in
            all.registrations += chunk.registrations
            all.results += chunk.results
            all.candidates += chunk.candidates
            all.summaries += chunk.summaries
        }
        #expect(all.candidates.count == 1)
        let candidate = try #require(all.candidates.first)
        #expect(candidate.tokenHex == Self.owed)
        #expect(candidate.resultId == WorkerResult.notificationId(jobId: "j1", token: Self.owed))
        #expect(candidate.job.producedAt == 1_700_000_000_000, "the job's own timestamp, which the record carries")
        #expect(candidate.job.derivesAPNSIDs, "a job of two tokens derives an apns-id per token, moved aside or not")
        #expect(candidate.job.source == Array(Self.job.utf8), "kept, to move aside again")
        #expect(all.summaries.isEmpty, "a job's summary is written by the worker that read it first")
        #expect(all.registrations.map(\.1) == [1, 1])
        #expect(all.results.count == 1)
        let rejected = StageTests.value(of: try #require(all.results.first))
        #expect(rejected["type"] as? String == "invalidJob")
        #expect((rejected["reason"] as? String)?.hasPrefix("a record of the parked topic that cannot be read") == true)
    }
}
