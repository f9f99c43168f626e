import APNSCore
import Foundation
import PushKafka
import PushLocalStack
import PushRedis
import PushTestSupport
import Testing

@testable import PushWorker

/// Job summaries without Kafka: the `summary` field, what intake registers for it, how a token
/// result counts, the `jobSummary` JSON, and the summary state in a real `redis-server` (counting
/// is idempotent per token, one writer per job, a dead writer is taken over).
@Suite(.timeLimit(.minutes(1))) struct JobSummaryTests {
    static let token = String(repeating: "ab", count: 32)
    static let otherToken = String(repeating: "cd", count: 32)

    // MARK: The field

    @Test func summaryIsABooleanAndOffByDefault() {
        let parser = JobParser()
        func parse(_ extra: String) -> JobParseResult {
            parser.parse(Array(#"{"id":"j","app":"a","token":"\#(Self.token)","alert":"x"\#(extra)}"#.utf8))
        }
        guard case .job(let plain) = parse(""), case .job(let on) = parse(#","summary":true"#),
            case .job(let off) = parse(#","summary":false"#)
        else {
            Issue.record("a valid job was not accepted")
            return
        }
        #expect(!plain.summary && on.summary && !off.summary)
        for bad in ["1", #""yes""#, "null", "{}"] {
            guard case .rejected(_, _, _, let reason, _, _) = parse(#","summary":\#(bad)"#) else {
                Issue.record("summary \(bad) was accepted")
                continue
            }
            #expect(reason == "\"summary\" must be true or false", "\(reason)")
        }
    }

    // MARK: Intake

    @Test func intakeRegistersOneResultMoreForAJobWithASummary() async throws {
        let stage = try StageTests().intake()
        var chunk = IntakeStage.Chunk()
        await stage.parse(
            [
                StageTests.message(
                    #"{"id":"s1","app":"a","tokens":["\#(Self.token)","zz","\#(Self.otherToken)"],"alert":"x","summary":true}"#,
                    offset: 4
                ),
                StageTests.message(#"{"id":"s2","app":"a","token":"\#(Self.token)","alert":"x"}"#, offset: 5),
                StageTests.message(
                    #"{"id":"s3","app":"nope","token":"\#(Self.token)","alert":"x","summary":true}"#,
                    offset: 6
                ),
            ],
        ) { part in
            chunk.registrations += part.registrations
            chunk.summaries += part.summaries
        }
        // Three token results and the summary's place; one token; one rejected token and the place.
        #expect(chunk.registrations.map(\.1) == [4, 1, 2])
        #expect(chunk.summaries.map(\.0.offset) == [4, 6])
        let first = try #require(chunk.summaries.first?.1)
        #expect(first.remaining == 3)
        #expect(first.check.tokens == 3)
        #expect(first.check.jobId == "s1")
        #expect(first.places[WorkerResult.notificationId(jobId: "s1", token: Self.otherToken)] == 2)
        #expect(first.places[WorkerResult.notificationId(jobId: "s1", token: "zz")] == 1)
        #expect(first.environment == "production")
        #expect(chunk.summaries[1].1.remaining == 1)
        #expect(chunk.summaries[1].1.environment == nil)
    }

    @Test func theFingerprintDependsOnTheTokensOnly() throws {
        let parser = JobParser()
        func pending(_ text: String) throws -> PendingSummary {
            guard case .job(let job) = parser.parse(Array(text.utf8)) else { throw ServerError("not a job") }
            return PendingSummary(
                job: job,
                environment: nil,
                ref: MessageRef(partition: .init(topic: "t", partition: 0), offset: 0)
            )
        }
        let a = try pending(
            #"{"id":"j","app":"a","tokens":["\#(Self.token)","\#(Self.otherToken)"],"alert":"x","summary":true}"#
        )
        let b = try pending(
            #"{"id":"j","app":"a","tokens":["\#(Self.token)","\#(Self.otherToken)"],"alert":"y","summary":true}"#
        )
        let c = try pending(
            #"{"id":"j","app":"a","tokens":["\#(Self.otherToken)","\#(Self.token)"],"alert":"x","summary":true}"#
        )
        #expect(a.check.fingerprint == b.check.fingerprint)
        #expect(a.check.fingerprint != c.check.fingerprint)
    }

    @Test func aTokenResultCountsByItsResultIdTypeStatusAndTime() throws {
        let factory = ResultFactory(worker: "w1", now: { 1_700_000_000_123 })
        let ref = MessageRef(partition: .init(topic: "apn.requests", partition: 0), offset: 1)
        let rejected = factory.rejected(
            ref,
            jobId: "j",
            app: "a",
            environment: "production",
            token: "zz",
            status: .malformedToken,
            reason: "bad",
            at: 1_700_000_000_200
        )
        guard case .rejected(_, let message) = rejected else { throw ServerError("not a rejected item") }
        let failed = try #require(TokenResult(parsing: message.value))
        #expect(failed.resultId == WorkerResult.notificationId(jobId: "j", token: "zz"))
        #expect(failed.status == .malformedToken && failed.token == "zz" && failed.at == 1_700_000_000_200)
        let sent = WorkerResult(
            kind: .transmitted,
            resultId: "r",
            jobId: "j",
            app: "a",
            environment: "production",
            token: Self.token,
            attempts: 1,
            possibleDuplicate: false,
            worker: "w1",
            at: 5
        )
        let transmitted = try #require(TokenResult(parsing: sent.serialized()))
        #expect(transmitted.status == nil && transmitted.at == 5 && transmitted.token.isEmpty)
        let feedback = factory.feedback(app: "a", environment: "production", token: Self.token, timestamp: 1, at: 2)
        #expect(TokenResult(parsing: feedback.value) == nil)
        // A token result of another type counts under its type.
        let other = try #require(
            TokenResult(parsing: Array(#"{"type":"rehearsed","resultId":"r","token":"ab","at":7}"#.utf8))
        )
        #expect(other.otherType == "rehearsed" && other.status == nil && other.at == 7)
    }

    // MARK: The result

    @Test func theSummaryIsOneJSONObjectWithCountsAndFailedTokens() throws {
        let summary = JobSummary(
            jobId: "briefing",
            app: "com.example.news",
            environment: "production",
            tokens: 4,
            transmitted: 2,
            failed: 2,
            statuses: [.init(status: .invalidToken, count: 1), .init(status: .malformedToken, count: 1)],
            failedTokens: [
                .init(token: Self.token, status: .invalidToken), .init(token: "zz", status: .malformedToken),
            ],
            failedTokensOmitted: 0,
            firstAt: 10,
            lastAt: 20,
            possibleDuplicate: false,
            worker: "w1",
            at: 30
        )
        let json = try #require(try JSONSerialization.jsonObject(with: Data(summary.serialized())) as? [String: Any])
        #expect(json["type"] as? String == "jobSummary")
        #expect(json["resultId"] as? String == WorkerResult.summaryId(jobId: "briefing"))
        #expect(json["tokens"] as? Int == 4)
        #expect(json["counts"] as? [String: Int] == ["transmitted": 2, "transmissionError": 2])
        let statuses = try #require(json["statuses"] as? [[String: Any]])
        #expect(statuses.map { $0["statusName"] as? String } == ["invalidToken", "malformedToken"])
        #expect(statuses.map { $0["count"] as? Int } == [1, 1])
        let failed = try #require(json["failedTokens"] as? [[String: Any]])
        #expect(failed.map { $0["token"] as? String } == [Self.token, "zz"])
        #expect(failed.map { $0["status"] as? Int } == [8, 518])
        #expect(json["failedTokensOmitted"] as? Int == 0)
        #expect(json["firstAt"] as? Int == 10 && json["lastAt"] as? Int == 20 && json["at"] as? Int == 30)
        #expect(json["possibleDuplicate"] as? Bool == false)
        #expect(summary.key == Array("briefing".utf8))
        // The id differs from every notification's of the same job.
        #expect(summary.resultId != WorkerResult.notificationId(jobId: "briefing", token: ""))
    }

    @Test func failedTokensThatWouldMakeTheSummaryTooLargeAreOnlyCounted() throws {
        // 1,000 malformed tokens of 256 control characters: 1,536 bytes each once escaped.
        let text = String(repeating: "\u{1}", count: 256)
        let summary = JobSummary(
            jobId: "hostile",
            tokens: 1_000,
            transmitted: 0,
            failed: 1_000,
            statuses: [.init(status: .malformedToken, count: 1_000)],
            failedTokens: Array(repeating: .init(token: text, status: .malformedToken), count: 1_000),
            failedTokensOmitted: 7,
            firstAt: 1,
            lastAt: 2,
            possibleDuplicate: false,
            worker: "w1",
            at: 3
        )
        let bytes = summary.serialized()
        #expect(bytes.count < 600_000)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        let listed = (json["failedTokens"] as? [Any])?.count ?? 0
        #expect(listed > 0 && listed < 1_000)
        #expect(json["failedTokensOmitted"] as? Int == 7 + 1_000 - listed)
    }

    // MARK: Redis

    private func withStores(
        _ backend: StoreBackend = .server,
        _ body: (NotificationStore, NotificationStore) async throws -> Void
    ) async throws {
        try await backend.withClients(2) { clients in
            let a = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-a#1")
            let b = NotificationStore(redis: clients[1], prefix: "test:", owner: "worker-b#1")
            try await a.prepare()
            try await a.heartbeat(ttlMilliseconds: 60_000)
            try await b.heartbeat(ttlMilliseconds: 60_000)
            try await body(a, b)
        }
    }

    private func check(
        _ jobId: String = "job",
        offset: Int64,
        tokens: Int = 3,
        fingerprint: String = "fp",
        _ outcomes: [NotificationStore.SummaryOutcome]
    ) -> NotificationStore.SummaryCheck {
        .init(
            jobId: jobId,
            summaryId: WorkerResult.summaryId(jobId: jobId),
            fingerprint: fingerprint,
            tokens: tokens,
            topic: "apn.requests",
            partition: 2,
            offset: offset,
            outcomes: outcomes
        )
    }

    private static func sent(_ index: Int, at: Int64) -> NotificationStore.SummaryOutcome {
        .init(index: index, status: nil, token: "", at: at)
    }

    private static func failed(_ index: Int, _ status: APNSStatus, at: Int64) -> NotificationStore.SummaryOutcome {
        .init(index: index, status: status, token: String(format: "%064x", index), at: at)
    }

    @Test(arguments: StoreBackend.allCases)
    func theLastMessageOfAJobWritesItsSummaryOnceAndCountsNothingTwice(_ backend: StoreBackend) async throws {
        try await withStores(backend) { a, b in
            // The job's three tokens are split between two copies of the job (offsets 7 and 9).
            #expect(
                try await a.checkSummary(
                    check(offset: 7, [Self.sent(0, at: 200), Self.failed(1, .invalidToken, at: 150)]),
                    ttlSeconds: 60
                )
                    == .notYours
            )
            // Counted again (the message consumed again): nothing changes.
            #expect(
                try await a.checkSummary(
                    check(offset: 7, [Self.sent(0, at: 200), Self.failed(1, .invalidToken, at: 150)]),
                    ttlSeconds: 60
                )
                    == .notYours
            )
            let decision = try await b.checkSummary(
                check(offset: 9, [Self.failed(2, .malformedToken, at: 300)]),
                ttlSeconds: 60
            )
            guard case .write(let summary) = decision else {
                Issue.record("the last token's message does not write the summary: \(decision)")
                return
            }
            #expect(summary.tokens == 3 && summary.transmitted == 1 && summary.failed == 2)
            #expect(
                summary.statuses == [.init(status: .invalidToken, count: 1), .init(status: .malformedToken, count: 1)]
            )
            #expect(
                summary.failedTokens == [
                    .init(token: String(format: "%064x", 1), status: .invalidToken),
                    .init(token: String(format: "%064x", 2), status: .malformedToken),
                ]
            )
            #expect(summary.firstAt == 150 && summary.lastAt == 300)
            #expect(!summary.possibleDuplicate)
            // While b writes it, the other message's check leaves it to b; b's own message asked
            // again (consumed again by another live worker) waits.
            #expect(try await a.checkSummary(check(offset: 7, []), ttlSeconds: 60) == .notYours)
            #expect(try await a.checkSummary(check(offset: 9, []), ttlSeconds: 60) == .busy)
            // Once written, nobody writes it again.
            try await b.markSummariesWritten([WorkerResult.summaryId(jobId: "job")], ttlSeconds: 60)
            #expect(
                try await a.checkSummary(check(offset: 9, [Self.failed(2, .malformedToken, at: 300)]), ttlSeconds: 60)
                    == .written
            )
            // Every key of the job expires with the dedupe TTL and shares one hash tag.
            let keys = RedisKeys(prefix: "test:", isCluster: false).summary(
                summaryId: WorkerResult.summaryId(jobId: "job")
            ).all.map {
                String(decoding: $0, as: UTF8.self)
            }
            let tag = "{\(WorkerResult.summaryId(jobId: "job"))}"
            #expect(keys.allSatisfy { $0.contains(tag) })
            for key in [keys[0], keys[3]] {
                let ttl = try await a.redis.send(["TTL", key]).int ?? -1
                #expect(ttl > 0 && ttl <= 60, "\(key): \(ttl)")
            }
        }
    }

    @Test(arguments: StoreBackend.allCases)
    func aSummaryWhoseWriterDiedIsTakenOverAndMarkedAPossibleDuplicate(_ backend: StoreBackend) async throws {
        try await withStores(backend) { a, b in
            guard
                case .write = try await a.checkSummary(
                    check(offset: 7, tokens: 1, [Self.sent(0, at: 1)]),
                    ttlSeconds: 60
                )
            else {
                Issue.record("not written")
                return
            }
            // While a lives, b (the same message consumed again) waits for it.
            #expect(
                try await b.checkSummary(check(offset: 7, tokens: 1, [Self.sent(0, at: 1)]), ttlSeconds: 60) == .busy
            )
            // a dies before it marks the summary written; its message is consumed again by b.
            _ = try await a.redis.send(["DEL", "test:w:worker-a#1"])
            guard
                case .write(let summary) = try await b.checkSummary(
                    check(offset: 7, tokens: 1, [Self.sent(0, at: 1)]),
                    ttlSeconds: 60
                )
            else {
                Issue.record("not taken over")
                return
            }
            #expect(summary.possibleDuplicate)
            #expect(summary.tokens == 1 && summary.transmitted == 1)
            // The same worker asking again for the same message (a retry) writes it.
            guard case .write = try await b.checkSummary(check(offset: 7, tokens: 1, []), ttlSeconds: 60) else {
                Issue.record("a retry of the writer's own check does not write")
                return
            }
        }
    }

    @Test func anotherJobWithTheSameIdAddsNothing() async throws {
        try await withStores { a, _ in
            #expect(
                try await a.checkSummary(check(offset: 1, tokens: 2, [Self.sent(0, at: 1)]), ttlSeconds: 60)
                    == .notYours
            )
            #expect(
                try await a.checkSummary(
                    check(offset: 2, tokens: 1, fingerprint: "other", [Self.sent(0, at: 1)]),
                    ttlSeconds: 60
                )
                    == .notYours
            )
            guard
                case .write(let summary) = try await a.checkSummary(
                    check(offset: 1, tokens: 2, [Self.sent(1, at: 2)]),
                    ttlSeconds: 60
                )
            else {
                Issue.record("not written")
                return
            }
            #expect(summary.tokens == 2 && summary.transmitted == 2)
        }
    }

    @Test func tokenResultsOfAnotherTypeAreCountedUnderTheirType() async throws {
        try await withStores { a, _ in
            let outcomes: [NotificationStore.SummaryOutcome] = [
                .init(index: 0, status: nil, otherType: "rehearsed", token: "", at: 1), Self.sent(1, at: 2),
            ]
            guard
                case .write(let summary) = try await a.checkSummary(
                    check(offset: 1, tokens: 2, outcomes),
                    ttlSeconds: 60
                )
            else {
                Issue.record("not written")
                return
            }
            #expect(summary.otherCounts == ["rehearsed": 1] && summary.transmitted == 1 && summary.failed == 0)
            let json = try #require(
                try JSONSerialization.jsonObject(with: Data(summary.serialized())) as? [String: Any]
            )
            #expect(json["counts"] as? [String: Int] == ["transmitted": 1, "transmissionError": 0, "rehearsed": 1])
        }
    }

    @Test func atMostAThousandFailedTokensAreListedAndTheRestCounted() async throws {
        try await withStores { a, _ in
            let outcomes =
                (0..<1_005).map { Self.failed($0, .invalidToken, at: Int64($0)) } + [Self.sent(1_005, at: 5_000)]
            guard
                case .write(let summary) = try await a.checkSummary(
                    check(offset: 1, tokens: 1_006, outcomes),
                    ttlSeconds: 60
                )
            else {
                Issue.record("not written")
                return
            }
            #expect(summary.failedTokens.count == JobSummary.maxFailedTokens)
            #expect(summary.failedTokensOmitted == 5)
            #expect(summary.failed == 1_005 && summary.transmitted == 1)
            #expect(summary.firstAt == 0 && summary.lastAt == 5_000)
        }
    }

    @Test func checksInOneRoundTripAreDecidedInOrderAlsoAfterTheScriptCacheWasFlushed() async throws {
        try await withStores { a, _ in
            // A server that forgot the script (a restart): the checks are sent again after SCRIPT LOAD.
            _ = try await a.redis.send(["SCRIPT", "FLUSH"])
            let decisions = try await a.checkSummaries(
                [
                    check("one", offset: 1, tokens: 2, [Self.sent(0, at: 1)]),
                    check("one", offset: 2, tokens: 2, [Self.sent(1, at: 2)]),
                    check("two", offset: 3, tokens: 1, [Self.failed(0, .invalidToken, at: 3)]),
                    check("two", offset: 4, tokens: 1, []),
                ],
                ttlSeconds: 60
            )
            #expect(decisions.count == 4)
            #expect(decisions[0] == .notYours)
            guard case .write(let one) = decisions[1], case .write(let two) = decisions[2] else {
                Issue.record("\(decisions)")
                return
            }
            #expect(one.jobId == "one" && one.transmitted == 2 && !one.possibleDuplicate)
            #expect(two.jobId == "two" && two.failed == 1 && two.failedTokens.map(\.status) == [.invalidToken])
            // The copy of job "two" leaves it to the message that writes it.
            #expect(decisions[3] == .notYours)
        }
    }
}
