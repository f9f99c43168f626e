import APNSCore
import Foundation
import PushConfiguration
import PushRedis
import PushWorkerFuzzing
import Testing

@testable import PushKafka
@testable import PushWorker

/// The job fields of issue 15 and the fixed ones: `sound` objects, numeric `expiry`,
/// `metadata`, `apnsId`, `topic` and `dryRun`, from the parser to the results they produce.
@Suite struct JobFeatureTests {
    let token = String(repeating: "ab", count: 32)
    let otherToken = String(repeating: "cd", count: 32)

    func parse(_ fields: String, http2: Bool = false) -> JobParseResult {
        var parser = JobParser()
        if http2 { parser.http2Apps = ["a"] }
        return parser.parse(Array(#"{"id":"j","app":"a","token":"\#(token)",\#(fields)}"#.utf8))
    }

    func job(_ fields: String, http2: Bool = false) -> Job? {
        if case .job(let job) = parse(fields, http2: http2) { return job }
        return nil
    }

    func reason(_ fields: String) -> String? {
        if case .rejected(_, _, _, let reason, _, _) = parse(fields) { return reason }
        return nil
    }

    func payload(_ job: Job?) -> String { String(decoding: job?.payload ?? [], as: UTF8.self) }

    // MARK: sound

    @Test func aSoundObjectIsCriticalOnlyWithCriticalOneOrTrue() {
        for http2 in [false, true] {
            #expect(payload(job(#""sound":{"name":"a.caf"}"#, http2: http2)) == #"{"aps":{"sound":"a.caf"}}"#)
            #expect(
                payload(job(#""sound":{"name":"a.caf","critical":0}"#, http2: http2)) == #"{"aps":{"sound":"a.caf"}}"#
            )
            #expect(
                payload(job(#""sound":{"name":"a.caf","critical":false}"#, http2: http2))
                    == #"{"aps":{"sound":"a.caf"}}"#
            )
            #expect(
                payload(job(#""sound":{"name":"a.caf","critical":0.0}"#, http2: http2)) == #"{"aps":{"sound":"a.caf"}}"#
            )
            #expect(
                payload(job(#""sound":{"name":"a.caf","critical":1,"volume":0.5}"#, http2: http2))
                    == #"{"aps":{"sound":{"critical":1,"name":"a.caf","volume":0.5}}}"#
            )
            #expect(
                payload(job(#""aps":{"sound":{"name":"a.caf","critical":true}}"#, http2: http2))
                    == #"{"aps":{"sound":{"critical":1,"name":"a.caf","volume":1.0}}}"#
            )
        }
    }

    @Test func aSoundObjectWithAnUnknownKeyOrAStrayVolumeIsRejected() {
        #expect(
            reason(#""sound":{"name":"a.caf","loud":true}"#)
                == "\"sound.loud\" is not a sound field; a sound object has name, critical and volume"
        )
        #expect(
            reason(#""aps":{"sound":{"name":"a.caf","critical":2}}"#)
                == "\"aps.sound.critical\" must be 1 or true (a critical alert), or 0 or false"
        )
        #expect(reason(#""sound":{"name":"a.caf","volume":0.3}"#)?.contains("applies to critical alerts only") == true)
        #expect(
            reason(#""sound":{"name":"a.caf","critical":1,"volume":3}"#)
                == "\"sound.volume\" must be a number from 0 to 1"
        )
    }

    // MARK: expiry

    @Test func numericExpiryIsAnAbsoluteUNIXTimeInSeconds() {
        #expect(job(#""alert":"x","expiry":0"#)?.notification.expiry == .immediately)
        #expect(job(#""alert":"x","expiry":1732233600"#)?.notification.expiry == .at(unixSeconds: 1_732_233_600))
        #expect(job(#""alert":"x","expiry":"1732233600""#)?.notification.expiry == .at(unixSeconds: 1_732_233_600))
        #expect(job(#""alert":"x","expiry":"3600s""#)?.notification.expiry == .after(.seconds(3600)))
    }

    @Test func numericExpiryThatCanOnlyBeAMistakeIsRejectedWithTheFormToUse() {
        for relative in ["3600", "86400000", #""3600""#, "1"] {
            let text = reason(#""alert":"x","expiry":\#(relative)"#)
            #expect(text?.contains("is not a plausible UNIX time") == true, "\(relative): \(text ?? "accepted")")
            #expect(text?.contains("\"30m\"") == true)
        }
        for milliseconds in ["1732233600000", #""1732233600000""#] {
            let text = reason(#""alert":"x","expiry":\#(milliseconds)"#)
            #expect(
                text?.contains("looks like UNIX milliseconds; expiry counts seconds") == true,
                "\(text ?? "accepted")"
            )
        }
        #expect(reason(#""alert":"x","expiry":-5"#)?.contains("must be from 0 to 4294967295") == true)
    }

    // MARK: metadata

    @Test func metadataIsKeptAsCompactJSONOnce() {
        let parsed = job(#""alert":"x","metadata":{ "campaign" : "spring", "n" : [1, 2.5] }"#)
        #expect(
            parsed.map { String(decoding: $0.metadata ?? [], as: UTF8.self) } == #"{"campaign":"spring","n":[1,2.5]}"#
        )
        #expect(job(#""alert":"x""#)?.metadata == nil)
    }

    @Test func metadataThatIsNotAnObjectOrTooLargeRejectsTheJob() {
        #expect(
            reason(#""alert":"x","metadata":[1]"#)
                == "\"metadata\" must be a JSON object; it is copied into every result of the job"
        )
        let big = String(repeating: "x", count: 4090)
        #expect(reason(#""alert":"x","metadata":{"k":"\#(big)"}"#)?.contains("over the limit of 4096") == true)
        // 4096 bytes exactly is allowed: {"k":"…"} is 8 bytes around the text.
        let fits = String(repeating: "x", count: 4088)
        #expect(job(#""alert":"x","metadata":{"k":"\#(fits)"}"#)?.metadata?.count == 4096)
    }

    @Test func rejectedAndUnreadableJobsKeepReadableMetadata() {
        if case .rejected(_, _, _, _, let metadata, _) = parse(#""alert":"x","badge":-1,"metadata":{"m":1}"#) {
            #expect(metadata == Array(#"{"m":1}"#.utf8))
        } else {
            Issue.record("not rejected")
        }
        let unreadable = JobParser().parse(Array(#"{"id":"j","app":"a","metadata":{"m":1}}"#.utf8))
        if case .unreadable(_, _, _, let metadata) = unreadable {
            #expect(metadata == Array(#"{"m":1}"#.utf8))
        } else {
            Issue.record("not unreadable: \(unreadable)")
        }
    }

    // MARK: apnsId, topic, dryRun

    @Test func apnsIdIsACanonicalUUIDAndDerivedPerTokenForSeveralTokens() {
        #expect(
            job(#""alert":"x","apnsId":"123E4567-E89B-12D3-A456-426614174000""#)?.apnsId
                == "123e4567-e89b-12d3-a456-426614174000"
        )
        #expect(reason(#""alert":"x","apnsId":"nope""#)?.hasPrefix("\"apnsId\" must be a UUID string") == true)
        #expect(
            reason(#""alert":"x","apnsId":"123e4567e89b12d3a456426614174000""#)?.hasPrefix("\"apnsId\" must be a UUID")
                == true
        )
        // The same as Python's uuid.uuid5(uuid.UUID(apnsId), token).
        let base = "123e4567-e89b-12d3-a456-426614174000"
        #expect(JobAPNSID.derived(from: base, token: token) == "d3549475-3644-5a37-b502-565441a24b2f")
        #expect(JobAPNSID.derived(from: base, token: otherToken) == "135d86ff-7ef6-5706-8a32-c4fcd7806d5c")
    }

    @Test func topicAndDryRunAreRead() {
        let parsed = job(#""alert":"x","topic":"com.example.other","dryRun":true"#, http2: true)
        #expect(parsed?.topic == "com.example.other")
        #expect(parsed?.notification.topic == "com.example.other")
        #expect(parsed?.dryRun == true)
        #expect(reason(#""alert":"x","topic":"com.example app""#)?.hasPrefix("\"topic\": ") == true)
        #expect(reason(#""alert":"x","dryRun":"yes""#) == "\"dryRun\" must be true or false")
    }

    // MARK: Intake and results

    static func app(
        transport: WorkerConfiguration.Transport,
        token: Bool,
        topics: [String] = [],
        dryRun: Bool = false
    )
        -> WorkerConfiguration.App
    {
        let credentials: WorkerConfiguration.Credentials =
            token
            ? .token(signingKey: .file("/k.p8"), keyId: "ABCDE12345", teamId: "TEAM123456")
            : .pem(certificate: .file("/c.pem"), key: .file("/k.pem"))
        var app = WorkerConfiguration.App(
            name: "a",
            bundleId: "com.example.a",
            defaultEnvironment: .production,
            transport: transport,
            environments: [.production: .init(name: .production, credentials: credentials)]
        )
        app.topics = topics
        app.dryRun = dryRun
        return app
    }

    @Test func intakeRefusesTopicsAndApnsIdsTheAppCannotServe() throws {
        func refusal(_ fields: String, _ app: WorkerConfiguration.App) -> String? {
            guard let job = job(fields, http2: app.transport == .http2) else { return "unparsed" }
            return IntakeStage.refusal(of: job, app: app, environment: .production)
        }
        let team = Self.app(transport: .http2, token: true, topics: ["com.example.a", "com.example.b"])
        #expect(refusal(#""alert":"x","topic":"com.example.b""#, team) == nil)
        #expect(refusal(#""alert":"x","topic":"com.example.a""#, team) == nil)
        #expect(
            refusal(#""alert":"x","topic":"com.example.c""#, team)
                == "\"topic\" \"com.example.c\" is not one of app \"a\"'s topics (com.example.a, com.example.b); add it to apps.a.topics"
        )
        let certificate = Self.app(transport: .http2, token: false, topics: ["com.example.b"])
        #expect(
            refusal(#""alert":"x","topic":"com.example.b""#, certificate)?.contains(
                "need token authentication (signingKey)"
            ) == true
        )
        #expect(refusal(#""alert":"x","topic":"com.example.a""#, certificate) == nil)
        let binary = Self.app(transport: .binary, token: false)
        #expect(
            refusal(#""alert":"x","topic":"com.example.b""#, binary)?.contains(
                "the binary protocol sends to its certificate's one topic"
            )
                == true
        )
        #expect(
            refusal(#""alert":"x","apnsId":"123e4567-e89b-12d3-a456-426614174000""#, binary)?.hasPrefix(
                "\"apnsId\" is for HTTP/2 apps"
            )
                == true
        )
        #expect(refusal(#""alert":"x","apnsId":"123e4567-e89b-12d3-a456-426614174000""#, team) == nil)
    }

    static func object(_ bytes: [UInt8]) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] ?? [:]
    }

    @Test func resultsCarryMetadataAndTheAPNSIdsAsGiven() throws {
        var result = WorkerResult(
            kind: .transmitted,
            resultId: "r",
            jobId: "j",
            app: "a",
            environment: "sandbox",
            token: token,
            attempts: 1,
            possibleDuplicate: false,
            worker: "w",
            at: 5
        )
        result.apnsId = "123e4567-e89b-12d3-a456-426614174000"
        result.apnsUniqueId = "7f0e1b1c-0000-4000-8000-000000000001"
        result.metadata = Array(#"{"campaign":"spring","n":[1,2.5]}"#.utf8)
        let text = String(decoding: result.serialized(), as: UTF8.self)
        #expect(
            text
                == #"{"type":"transmitted","resultId":"r","jobId":"j","app":"a","env":"sandbox","token":"\#(token)","attempts":1,"possibleDuplicate":false,"apnsId":"123e4567-e89b-12d3-a456-426614174000","apnsUniqueId":"7f0e1b1c-0000-4000-8000-000000000001","metadata":{"campaign":"spring","n":[1,2.5]},"worker":"w","at":5}"#
        )
    }

    @Test func aDryRunIsClaimedUnderItsOwnIdAndAnsweredInsteadOfSent() async throws {
        let factory = ResultFactory(worker: "w1", now: { 1_700_000_000_123 })
        for (appDryRun, jobField) in [(false, #","dryRun":true"#), (true, "")] {
            let app = Self.app(transport: .binary, token: false, dryRun: appDryRun)
            let configuration = WorkerConfiguration(
                worker: .init(id: "w1"),
                kafka: .init(bootstrapServers: "127.0.0.1:9092"),
                redis: RedisConfiguration(),
                limits: .init(),
                apps: ["a": app]
            )
            let intake = IntakeStage(configuration: configuration, factory: factory, logger: .init(label: "test"))
            var candidates: [Candidate] = []
            let text =
                #"{"id":"j","app":"a","tokens":["\#(token)","\#(otherToken)"],"alert":"hi","metadata":{"m":1}\#(jobField)}"#
            await intake.parse(
                [
                    KafkaMessage(
                        topic: "apn.requests",
                        partition: 0,
                        offset: 3,
                        key: nil,
                        value: Array(text.utf8),
                        headers: [],
                        timestamp: 1_700_000_000_000
                    )
                ],
            ) { candidates += $0.candidates }
            #expect(
                candidates.map(\.resultId) == [token, otherToken].map { WorkerResult.dryRunId(jobId: "j", token: $0) }
            )
            #expect(candidates[0].resultId != WorkerResult.notificationId(jobId: "j", token: token))
            let plan = ClaimStage.plan(candidates, [.send, .resend], factory: factory, now: 1_700_000_000_123)
            #expect(plan.sends.isEmpty)
            let values = plan.results.compactMap { item -> [String: Any]? in
                guard case .decided(let record) = item else { return nil }
                return Self.object(record.result.value)
            }
            #expect(values.count == 2)
            #expect(values.map { $0["type"] as? String } == ["dryRun", "dryRun"])
            #expect(values.map { $0["payloadBytes"] as? Int } == [22, 22])
            #expect(values.map { ($0["metadata"] as? [String: Int])?["m"] } == [1, 1])
            #expect(values.allSatisfy { $0["status"] == nil && $0["attempts"] == nil })
        }
    }
}

extension JobFeatureTests {
    @Test("The corpus's jobFields examples are valid jobs and meet the invariants")
    func corpusExamplesWithTheNewFields() throws {
        let directory = HostileInputTests.corpus
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("jobFields-") }
            .sorted()
        #expect(names.count == 5)
        for name in names {
            let bytes = try #require(FileManager.default.contents(atPath: "\(directory)/\(name)").map(Array.init))
            #expect(JobInvariants.violations(ofInput: bytes).isEmpty, "\(name)")
            guard case .job(let job) = JobParser().parse(bytes), job.payloadError == nil else {
                Issue.record("\(name) is not a valid job")
                continue
            }
        }
    }
}

extension JobFeatureTests {
    @Test func aDryRunOfAnHTTP2AppFailsWhatTheClientWouldRefuse() {
        let app = Self.app(transport: .http2, token: false)
        func problem(_ fields: String) -> String? {
            guard let job = job(fields, http2: true) else { return "unparsed" }
            return IntakeStage.http2Problem(of: job.notification, app: app, environment: .production)
        }
        #expect(problem(#""alert":"x""#) == nil)
        #expect(
            problem(#""alert":"x","pushType":"background","contentAvailable":true,"priority":5"#)?.contains(
                "must not carry an alert"
            )
                == true
        )
        #expect(
            problem(#""contentAvailable":true,"pushType":"location","priority":5"#)?.contains(
                "only with token authentication"
            ) == true
        )
    }
}
