import APNSCore
import APNSHTTP2Core
import Foundation
import PushTestSupport
import Testing

@testable import PushKafka
@testable import PushWorker
@testable import PushWorkerFuzzing

/// Values from outside that once stopped the worker: each is now invalid input with a sentence,
/// or ignored and counted, and the fuzz corpora of whole messages and of APNs' answers meet the
/// invariants of the fuzz targets (`scripts/fuzz`).
@Suite(.timeLimit(.minutes(1))) struct PoisonInputTests {
    static let token = String(repeating: "ab", count: 32)

    static func message(timestamp: Int64?, type: KafkaTimestampType = .createTime, offset: Int64 = 7) -> KafkaMessage {
        KafkaMessage(
            topic: "apn.requests",
            partition: 0,
            offset: offset,
            key: nil,
            value: Array(#"{"id":"j1","app":"com.example.e2e","token":"\#(token)","alert":"Hi","staleAfter":60}"#.utf8),
            headers: [],
            timestamp: timestamp,
            timestampType: type
        )
    }

    static func reason(_ chunk: IntakeStage.Chunk) -> String? {
        guard case .rejected(_, let message)? = chunk.results.first else { return nil }
        return (try? JSONValue.parse(message.value))?["reason"]?.stringValue
    }

    @Test("timestamps no clock gives make the job invalid with a sentence naming who set them")
    func impossibleTimestampsAreInvalidJobs() async {
        for (timestamp, type) in [
            (Int64.max, KafkaTimestampType.createTime), (.max - 1_000, .createTime), (.min, .createTime),
            (-5, .logAppendTime), (253_402_300_800_000, .createTime),
        ] {
            let chunk = await MessageInvariants.parse(Self.message(timestamp: timestamp, type: type))
            #expect(chunk.candidates.isEmpty, "\(timestamp)")
            let reason = Self.reason(chunk) ?? ""
            #expect(reason.contains("Kafka timestamp \(timestamp) is not a time between 1970 and 9999"), "\(reason)")
            #expect(reason.contains(type == .createTime ? "its producer set it (CreateTime)" : "LogAppendTime"))
            #expect(
                await MessageInvariants.violations(ofMessage: Self.message(timestamp: timestamp, type: type)).isEmpty
            )
        }
    }

    @Test("no timestamp, Kafka's -1 and the last millisecond of 9999 are used; the job is sent or expires")
    func usableTimestampsAreUsed() async throws {
        for timestamp in [nil, -1, 253_402_300_799_999, 1_700_000_000_000] as [Int64?] {
            let chunk = await MessageInvariants.parse(Self.message(timestamp: timestamp))
            #expect(chunk.results.isEmpty && chunk.candidates.count == 1, "\(String(describing: timestamp))")
            #expect(await MessageInvariants.violations(ofMessage: Self.message(timestamp: timestamp)).isEmpty)
        }
        // The last millisecond of 9999: its stale deadline is computed past it, without overflow.
        let far = await MessageInvariants.parse(Self.message(timestamp: 253_402_300_799_999)).candidates.first
        let staleAt: Int64? = far?.job.content.staleAt ?? nil
        #expect(staleAt == 253_402_300_859_999)
    }

    @Test("a staleAfter string longer than a year is refused, as the number is")
    func staleAfterOverAYearIsRefused() {
        let parser = JobParser()
        for value in [#""366d""#, #""9999999h""#, "31536001"] {
            let job = #"{"id":"j","app":"a","token":"\#(Self.token)","staleAfter":\#(value)}"#
            guard case .rejected(_, _, _, let reason, _, _) = parser.parse(Array(job.utf8)) else {
                Issue.record("\(value) was accepted")
                continue
            }
            #expect(reason.contains("at most a year"), "\(reason)")
        }
    }

    @Test("offsets no partition has are not processed")
    func impossibleOffsetsAreFound() async {
        // Intake drops them before anything computes with them (IntakeStage.run); the plan of
        // everything after is still sound for the largest offset below them.
        #expect(await MessageInvariants.violations(ofMessage: Self.message(timestamp: nil, offset: .max - 1)).isEmpty)
    }

    @Test("a 410 timestamp that does not fit is ignored, reported, and the token still taken as unregistered")
    func fourTenTimestampsOutOfRangeAreIgnored() {
        for text in ["1e19", "-1e19", "9223372036854775807", "1e300", "-1", "\"soon\""] {
            let body = APNSErrorBody(bytes: Array(#"{"reason":"Unregistered","timestamp":\#(text)}"#.utf8))
            #expect(body?.reason == .unregistered)
            #expect(body?.timestamp == nil, "\(text)")
            #expect(body?.ignoredTimestamp != nil, "\(text)")
        }
        let fine = APNSErrorBody(bytes: Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8))
        #expect(fine?.timestamp?.unixMilliseconds == 1_700_000_000_123)
        #expect(fine?.ignoredTimestamp == nil)
        // A date past 9999 is written without one, never trapping.
        #expect(
            String(
                decoding: APNSErrorBody(reason: .unregistered, timestamp: Date(timeIntervalSince1970: 1e16))
                    .serialized(),
                as: UTF8.self
            )
                == #"{"reason":"Unregistered"}"#
        )
    }

    static func corpus(_ name: String) throws -> [(String, [UInt8])] {
        let directory = Paths.root + "/Tests/Corpus/" + name
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(!files.isEmpty)
        return try files.map {
            ($0, try #require(FileManager.default.contents(atPath: directory + "/" + $0)).map { $0 })
        }
    }

    @Test("every whole message of the corpus meets the intake fuzz target's invariants")
    func messageCorpus() async throws {
        for (name, bytes) in try Self.corpus("messages") {
            #expect(
                await MessageInvariants.violations(ofMessage: MessageInvariants.message(fromInput: bytes)).isEmpty,
                "\(name)"
            )
        }
    }

    @Test("every answer of the corpus meets the answer fuzz target's invariants")
    func answerCorpus() throws {
        for (name, bytes) in try Self.corpus("answers") {
            #expect(AnswerInvariants.violations(ofInput: bytes).isEmpty, "\(name)")
        }
    }
}
