import APNSBinary
import APNSCore
import APNSSimulator
import Foundation
import PushConfiguration
import PushRedis
import Testing

@testable import PushKafka
@testable import PushWorker

/// The worker's stages, each on its own and without I/O: what intake makes of messages, what
/// the claim stage plans for Redis's decisions, what the delivery stage makes of a pool's
/// events, and the in-flight bound every stage reports to.
@Suite(.timeLimit(.minutes(1))) struct StageTests {
    static let token = String(repeating: "ab", count: 32)
    static let otherToken = String(repeating: "cd", count: 32)
    let factory = ResultFactory(worker: "w1", now: { 1_700_000_000_123 })

    func intake() throws -> IntakeStage {
        IntakeStage(configuration: try intakeConfiguration(), factory: factory, logger: .init(label: "test"))
    }

    /// The configuration of ``intake()``: one binary app, `a`.
    func intakeConfiguration() throws -> WorkerConfiguration {
        let app = WorkerConfiguration.App(
            name: "a",
            bundleId: "a",
            defaultEnvironment: .production,
            environments: [
                .production: .init(
                    name: .production,
                    credentials: .pem(certificate: .file("/c.pem"), key: .file("/k.pem"))
                )
            ]
        )
        let configuration = WorkerConfiguration(
            worker: .init(id: "w1"),
            kafka: .init(bootstrapServers: "127.0.0.1:9092"),
            redis: RedisConfiguration(),
            limits: .init(),
            apps: ["a": app]
        )
        return configuration
    }

    static func message(_ text: String, offset: Int64, partition: Int32 = 0) -> KafkaMessage {
        KafkaMessage(
            topic: "apn.requests",
            partition: partition,
            offset: offset,
            key: nil,
            value: Array(text.utf8),
            headers: [],
            timestamp: 1_700_000_000_000
        )
    }

    /// Parses `messages` as if fetched at rebalance generation `epoch`.
    func parse(_ messages: [KafkaMessage], epoch: UInt64 = 0) async throws -> IntakeStage.Chunk {
        var all = IntakeStage.Chunk()
        let fetched = messages.map { message in
            var message = message
            message.rebalanceGeneration = epoch
            return message
        }
        try await intake().parse(fetched) { chunk in
            all.registrations += chunk.registrations
            all.results += chunk.results
            all.candidates += chunk.candidates
            all.messages += chunk.messages
        }
        return all
    }

    static func value(of item: ResultItem) -> [String: Any] {
        let bytes: [UInt8]
        switch item {
        case .rejected(_, let message): bytes = message.value
        case .decided(let r), .delivered(let r): bytes = r.result.value
        case .reemitted(_, _, let messages): bytes = messages[0].value
        case .released, .handedBack: return [:]
        }
        return (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] ?? [:]
    }

    // MARK: Intake

    @Test(
        "Intake looks at the clock once 32 messages or notifications are parsed, and hands over what is parsed when the interval has passed"
    )
    func intakeHandsOverAfterManyMessagesOrAJobOfManyTokens() async throws {
        func chunkSizes(_ messages: [KafkaMessage]) async throws -> [Int] {
            var sizes: [Int] = []
            // An interval of zero: every look at the clock hands over.
            try await intake().parse(messages, handOverEvery: .zero) { sizes.append($0.messages) }
            return sizes
        }
        let single = (0..<70).map { n in
            Self.message(
                #"{"id":"s\#(n)","app":"a","token":"\#(String(format: "%064x", n))","alert":"hi"}"#,
                offset: Int64(n)
            )
        }
        #expect(try await chunkSizes(single) == [32, 32, 6])
        let many = (0..<3).map { n in
            let tokens = (0..<40).map { "\"\(String(format: "%064x", 1_000 * n + $0))\"" }.joined(separator: ",")
            return Self.message(#"{"id":"m\#(n)","app":"a","tokens":[\#(tokens)],"alert":"hi"}"#, offset: Int64(n))
        }
        #expect(try await chunkSizes(many) == [1, 1, 1])
    }

    @Test func intakeTurnsTokensIntoCandidatesAndBadInputIntoResults() async throws {
        let chunk = try await parse(
            [
                Self.message(
                    #"{"id":"j1","app":"a","tokens":["\#(Self.token)","\#(Self.otherToken)"],"alert":"hi","staleAfter":"10s"}"#,
                    offset: 7
                ),
                Self.message("not json", offset: 8),
                Self.message(#"{"id":"j2","app":"nope","token":"\#(Self.token)","alert":"hi"}"#, offset: 9),
                Self.message(#"{"id":"j3","app":"a","tokens":["zz","\#(Self.token)"],"alert":"hi"}"#, offset: 10),
            ],
            epoch: 3
        )
        #expect(chunk.messages == 4)
        #expect(chunk.registrations.map(\.0.offset) == [7, 8, 9, 10])
        #expect(chunk.registrations.map(\.1) == [2, 1, 1, 2])
        #expect(chunk.candidates.map(\.tokenHex) == [Self.token, Self.otherToken, Self.token])
        #expect(chunk.candidates.allSatisfy { $0.epoch == 3 })
        #expect(chunk.registrations.allSatisfy { $0.0.epoch == 3 })
        // Both tokens of j1 share one job, and its staleAfter counts from the message's timestamp.
        #expect(chunk.candidates[0].job === chunk.candidates[1].job)
        #expect(chunk.candidates[0].job.content.staleAt == 1_700_000_010_000)
        #expect(chunk.candidates[0].resultId == WorkerResult.notificationId(jobId: "j1", token: Self.token))
        let results = chunk.results.map(Self.value(of:))
        #expect(results.map { $0["type"] as? String } == ["invalidJob", "transmissionError", "transmissionError"])
        #expect(results.map { $0["statusName"] as? String } == ["invalidJob", "invalidJob", "malformedToken"])
        #expect((results[1]["reason"] as? String)?.contains("not configured; configured apps: a") == true)
        #expect(chunk.results.allSatisfy { if case .rejected = $0 { true } else { false } })
    }

    @Test(
        "Intake skips the messages a hand-off mark covers: before its offset and produced by its time; a partition without one, or a message produced after it, is parsed"
    )
    func intakeSkipsWhatAHandOffMarkCovers() async throws {
        func message(_ offset: Int64, partition: Int32, producedAt: Int64?) -> KafkaMessage {
            KafkaMessage(
                topic: "apn.requests",
                partition: partition,
                offset: offset,
                key: nil,
                value: Array("not json".utf8),
                headers: [],
                timestamp: producedAt
            )
        }
        let handedOn: Int64 = 1_700_000_000_000
        var handoffs = IntakeStage.Handoffs(marks: [
            TopicPartition(topic: "apn.requests", partition: 0): .init(offset: 12, at: handedOn)
        ])
        let messages = [
            message(10, partition: 0, producedAt: handedOn - 5),
            message(11, partition: 0, producedAt: handedOn + 1),  // produced after the hand-off: another topic's
            message(11, partition: 1, producedAt: handedOn - 5),  // no mark
            message(11, partition: 0, producedAt: nil),  // no timestamp: nothing proves it was written
            message(12, partition: 0, producedAt: handedOn - 5),  // at the mark: not written yet
            message(13, partition: 0, producedAt: handedOn - 5),
        ]
        var skipped = 0
        var registrations: [(MessageRef, Int)] = []
        var results: [ResultItem] = []
        try await intake().parse(messages, handoffs: &handoffs) { chunk in
            skipped += chunk.skipped
            registrations += chunk.registrations
            results += chunk.results
        }
        #expect(skipped == 1)
        #expect(
            registrations.map { [Int64($0.0.partition.partition), $0.0.offset, Int64($0.1)] } == [
                [0, 10, 0], [0, 11, 1], [1, 11, 1], [0, 11, 1], [0, 12, 1], [0, 13, 1],
            ]
        )
        #expect(results.count == 5)
        // Reached: the mark is dropped, so later messages cost no lookup.
        #expect(handoffs.marks.isEmpty)
    }

    /// A revocation can run inside the poll that gathers a batch, after some of its messages
    /// were fetched: those of the revoked partition are left to its next owner; those fetched
    /// after the revocation (the partition assigned again) and those of other partitions stay.
    @Test func messagesFetchedBeforeTheirPartitionWasRevokedAreLeftToItsNextOwner() {
        var control = RevocationMarks()
        func message(_ partition: Int32, _ offset: Int64, generation: UInt64) -> KafkaMessage {
            var message = Self.message("{}", offset: offset, partition: partition)
            message.rebalanceGeneration = generation
            return message
        }
        let batch = [message(0, 10, generation: 3), message(1, 20, generation: 3), message(0, 11, generation: 3)]
        #expect(control.current(batch).dropped == 0, "nothing was revoked")

        control.revoke([TopicPartition(topic: "apn.requests", partition: 0)], at: 4)
        let (current, dropped) = control.current(batch + [message(0, 12, generation: 5)])
        #expect(dropped == 2)
        #expect(current.map { [$0.partition, Int32($0.offset)] } == [[1, 20], [0, 12]])
        #expect(control.current([message(0, 13, generation: 4)]).dropped == 0, "fetched after the revocation")
    }

    @Test func intakeHandsOnAtLeastOnceAtTheEnd() async throws {
        var chunks = 0
        try await intake().parse([Self.message("{}", offset: 1)]) { _ in chunks += 1 }
        #expect(chunks == 1)
    }

    // MARK: Claim

    func candidates(_ count: Int) async throws -> [Candidate] {
        let tokens = (0..<count).map { String(format: "%064x", $0 + 1) }
        let list = tokens.map { "\"\($0)\"" }.joined(separator: ",")
        return try await parse([Self.message(#"{"id":"j","app":"a","tokens":[\#(list)],"alert":"hi"}"#, offset: 5)])
            .candidates
    }

    @Test func localClaimsHoldAResultIdForItsMessageUntilForgotten() async throws {
        let cs = try await candidates(2)
        let claims = LocalClaims()
        claims.claim([cs[0]])
        #expect(claims.holds(cs[0].resultId, for: cs[0].ref))
        #expect(!claims.holds(cs[0].resultId, for: MessageRef(partition: cs[0].ref.partition, offset: 6)))
        #expect(!claims.holds(cs[1].resultId, for: cs[1].ref))
        // Another id of the same length is another key; ids of other lengths are kept as text.
        let upper = cs[0].resultId.uppercased()
        #expect(!claims.holds(upper, for: cs[0].ref))
        claims.forget([upper, String(cs[0].resultId.dropLast()), cs[0].resultId + "0"])
        #expect(claims.holds(cs[0].resultId, for: cs[0].ref))
        claims.claim([cs[1]])
        #expect(claims.holds(cs[1].resultId, for: cs[1].ref))
        #expect(!claims.holds(cs[1].resultId, for: MessageRef(partition: cs[1].ref.partition, offset: 6)))
        claims.forget([cs[0].resultId])
        #expect(!claims.holds(cs[0].resultId, for: cs[0].ref))
        #expect(LocalClaims.Key("x") == nil)
        #expect(
            LocalClaims.Key(cs[0].resultId) != nil && LocalClaims.Key(cs[0].resultId) != LocalClaims.Key(cs[1].resultId)
        )
        // An id of another length is held by its text.
        let short = Candidate(
            ref: cs[1].ref,
            job: cs[1].job,
            token: cs[1].token,
            tokenHex: cs[1].tokenHex,
            resultId: "short"
        )
        claims.claim([short])
        #expect(claims.holds("short", for: cs[1].ref))
        #expect(!claims.holds("Short", for: cs[1].ref))
        claims.forget(["short"])
        #expect(!claims.holds("short", for: cs[1].ref))
        #expect(claims.holds(cs[1].resultId, for: cs[1].ref))
    }

    @Test func claimPlanActsOnEveryDecision() async throws {
        let cs = try await candidates(9)
        let plan = ClaimStage.plan(
            cs,
            [
                .send, .resend, .recorded(result: Array("{\"r\":1}".utf8), feedback: Array("{\"f\":1}".utf8)), .written,
                .duplicate,
                .busy, .throttled, .unregistered(TokenVerdict(reason: "Unregistered", since: 1_600_000_000)),
                .rateLimited,
            ],
            factory: factory,
            now: 42
        )
        #expect(plan.sends.count == 1)
        #expect(plan.sends[0].key == PoolKey(app: "a", environment: .production))
        #expect(plan.sends[0].notifications.map(\.candidate.tokenHex) == [cs[0].tokenHex, cs[1].tokenHex])
        #expect(plan.sends[0].notifications.map(\.takeover) == [false, true])
        #expect(plan.completed.map(\.offset) == [5, 5])
        #expect(plan.busy.map(\.tokenHex) == [cs[5].tokenHex])
        #expect(plan.throttled.map(\.tokenHex) == [cs[6].tokenHex])
        #expect(plan.statistics.takenOver == 1)
        #expect(plan.statistics.reemitted == 1)
        #expect(plan.statistics.alreadyWritten == 1)
        #expect(plan.statistics.duplicates == 1)
        #expect(plan.results.count == 3)
        guard case .reemitted(_, let id, let messages) = plan.results[0] else {
            Issue.record("not re-emitted")
            return
        }
        #expect(id == cs[2].resultId)
        #expect(messages.map { String(decoding: $0.value, as: UTF8.self) } == ["{\"r\":1}", "{\"f\":1}"])
        let decided = plan.results.dropFirst().map(Self.value(of:))
        #expect(decided.map { $0["statusName"] as? String } == ["unregistered", "rateLimited"])
        #expect(decided.map { $0["at"] as? Int } == [42, 42])
        #expect(plan.results.dropFirst().allSatisfy { if case .decided = $0 { true } else { false } })
    }

    @Test func aSendPastTheJobsStaleAfterIsReportedExpiredInsteadOfSent() async throws {
        let list = [1, 2].map { "\"" + String(format: "%064x", $0) + "\"" }.joined(separator: ",")
        let job = #"{"id":"s","app":"a","tokens":[\#(list)],"alert":"hi","staleAfter":60}"#
        let cs = try await parse([Self.message(job, offset: 7)]).candidates
        // Produced at 1,700,000,000,000 ms: stale from 60 s later.
        let inTime = ClaimStage.plan(cs, [.send, .send], factory: factory, now: 1_700_000_059_999)
        #expect(inTime.sends.map(\.notifications.count) == [2])
        #expect(inTime.decisions.stale.isEmpty)
        let late = ClaimStage.plan(cs, [.send, .resend], factory: factory, now: 1_700_000_090_000)
        #expect(late.sends.map(\.notifications.count) == [1], "a takeover may have been delivered: it goes on")
        #expect(late.decisions.stale == ["a": 1])
        #expect(late.results.count == 1)
        let expired = Self.value(of: late.results[0])
        #expect(expired["statusName"] as? String == "expired")
        #expect((expired["reason"] as? String)?.contains("90 s after it was produced") == true)
        #expect(late.results.allSatisfy { if case .decided = $0 { true } else { false } }, "recorded, then produced")
    }

    // MARK: Delivery

    @Test func deliveryTurnsOutcomesIntoResults() async throws {
        let cs = try await candidates(4)
        let contexts = cs.enumerated().map { SentContext(candidate: $1, takeover: $0 == 0) }
        func outcome(_ tag: UInt64, _ status: APNSStatus?) -> APNSDeliveryOutcome {
            APNSDeliveryOutcome(
                tag: tag,
                token: cs[Int(tag)].token,
                status: status,
                attempts: 1,
                possibleDuplicate: false
            )
        }
        var gone = outcome(3, .gone)
        gone.unregisteredAt = 1_650_000_000_000
        // The second outcome has no context (not sent by this worker, or already settled): no item.
        let outcomes = [outcome(0, nil), outcome(0, nil), outcome(1, .invalidToken), outcome(2, .shutDown), gone]
        let (items, feedback, _) = DeliveryStage.results(
            of: outcomes,
            contexts: [contexts[0], nil, contexts[1], contexts[2], contexts[3]],
            factory: factory
        )
        #expect(feedback == 1)
        #expect(items.count == 4)
        let first = Self.value(of: items[0])
        #expect(first["type"] as? String == "transmitted")
        #expect(first["possibleDuplicate"] as? Bool == true)
        guard case .delivered(let invalid) = items[1], case .released(_, let released, let releasedToken) = items[2],
            case .delivered(let unregistered) = items[3]
        else {
            Issue.record("unexpected items \(items)")
            return
        }
        #expect(invalid.unregister?.verdict == TokenVerdict(reason: "InvalidToken", since: 1_700_000_000))
        #expect(invalid.feedback == nil)
        #expect(released == cs[2].resultId)
        #expect(releasedToken == cs[2].tokenHex)
        #expect(unregistered.unregister?.verdict == TokenVerdict(reason: "Unregistered", since: 1_650_000_000))
        let feedbackResult = try #require(unregistered.feedback)
        #expect(String(decoding: feedbackResult.value, as: UTF8.self).contains("\"type\":\"feedback\""))
    }

    /// A notification a pool gives back at shutdown is released (its claim deleted, so the next
    /// owner sends it as new) only when no gateway can have it: one written on a connection that
    /// closed without an error packet, or taken over from a dead worker, keeps its claim, so the
    /// next owner takes it over and flags it `possibleDuplicate`.
    @Test func aNotificationMaybeWrittenIsHandedBackWithItsClaim() async throws {
        let cs = try await candidates(3)
        let contexts = cs.enumerated().map { SentContext(candidate: $1, takeover: $0 == 2) }
        func shutDown(_ tag: Int, written: Bool) -> APNSDeliveryOutcome {
            APNSDeliveryOutcome(
                tag: UInt64(tag),
                token: cs[tag].token,
                status: .shutDown,
                attempts: written ? 1 : 0,
                possibleDuplicate: written
            )
        }
        let (items, _, _) = DeliveryStage.results(
            of: [shutDown(0, written: false), shutDown(1, written: true), shutDown(2, written: false)],
            contexts: contexts,
            factory: factory
        )
        guard items.count == 3, case .released(_, let released, _) = items[0],
            case .handedBack(_, let maybeWritten) = items[1],
            case .handedBack(_, let takenOver) = items[2]
        else {
            Issue.record("unexpected items \(items)")
            return
        }
        #expect(released == cs[0].resultId)
        #expect(maybeWritten == cs[1].resultId)
        #expect(takenOver == cs[2].resultId)
        let plan = ResultStage.plan(items, topic: "apn.results")
        #expect(
            plan.released.map(\.resultId) == [cs[0].resultId],
            "only the claim of what no gateway can have is deleted"
        )
        #expect(Set(plan.settled) == Set(cs.map(\.resultId)))
        #expect(plan.results == 0)
        #expect(plan.messages.isEmpty)
        #expect(items.allSatisfy { $0.isGivenBack })
    }

    /// `environmentFallback`: a token refused where it was sent is sent once in the other
    /// environment, without a result yet; that send's delivery names its environment, says
    /// `redirected` and remembers the token's environment; refused there too, the result is the
    /// refusal in the job's environment, which condemns the token there as without the fallback.
    @Test func environmentFallbackSendsOnceInTheOtherEnvironment() async throws {
        let cs = try await candidates(4)
        let job = cs[0].job.environment
        let other: APNSEnvironment = job == .production ? .sandbox : .production
        func outcome(_ index: Int, _ status: APNSStatus?, reason: String? = nil) -> APNSDeliveryOutcome {
            var o = APNSDeliveryOutcome(
                tag: 0,
                token: cs[index].token,
                status: status,
                attempts: 1,
                possibleDuplicate: false
            )
            o.reason = reason
            return o
        }
        func recorded(_ item: ResultItem) -> RecordedResult? {
            if case .delivered(let record) = item { record } else { nil }
        }
        let refusal = outcome(0, .badRequest, reason: "BadDeviceToken")
        let fallback: Set<String> = ["a"]
        let first = DeliveryStage.results(
            of: [refusal, outcome(1, .invalidToken), outcome(2, .badRequest, reason: "BadTopic"), outcome(3, nil)],
            contexts: cs.map { SentContext(candidate: $0, takeover: false) },
            factory: factory,
            fallbackApps: fallback
        )
        #expect(first.redirects.map(\.candidate.resultId) == [cs[0].resultId, cs[1].resultId])
        #expect(first.redirects.allSatisfy { $0.poolKey.environment == other })
        #expect(first.items.count == 2, "the other answers are results as without the fallback")
        #expect(Self.value(of: first.items[1])["redirected"] == nil)

        // Delivered in the other environment: its result says where, and the token's environment is remembered.
        let delivered = DeliveryStage.results(
            of: [outcome(0, nil)],
            contexts: [first.redirects[0]],
            factory: factory,
            fallbackApps: fallback
        )
        let result = Self.value(of: delivered.items[0])
        #expect(result["type"] as? String == "transmitted")
        #expect(result["env"] as? String == other.rawValue)
        #expect(result["redirected"] as? Bool == true)
        #expect(result["attempts"] as? Int == 2, "one write in each environment")
        let record = try #require(recorded(delivered.items[0]))
        #expect(record.environment?.environment == other.rawValue && record.unregister == nil)

        // Refused in both: the first refusal, in the job's environment, with its verdict.
        let refusedTwice = DeliveryStage.results(
            of: [outcome(0, .badRequest, reason: "BadDeviceToken")],
            contexts: [first.redirects[0]],
            factory: factory,
            fallbackApps: fallback
        )
        #expect(refusedTwice.redirects.isEmpty)
        let refused = Self.value(of: refusedTwice.items[0])
        #expect(refused["env"] as? String == job.rawValue && refused["redirected"] == nil)
        #expect(refused["reason"] as? String == "BadDeviceToken")
        let refusedRecord = try #require(recorded(refusedTwice.items[0]))
        #expect(refusedRecord.unregister?.environment == job.rawValue && refusedRecord.environment == nil)

        // Sent first to a remembered environment that refuses it: once more in the job's; refused
        // there too, the job's environment's refusal, and the remembered environment is forgotten.
        var remembered = SentContext(candidate: cs[0], takeover: false)
        remembered.redirect = Redirect(environment: other)
        let again = DeliveryStage.results(
            of: [refusal],
            contexts: [remembered],
            factory: factory,
            fallbackApps: fallback
        )
        #expect(again.redirects.map(\.poolKey.environment) == [job])
        let last = DeliveryStage.results(
            of: [outcome(0, .badRequest, reason: "BadDeviceToken")],
            contexts: again.redirects,
            factory: factory,
            fallbackApps: fallback
        )
        let lastRecord = try #require(recorded(last.items[0]))
        #expect(Self.value(of: last.items[0])["env"] as? String == job.rawValue)
        #expect(lastRecord.environment != nil && lastRecord.environment?.environment == nil, "forgotten")
        #expect(lastRecord.unregister?.environment == job.rawValue)
    }
}

/// The result and feedback stages' plans: what a batch asks of Redis and Kafka.
@Suite(.timeLimit(.minutes(1))) struct ResultAndFeedbackStageTests {
    let factory = ResultFactory(worker: "w1", now: { 1_700_000_000_123 })

    @Test func aBatchRecordsOutcomesProducesResultsAndReleasesClaims() throws {
        let ref = MessageRef(partition: TopicPartition(topic: "apn.requests", partition: 3), offset: 9)
        let message = ResultMessage(key: Array("k".utf8), value: Array("{\"r\":1}".utf8))
        let feedback = ResultMessage(key: Array("k".utf8), value: Array("{\"f\":1}".utf8))
        let gone = RecordedResult(
            ref: ref,
            resultId: "d",
            token: "dd",
            result: message,
            feedback: feedback,
            unregister: Unregistration(
                app: "a",
                environment: "production",
                token: "ab",
                verdict: TokenVerdict(reason: "Unregistered", since: 1_650_000_000)
            )
        )
        let plan = ResultStage.plan(
            [
                .rejected(ref, message), .reemitted(ref, resultId: "r", [message, feedback]),
                .decided(RecordedResult(ref: ref, resultId: "c", token: "cc", result: message)), .delivered(gone),
                .released(ref, resultId: "x", token: "ee"),
            ],
            topic: "apn.results"
        )
        #expect(plan.records.map(\.resultId) == ["c", "d"])
        #expect(plan.records[1] === gone)
        #expect(plan.records.allSatisfy { $0.ref == ref })
        #expect(plan.unregistered.map(\.token) == ["ab"])
        #expect(plan.unregistered.map(\.since) == [1_650_000_000])
        #expect(plan.unregistered.map(\.reason) == ["Unregistered"])
        #expect(plan.released.map(\.resultId) == ["x"])
        #expect(plan.released.map(\.token) == ["ee"])
        #expect(plan.records.map(\.token) == ["cc", "dd"])
        // Every result once, the 410's feedback result with it; nothing for the released claim.
        #expect(
            plan.messages.map { String(decoding: $0.value, as: UTF8.self) }
                == ["{\"r\":1}", "{\"r\":1}", "{\"f\":1}", "{\"r\":1}", "{\"r\":1}", "{\"f\":1}"]
        )
        #expect(plan.messages.allSatisfy { $0.topic == "apn.results" })
        #expect(plan.settled == ["c", "d", "x"])
        #expect(plan.results == 4)
    }

    @Test func feedbackTuplesBecomeUnregisteredTokensAndFeedbackResults() throws {
        let token = try DeviceToken(hex: String(repeating: "ab", count: 32))
        let (unregistered, messages) = FeedbackStage.results(
            of: [(token, 1_600_000_000)],
            app: "a",
            environment: "production",
            topic: "apn.results",
            factory: factory
        )
        #expect(unregistered.map(\.token) == [token.hex])
        #expect(unregistered.map(\.since) == [1_600_000_000])
        #expect(messages.count == 1)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(messages[0].value)) as? [String: Any])
        #expect(json["type"] as? String == "feedback")
        #expect(json["timestamp"] as? Int == 1_600_000_000)
        #expect(json["at"] as? Int == 1_700_000_000_123)
        #expect(
            json["resultId"] as? String
                == WorkerResult.feedbackId(
                    app: "a",
                    environment: "production",
                    token: token.hex,
                    timestamp: 1_600_000_000
                )
        )
    }
}
