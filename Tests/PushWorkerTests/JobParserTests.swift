import APNSCore
import Testing

@testable import PushWorker

@Suite struct JobParserTests {
    let parser = JobParser()
    let token = String(repeating: "ab", count: 32)

    func parse(_ text: String) -> JobParseResult { parser.parse(Array(text.utf8)) }

    @Test func validJobWithConvenienceFields() throws {
        let result = parse(
            #"{"id":"j1","app":"a","token":"\#(token)","alert":"Hi","badge":3,"sound":"default","expiry":"30m","priority":5,"env":"sandbox","registeredAt":1700000000,"payload":{"k":1}}"#
        )
        guard case .job(let job) = result else {
            Issue.record("not a job: \(result)")
            return
        }
        #expect(job.id == "j1")
        #expect(job.app == "a")
        #expect(job.environment == "sandbox")
        #expect(job.registeredAt == 1_700_000_000)
        #expect(job.tokens == [.valid(try DeviceToken(hex: token))])
        #expect(job.notification.alert == .text("Hi"))
        #expect(job.notification.badge == 3)
        #expect(job.notification.priority == .powerConsiderate)
        #expect(job.notification.expiry == .after(.seconds(1800)))
        #expect(job.notification.custom["k"] == .int(1))
        #expect(job.payloadError == nil)
    }

