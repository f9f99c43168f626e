import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// The job fields of issue 15 through `apn-worker run`: a few jobs each, in through Kafka, results
/// out of Kafka, and what the simulators accepted. Each test has a stack of its own (Swift Testing
/// has no suite-wide teardown that would stop a shared one when the suite ends).
@Suite("Job features end to end", .serialized, .timeLimit(.minutes(3)))
struct JobFeaturesEndToEndTests {
    typealias Result = [String: JSONValue]

    static func job(_ id: String, _ tokens: [DeviceToken], app: String = WorkerStack.app, _ fields: String) -> [UInt8] {
        let tokenField =
            tokens.count == 1
            ? #""token":"\#(tokens[0].hex)""#
            : #""tokens":[\#(tokens.map { "\"\($0.hex)\"" }.joined(separator: ","))]"#
        return Array(#"{"id":"\#(id)","app":"\#(app)",\#(tokenField),\#(fields)}"#.utf8)
    }

    static func id(_ job: String, _ token: DeviceToken) -> String {
        WorkerResult.notificationId(jobId: job, token: token.hex)
    }

    /// Runs `body` with a started stack and one worker; records the worker's log on failure.
    static func withStack(
        _ stack: WorkerStack,
        _ body: (WorkerStack) async throws -> Void
    ) async {
        do {
            try await stack.startWorker("w1")
            try await body(stack)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    /// Waits for a result of each id and returns them by id.
    static func results(_ stack: WorkerStack, _ ids: [String]) async throws -> [String: Result] {
        try await stack.readResults { _ in ids.allSatisfy { stack.resultsById[$0] != nil } }
        return stack.resultsById.filter { ids.contains($0.key) }
    }

    @Test("A sound object is critical only with critical 1 or true, on both transports")
    func soundObjects() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]), binaryRecord: true)
        await Self.withStack(stack) { stack in
            let plain = DeviceToken.numbered(1), critical = DeviceToken.numbered(2),
                unknownKey = DeviceToken.numbered(3)
            let h2Plain = DeviceToken.numbered(4), h2Critical = DeviceToken.numbered(5)
            try await stack.produce([
                Self.job("sound-plain", [plain], #""alert":"x","sound":{"name":"a.caf","critical":0}"#),
                Self.job("sound-critical", [critical], #""alert":"x","sound":{"name":"a.caf","critical":1}"#),
                Self.job("sound-unknown", [unknownKey], #""alert":"x","sound":{"name":"a.caf","loud":true}"#),
                Self.job("sound-plain", [h2Plain], app: WorkerStack.http2App, #""alert":"x","sound":{"name":"a.caf"}"#),
                Self.job(
                    "sound-critical",
                    [h2Critical],
                    app: WorkerStack.http2App,
                    #""alert":"x","sound":{"name":"a.caf","critical":true}"#
                ),
            ])
            let byId = try await Self.results(
                stack,
                [
                    Self.id("sound-plain", plain), Self.id("sound-critical", critical),
                    Self.id("sound-unknown", unknownKey),
                    Self.id("sound-plain", h2Plain), Self.id("sound-critical", h2Critical),
                ]
            )
            #expect(byId[Self.id("sound-plain", plain)]?["type"] == "transmitted")
            #expect(byId[Self.id("sound-critical", critical)]?["type"] == "transmitted")
            #expect(byId[Self.id("sound-plain", h2Plain)]?["type"] == "transmitted")
            #expect(byId[Self.id("sound-critical", h2Critical)]?["type"] == "transmitted")
            let unknown = byId[Self.id("sound-unknown", unknownKey)]
            #expect(unknown?["status"] == .int(517))
            #expect(
                unknown?["reason"]
                    == "\"sound.loud\" is not a sound field; a sound object has name, critical and volume"
            )
            // What went out: the plain sound as a name, the critical one as a critical dictionary.
            let plainLength = #"{"aps":{"alert":"x","sound":"a.caf"}}"#.utf8.count
            let criticalLength = #"{"aps":{"alert":"x","sound":{"critical":1,"name":"a.caf","volume":1.0}}}"#.utf8.count
            let h2Lengths = Dictionary(
                (stack.http2Simulator?.accepted ?? []).map { ($0.token, $0.payloadLength) },
                uniquingKeysWith: { a, _ in a }
            )
            #expect(h2Lengths[h2Plain] == plainLength)
            #expect(h2Lengths[h2Critical] == criticalLength)
            await stack.simulator.stop()  // flushes the record
            let binaryLengths = Dictionary(
                stack.binaryRecord().compactMap { r in
                    r["token"]?.stringValue.map { ($0, r["payloadLength"]?.intValue) }
                },
                uniquingKeysWith: { a, _ in a }
            )
            #expect(binaryLengths[plain.hex] == .some(Int64(plainLength)))
            #expect(binaryLengths[critical.hex] == .some(Int64(criticalLength)))
            #expect(binaryLengths[unknownKey.hex] == nil)
        }
    }

    @Test("A numeric expiry that can only be a mistake is refused with the form to use; an absolute one is sent")
    func numericExpiry() async throws {
        let stack = try await WorkerStack.start()
        await Self.withStack(stack) { stack in
            let relative = DeviceToken.numbered(1), milliseconds = DeviceToken.numbered(2),
                absolute = DeviceToken.numbered(3)
            let later = Int(Date().timeIntervalSince1970) + 86_400
            try await stack.produce([
                Self.job("expiry-relative", [relative], #""alert":"x","expiry":3600"#),
                Self.job("expiry-ms", [milliseconds], #""alert":"x","expiry":\#(later)000"#),
                Self.job("expiry-absolute", [absolute], #""alert":"x","expiry":\#(later)"#),
            ])
            let byId = try await Self.results(
                stack,
                [
                    Self.id("expiry-relative", relative), Self.id("expiry-ms", milliseconds),
                    Self.id("expiry-absolute", absolute),
                ]
            )
            let refused = byId[Self.id("expiry-relative", relative)]
            #expect(refused?["status"] == .int(517))
            #expect(
                refused?["reason"]?.stringValue?.contains("a number means an absolute UNIX time in seconds") == true
            )
            #expect(refused?["reason"]?.stringValue?.contains("\"30m\"") == true)
            let refusedMilliseconds = byId[Self.id("expiry-ms", milliseconds)]
            #expect(refusedMilliseconds?["status"] == .int(517))
            #expect(refusedMilliseconds?["reason"]?.stringValue?.contains("looks like UNIX milliseconds") == true)
            #expect(byId[Self.id("expiry-absolute", absolute)]?["type"] == "transmitted")
            let accepted = stack.simulator.acceptedByToken
            #expect(accepted[absolute] == 1 && accepted[relative] == nil && accepted[milliseconds] == nil)
        }
    }

    @Test("metadata is copied unchanged into every result of its job")
    func metadataEcho() async throws {
        let bad = DeviceToken.numbered(2)
        let stack = try await WorkerStack.start(badTokens: [bad])
        await Self.withStack(stack) { stack in
            let good = DeviceToken.numbered(1), invalid = DeviceToken.numbered(3)
            let metadata = #"{"campaign":"spring","user":{"id":7781,"tags":["a","b"]}}"#
            try await stack.produce([
                Self.job("meta", [good, bad], #""alert":"x","metadata":\#(metadata)"#),
                Array(
                    #"{"id":"meta-bad","app":"\#(WorkerStack.app)","tokens":["\#(invalid.hex)","zz"],"badge":-1,"metadata":\#(metadata)}"#
                        .utf8
                ),
                Array(#"{"id":"meta-unreadable","app":"\#(WorkerStack.app)","metadata":\#(metadata)}"#.utf8),
            ])
            let ids = [
                Self.id("meta", good), Self.id("meta", bad), Self.id("meta-bad", invalid),
                WorkerResult.notificationId(jobId: "meta-bad", token: "zz"),
            ]
            try await stack.readResults { results in
                ids.allSatisfy { stack.resultsById[$0] != nil } && results.contains { $0["type"] == "invalidJob" }
            }
            let expected = try JSONValue.parse(metadata)
            let byId = stack.resultsById
            #expect(byId[Self.id("meta", good)]?["type"] == "transmitted")
            #expect(byId[Self.id("meta", bad)]?["status"] == .int(8))
            #expect(byId[Self.id("meta-bad", invalid)]?["status"] == .int(517))
            for id in ids { #expect(byId[id]?["metadata"] == expected, "\(byId[id] ?? [:])") }
            let unreadable = stack.results.first { $0["type"] == "invalidJob" }
            #expect(unreadable?["jobId"] == "meta-unreadable")
            #expect(unreadable?["metadata"] == expected)
            #expect(stack.simulator.acceptedByToken[good] == 1)
        }
    }

    @Test("apnsId: sent as given for one token, derived per token for several; results carry apnsId and apnsUniqueId")
    func apnsIds() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]), http2Sandbox: true)
        await Self.withStack(stack) { stack in
            let single = DeviceToken.numbered(1), first = DeviceToken.numbered(2), second = DeviceToken.numbered(3)
            let plain = DeviceToken.numbered(4), binary = DeviceToken.numbered(5)
            let given = "3F2504E0-4F89-41D3-9A0C-0305E82C3301"
            try await stack.produce([
                Self.job("id-single", [single], app: WorkerStack.http2App, #""alert":"x","apnsId":"\#(given)""#),
                Self.job("id-many", [first, second], app: WorkerStack.http2App, #""alert":"x","apnsId":"\#(given)""#),
                Self.job("id-none", [plain], app: WorkerStack.http2App, #""alert":"x""#),
                Self.job("id-binary", [binary], #""alert":"x","apnsId":"\#(given)""#),
            ])
            let byId = try await Self.results(
                stack,
                [
                    Self.id("id-single", single), Self.id("id-many", first), Self.id("id-many", second),
                    Self.id("id-none", plain),
                    Self.id("id-binary", binary),
                ]
            )
            let sent = Dictionary(
                (stack.http2Simulator?.accepted ?? []).map { ($0.token, $0.apnsID) },
                uniquingKeysWith: { a, _ in a }
            )
            let lower = given.lowercased()
            let expected: [(String, DeviceToken, String)] = [
                ("id-single", single, lower),
                ("id-many", first, JobAPNSID.derived(from: lower, token: first.hex)),
                ("id-many", second, JobAPNSID.derived(from: lower, token: second.hex)),
            ]
            for (job, token, apnsId) in expected {
                let result = byId[Self.id(job, token)]
                #expect(result?["type"] == "transmitted")
                #expect(result?["apnsId"]?.stringValue == apnsId)
                #expect(sent[token] == apnsId)
                #expect(result?["apnsUniqueId"]?.stringValue?.isEmpty == false)
            }
            #expect(expected[1].2 != expected[2].2)
            // Without apnsId the worker's own id is reported, the one the simulator saw.
            let own = byId[Self.id("id-none", plain)]
            #expect(own?["apnsId"]?.stringValue != nil && own?["apnsId"]?.stringValue == sent[plain])
            let refused = byId[Self.id("id-binary", binary)]
            #expect(refused?["status"] == .int(517))
            #expect(refused?["reason"]?.stringValue?.hasPrefix("\"apnsId\" is for HTTP/2 apps") == true)
            #expect(stack.simulator.acceptedByToken[binary] == nil)
        }
    }

    @Test("A job names a topic from its app's topics; another topic fails with 517 for each token")
    func perJobTopics() async throws {
        let stack = try await WorkerStack.start(
            http2: (badTokens: [], unregistered: [:]),
            http2AppSettings: ["topics: [\(WorkerStack.http2App), com.example.watch]"]
        )
        await Self.withStack(stack) { stack in
            let watch = DeviceToken.numbered(1), voip = DeviceToken.numbered(2), own = DeviceToken.numbered(3)
            let outside = [DeviceToken.numbered(4), .numbered(5)], binary = DeviceToken.numbered(6)
            try await stack.produce([
                Self.job(
                    "topic-watch",
                    [watch],
                    app: WorkerStack.http2App,
                    #""alert":"x","topic":"com.example.watch""#
                ),
                Self.job(
                    "topic-voip",
                    [voip],
                    app: WorkerStack.http2App,
                    #""alert":"x","topic":"com.example.watch","pushType":"voip""#
                ),
                Self.job("topic-own", [own], app: WorkerStack.http2App, #""alert":"x""#),
                Self.job(
                    "topic-outside",
                    outside,
                    app: WorkerStack.http2App,
                    #""alert":"x","topic":"com.example.other""#
                ),
                Self.job("topic-binary", [binary], #""alert":"x","topic":"com.example.watch""#),
            ])
            let byId = try await Self.results(
                stack,
                [
                    Self.id("topic-watch", watch), Self.id("topic-voip", voip), Self.id("topic-own", own),
                    Self.id("topic-binary", binary),
                ]
                    + outside.map { Self.id("topic-outside", $0) }
            )
            let topics = Dictionary(
                (stack.http2Simulator?.accepted ?? []).map { ($0.token, $0.topic) },
                uniquingKeysWith: { a, _ in a }
            )
            #expect(byId[Self.id("topic-watch", watch)]?["type"] == "transmitted")
            #expect(topics[watch] == .some("com.example.watch"))
            #expect(topics[voip] == .some("com.example.watch.voip"))
            #expect(topics[own] == .some(WorkerStack.http2App))
            for token in outside {
                let result = byId[Self.id("topic-outside", token)]
                #expect(result?["status"] == .int(517))
                #expect(
                    result?["reason"]?.stringValue?.contains("is not one of app \"\(WorkerStack.http2App)\"'s topics")
                        == true
                )
                #expect(topics[token] == nil)
            }
            #expect(byId[Self.id("topic-binary", binary)]?["status"] == .int(517))
            // One pool served every topic.
            #expect(Set((stack.http2Simulator?.accepted ?? []).map(\.connection)).count <= 2)
        }
    }

    @Test("A dry run does everything but write to Apple; it never blocks a real job with the same id")
    func dryRuns() async throws {
        let stack = try await WorkerStack.start(appSettings: [], binaryRecord: false)
        await Self.withStack(stack) { stack in
            let a = DeviceToken.numbered(1), b = DeviceToken.numbered(2)
            let dry = Self.job("dry", [a, b], #""alert":"Your order has shipped","dryRun":true,"metadata":{"m":1}"#)
            try await stack.produce([dry, dry])
            let dryIds = [a, b].map { WorkerResult.dryRunId(jobId: "dry", token: $0.hex) }
            let dryResults = try await Self.results(stack, dryIds)
            for id in dryIds {
                #expect(dryResults[id]?["type"] == "dryRun")
                #expect(
                    dryResults[id]?["payloadBytes"]
                        == .int(Int64(#"{"aps":{"alert":"Your order has shipped"}}"#.utf8.count))
                )
                #expect(dryResults[id]?["metadata"] == ["m": 1])
            }
            #expect(stack.simulator.acceptedByToken.isEmpty)
            // The same id for real: sent, with results of its own.
            try await stack.produce([Self.job("dry", [a, b], #""alert":"Your order has shipped""#)])
            let real = try await Self.results(stack, [Self.id("dry", a), Self.id("dry", b)])
            #expect(real.values.allSatisfy { $0["type"] == "transmitted" })
            #expect(stack.simulator.acceptedByToken[a] == 1 && stack.simulator.acceptedByToken[b] == 1)
            // The dry run produced twice had one result per notification.
            #expect(stack.results.filter { $0["type"] == "dryRun" }.count == 2)
            #expect(try await stack.waitForAllCommitted())
        }
    }

    @Test("An app with dryRun: true answers every job with dryRun results and opens no connection")
    func dryRunApp() async throws {
        let stack = try await WorkerStack.start(appSettings: ["dryRun: true"])
        await Self.withStack(stack) { stack in
            let token = DeviceToken.numbered(1)
            try await stack.produce([Self.job("app-dry", [token], #""alert":"x""#)])
            let id = WorkerResult.dryRunId(jobId: "app-dry", token: token.hex)
            let byId = try await Self.results(stack, [id])
            #expect(byId[id]?["type"] == "dryRun")
            #expect(stack.simulator.statistics.connections == 0)
        }
    }
}