    @Test func staleAfterIsADurationAndNothingElse() {
        func staleAfter(_ value: String) -> Duration?? {
            switch parse(#"{"id":"j","app":"a","token":"\#(token)","alert":"x","staleAfter":\#(value)}"#) {
            case .job(let job): return .some(job.staleAfter)
            default: return nil
            }
        }
        #expect(staleAfter(#""10m""#) == .some(.seconds(600)))
        #expect(staleAfter("90") == .some(.seconds(90)))
        if case .job(let job) = parse(#"{"id":"j","app":"a","token":"\#(token)","alert":"x"}"#) {
            #expect(job.staleAfter == nil)
        } else {
            Issue.record("not a job")
        }
        for bad in [#""0s""#, "0", "-5", #""soon""#, #""1700000000""#, "1.5", "true"] {
            guard
                case .rejected(_, _, _, let reason, _, _) = parse(
                    #"{"id":"j","app":"a","token":"\#(token)","alert":"x","staleAfter":\#(bad)}"#
                )
            else {
                Issue.record("staleAfter \(bad) was accepted")
                continue
            }
            #expect(
                reason.contains("\"staleAfter\" must be a positive number of seconds or a string such as \"90s\""),
                "\(reason)"
            )
        }
    }

    @Test func apsDictionaryIsInterpretedAndFieldsOverrideIt() {
        let result = parse(
            #"{"id":"j","app":"a","token":"\#(token)","aps":{"alert":{"title":"T","body":"B"},"badge":1,"content-available":1,"x-custom":"y"},"badge":2}"#
        )
        guard case .job(let job) = result else {
            Issue.record("not a job: \(result)")
            return
        }
        #expect(job.notification.alert == .fields(APNSAlertFields(title: "T", body: "B")))
        #expect(job.notification.badge == 2)
        #expect(job.notification.contentAvailable)
        #expect(job.notification.additionalAPSFields["x-custom"] == .string("y"))
    }

    @Test func tokensAreDeduplicatedAndMalformedOnesKept() {
        let result = parse(#"{"id":"j","app":"a","tokens":["\#(token)","\#(token.uppercased())","zz"],"alert":"x"}"#)
        guard case .job(let job) = result else {
            Issue.record("not a job: \(result)")
            return
        }
        #expect(job.tokens.count == 2)
        guard case .malformed(let text, let reason) = job.tokens[1] else {
            Issue.record("expected malformed")
            return
        }
        #expect(text == "zz")
        #expect(reason.contains("hex"))
    }

    @Test(arguments: [
        ("not json", "not valid JSON"),
        ("[1,2]", "not an object"),
        (#"{"app":"a","token":"aa"}"#, "no \"id\""),
        (#"{"id":7,"app":"a","token":"aa"}"#, "\"id\""),
        (#"{"id":"j","app":"a"}"#, "neither"),
        (#"{"id":"j","app":"a","token":"aa","tokens":["aa"]}"#, "both"),
        (#"{"id":"j","app":"a","tokens":[]}"#, "non-empty"),
        (#"{"id":"j","app":"a","tokens":[1]}"#, "not a string"),
    ])
    func unreadableMessages(text: String, fragment: String) {
        guard case .unreadable(_, _, let reason, _) = parse(text) else {
            Issue.record("expected unreadable for \(text)")
            return
        }
        #expect(reason.contains(fragment), "\(reason)")
    }

    @Test(arguments: [
        (#""badge":-1"#, "badge"),
        (#""priority":7"#, "priority"),
        (#""env":"staging""#, "env"),
        (#""expiry":"soon""#, "expiry"),
        (#""colour":"red""#, "unknown field \"colour\""),
        (#""payload":{"aps":{}}"#, "may not contain"),
        (#""alert":{"titel":"x"}"#, "alert.titel"),
    ])
    func rejectedJobsNameTheField(field: String, fragment: String) {
        let text = #"{"id":"j","app":"a","token":"\#(token)",\#(field)}"#
        guard case .rejected(let id, _, let tokens, let reason, _, _) = parse(text) else {
            Issue.record("expected rejected for \(text)")
            return
        }
        #expect(id == "j")
        #expect(tokens == [token])
        #expect(reason.contains(fragment), "\(reason)")
    }

    @Test("A field is found by its exact name, escapes decoded; a name that only resembles one is unknown")
    func fieldNamesAreMatchedExactly() throws {
        // `\u0062adge` is "badge" written with an escape.
        guard case .job(let job) = parse(#"{"\u0069d":"j","app":"a","token":"\#(token)","\u0062adge":3}"#) else {
            Issue.record("expected a job")
            return
        }
        #expect(job.id == "j")
        #expect(job.notification.badge == 3)
        for name in ["Badge", "badges", "badg", #"bad\u0067e2"#, "i", "truncateAtWordEnds"] {
            let text = #"{"id":"j","app":"a","token":"\#(token)","\#(name)":1}"#
            guard case .rejected(_, _, _, let reason, _, _) = parse(text) else {
                Issue.record("expected \(name) to be an unknown field")
                continue
            }
            #expect(reason.contains("unknown field"), "\(reason)")
        }
    }

    @Test("Every job field has a slot, and is found by its name")
    func everyFieldHasASlot() {
        #expect(JobParser.Fields().capacity == JobParser.Fields.Name.allCases.count)
        #expect(JobParser.Fields.Name.spellings.count == JobParser.Fields.Name.allCases.count)
        for name in JobParser.Fields.Name.allCases {
            #expect(JobParser.Fields.Name.spellings[name.rawValue].description == String(describing: name))
            let utf8 = Array(String(describing: name).utf8)
            #expect(utf8.withUnsafeBufferPointer { JobParser.Fields.Name(utf8: $0) } == name)
        }
    }

    @Test(
        "A repeated member name makes the message unreadable, for fields and other names alike, however many there are"
    )
    func repeatedNamesAreRefused() {
        let others = (0..<40).map { #""x\#($0)":1"# }.joined(separator: ",")
        for repeated in [
            #""badge":1,"badge":2"#, #""id":"k""#, #""\u0074oken":"aa""#, #""x3":2"#, #""x39":2"#, #""x0":2"#,
        ] {
            let text = #"{"id":"j","app":"a","token":"\#(token)",\#(others),\#(repeated)}"#
            guard case .unreadable(_, _, let reason, _) = parse(text) else {
                Issue.record("expected unreadable for \(repeated)")
                continue
            }
            #expect(reason.contains("duplicate member name"), "\(reason)")
        }
        // Forty distinct unknown names: rejected, naming the first in order.
        guard case .rejected(_, _, _, let reason, _, _) = parse(#"{"id":"j","app":"a","token":"\#(token)",\#(others)}"#)
        else {
            Issue.record("expected rejected")
            return
        }
        #expect(reason.contains("unknown field \"x0\""), "\(reason)")
    }

    @Test func missingAppIsRejectedPerToken() {
        guard
            case .rejected(_, let app, let tokens, let reason, _, _) = parse(
                #"{"id":"j","token":"\#(token)","alert":"x"}"#
            )
        else {
            Issue.record("expected rejected")
            return
        }
        #expect(app == nil)
        #expect(tokens == [token])
        #expect(reason.contains("no \"app\""))
    }

    @Test func longAlertIsTrimmedToFit() {
        let body = String(repeating: "word ", count: 1000)
        guard
            case .job(let job) = parse(
                #"{"id":"j","app":"a","token":"\#(token)","alert":"\#(body)","truncateAtWordEnd":true}"#
            )
        else {
            Issue.record("expected job")
            return
        }
        #expect(job.payloadError == nil)
        #expect(((try? job.notification.payload())?.count ?? 9999) <= 2048)
    }

    @Test func payloadThatCannotFitIsAnError() {
        let big = String(repeating: "x", count: 3000)
        guard
            case .job(let job) = parse(
                #"{"id":"j","app":"a","token":"\#(token)","alert":"hi","payload":{"blob":"\#(big)"}}"#
            )
        else {
            Issue.record("expected job")
            return
        }
        #expect(job.payloadError?.contains("2048") == true)
    }

    @Test func resultIdsAreDeterministicAndDistinct() {
        let a = WorkerResult.notificationId(jobId: "j", token: token)
        #expect(a == WorkerResult.notificationId(jobId: "j", token: token))
        #expect(a != WorkerResult.notificationId(jobId: "j2", token: token))
        #expect(a.count == 32)
    }

    /// Result ids are stored in Redis and read by consumers: their bytes must never change.
    /// Expected values: the first 16 bytes of SHA-256 of `n\nj\n<token>` (Python's hashlib).
    @Test func resultIdsKeepTheirDigests() {
        #expect(WorkerResult.notificationId(jobId: "j", token: token) == "00d74a10af6ed3609540a6e65ff8d887")
        #expect(WorkerResult.dryRunId(jobId: "j", token: token) == "f8941a6f762c924240f22c2ac5b9627e")
        #expect(WorkerResult.notificationId(jobId: "job-é", token: "zz") == "04e253c057fdaa98ea4739b60d879f0d")
    }

    @Test func http2AppsGetHTTP2LimitsPushTypeAndCollapseId() throws {
        var parser = JobParser()
        parser.http2Apps = ["h2"]
        let big = String(repeating: "x", count: 3000)
        let text =
            #"{"id":"j","app":"h2","token":"\#(token)","alert":"hi","priority":1,"pushType":"alert","collapseId":"c-1","payload":{"blob":"\#(big)"}}"#
        let parsed = parser.parse(Array(text.utf8))
        guard case .job(let job) = parsed else {
            Issue.record("expected job: \(parsed)")
            return
        }
        #expect(job.payloadError == nil)
        #expect(job.payload.count > 3000)
        #expect(job.notification.pushType == "alert")
        #expect(job.notification.collapseId == "c-1")
        #expect(job.notification.priority == .low)

        // The same job for a binary app is over its 2048-byte limit, and priority 1 is HTTP/2 only.
        let binary = text.replacingOccurrences(of: #""app":"h2""#, with: #""app":"bin""#)
        guard case .job(let other) = parser.parse(Array(binary.utf8)) else {
            Issue.record("expected job")
            return
        }
        #expect(other.payloadError != nil)

        let voip = String(repeating: "v", count: 4500)
        let call =
            #"{"id":"v","app":"h2","token":"\#(token)","alert":"call","pushType":"voip","payload":{"blob":"\#(voip)"}}"#
        guard case .job(let callJob) = parser.parse(Array(call.utf8)) else {
            Issue.record("expected job")
            return
        }
        #expect(callJob.payloadError == nil)
    }

    @Test func badPushTypeOrCollapseIdIsRejectedWithTheField() {
        for (field, fragment) in [
            (#""pushType":"fax""#, "pushType"),
            (#""collapseId":"\#(String(repeating: "c", count: 65))""#, "collapseId"),
        ] {
            let result = parse(#"{"id":"j","app":"a","token":"\#(token)","alert":"x",\#(field)}"#)
            guard case .rejected(_, _, _, let reason, _, _) = result else {
                Issue.record("expected rejection: \(result)")
                continue
            }
            #expect(reason.contains(fragment), "\(reason)")
        }
    }
}

@Suite struct WorkerResultTests {
    @Test func serializesEveryFieldAsValidJSONInOrder() throws {
        let result = WorkerResult(
            kind: .transmissionError,
            resultId: "r",
            jobId: "j\"1",
            app: "a",
            environment: "production",
            token: "ab",
            status: .invalidToken,
            reason: "Invalid token",
            attempts: 2,
            possibleDuplicate: false,
            worker: "w",
            at: 1700000000000
        )
        let text = String(decoding: result.serialized(), as: UTF8.self)
        #expect(
            text
                == #"{"type":"transmissionError","resultId":"r","jobId":"j\"1","app":"a","env":"production","token":"ab","status":8,"statusName":"invalidToken","reason":"Invalid token","attempts":2,"possibleDuplicate":false,"worker":"w","at":1700000000000}"#
        )
        let parsed = try JSONValue.parse(result.serialized())
        #expect(parsed["jobId"] == "j\"1")
    }

    @Test func invalidJobCarriesWhereTheMessageWas() throws {
        let result = WorkerResult(
            kind: .invalidJob,
            resultId: "r",
            status: .invalidJob,
            reason: "bad",
            topic: "apn.requests",
            partition: 3,
            offset: 42,
            worker: "w",
            at: 1
        )
        let parsed = try JSONValue.parse(result.serialized())
        #expect(parsed["partition"] == .int(3))
        #expect(parsed["offset"] == .int(42))
        #expect(parsed["jobId"] == nil)
        #expect(result.key == nil)
    }

    @Test("The room reserved for a result's bytes holds them, with little to spare, whichever members it has")
    func reservationFitsTheBytesWritten() {
        let token = String(repeating: "0a1b2c3d", count: 8)
        var full = WorkerResult(
            kind: .transmissionError,
            resultId: WorkerResult.notificationId(jobId: "job-1", token: token),
            jobId: "job-1",
            app: "news",
            environment: "production",
            token: token,
            status: .invalidToken,
            reason: String(repeating: "a long reason ", count: 200),
            attempts: 3,
            possibleDuplicate: true,
            timestamp: 1_700_000_000,
            topic: "apn.requests",
            partition: 11,
            offset: 123_456_789,
            worker: "worker-7",
            at: 1_700_000_000_000
        )
        full.apnsId = "123e4567-e89b-12d3-a456-426614174000"
        full.apnsUniqueId = "a6d6c6b6-1234-4321-8765-0123456789ab"
        full.payloadBytes = 2048
        full.metadata = Array(#"{"campaign":"spring","n":1}"#.utf8)
        let results = [
            full,
            WorkerResult(
                kind: .transmitted,
                resultId: full.resultId,
                jobId: "job-1",
                app: "news",
                environment: "production",
                token: token,
                attempts: 1,
                possibleDuplicate: false,
                worker: "worker-7",
                at: 1_700_000_000_000
            ),
            WorkerResult(
                kind: .invalidJob,
                resultId: "r",
                status: .invalidJob,
                reason: "bad",
                topic: "apn.requests",
                partition: 3,
                offset: 42,
                worker: "w",
                at: 1
            ),
            WorkerResult(
                kind: .feedback,
                resultId: "f",
                app: "news",
                environment: "sandbox",
                token: token,
                timestamp: 1_700_000_000,
                worker: "w",
                at: 1
            ),
            WorkerResult(
                kind: .transmitted,
                resultId: String(repeating: "x", count: 400),
                jobId: "😀",
                worker: "w",
                at: 1
            ),
        ]
        for result in results {
            let count = result.serialized().count
            #expect(result.reservation >= count, "\(result.kind): \(result.reservation) < \(count)")
            #expect(result.reservation <= count + 128, "\(result.kind): \(result.reservation) for \(count) bytes")
        }
    }
}

@Suite struct JobTokenTextTests {
    @Test("A token's text in results is its lowercase hex, however the job wrote it")
    func tokenTextIsLowercaseHex() throws {
        let lower = String(repeating: "0a1b2c3d", count: 8)
        let forms = [
            lower, lower.uppercased(), "<" + lower.prefix(32) + " " + lower.dropFirst(32) + ">",
            String(lower.prefix(62)),
        ]
        for form in forms {
            guard
                case .job(let job) = JobParser().parse(
                    Array(#"{"id":"t","app":"a","token":"\#(form)","alert":"x"}"#.utf8)
                )
            else {
                Issue.record("not a job: \(form)")
                continue
            }
            let token = try DeviceToken(hex: form)
            #expect(job.tokens == [.valid(token, hex: token.hex)], "\(form)")
            #expect(job.tokens.first?.text == token.hex)
        }
        #expect(JobParser.isLowercaseHex(lower, of: try DeviceToken(hex: lower)))
        #expect(!JobParser.isLowercaseHex(lower.uppercased(), of: try DeviceToken(hex: lower)))
        #expect(!JobParser.isLowercaseHex(" " + lower, of: try DeviceToken(hex: lower)))
    }
}
