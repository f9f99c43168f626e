import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// Live Activity jobs through `apn-worker run`: in through Kafka, sent to the HTTP/2 simulator
/// with push type `liveactivity` and the `.push-type.liveactivity` topic, results out of Kafka;
/// an invalid one answered with its reason, and one for a binary app refused.
@Suite("Live Activities end to end", .serialized, .timeLimit(.minutes(3)))
struct LiveActivityEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    @Test("Start, update and end jobs reach the simulator as Live Activity pushes; mistakes get their reason")
    func startUpdateAndEnd() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        await Jobs.withStack(stack) { stack in
            let start = DeviceToken.numbered(1)
            let update = DeviceToken.numbered(2)
            let end = DeviceToken.numbered(3)
            let noAttributes = DeviceToken.numbered(4)
            let binary = DeviceToken.numbered(5)
            let h2 = WorkerStack.http2App
            let startFields =
                #""liveActivity":{"event":"start","attributesType":"MatchAttributes","attributes":{"home":"A","away":"B"},"contentState":{"score":"0-0"},"alert":{"title":"Kick-off","body":"A v B"},"inputPushToken":true}"#
            let updateFields = #""liveActivity":{"event":"update","contentState":{"score":"1-0"}},"priority":5"#
            let endFields = #""liveActivity":{"event":"end","contentState":{"score":"2-1"},"dismissalDate":1795660000}"#
            try await stack.produce([
                Jobs.job("la-start", [start], app: h2, startFields),
                Jobs.job("la-update", [update], app: h2, updateFields),
                Jobs.job("la-end", [end], app: h2, endFields),
                Jobs.job("la-bad", [noAttributes], app: h2, #""liveActivity":{"event":"start","contentState":{}}"#),
                Jobs.job("la-binary", [binary], #""liveActivity":{"event":"update","contentState":{}}"#),
            ])
            let ids = [
                Jobs.id("la-start", start), Jobs.id("la-update", update), Jobs.id("la-end", end),
                Jobs.id("la-bad", noAttributes), Jobs.id("la-binary", binary),
            ]
            let byId = try await Jobs.results(stack, ids)
            for (job, token) in [("la-start", start), ("la-update", update), ("la-end", end)] {
                #expect(
                    byId[Jobs.id(job, token)]?["type"] == "transmitted",
                    "\(job): \(byId[Jobs.id(job, token)] ?? [:])"
                )
            }
            let bad = byId[Jobs.id("la-bad", noAttributes)]
            #expect(bad?["status"] == .int(517))
            #expect(
                bad?["reason"]?.stringValue?.hasPrefix("a Live Activity start needs \"liveActivity.attributesType\"")
                    == true
            )
            let refused = byId[Jobs.id("la-binary", binary)]
            #expect(refused?["status"] == .int(517))
            #expect(refused?["reason"]?.stringValue?.contains("binary protocol") == true)

            let accepted = Dictionary(
                (stack.http2Simulator?.accepted ?? []).map { ($0.token, $0) },
                uniquingKeysWith: { a, _ in a }
            )
            for token in [start, update, end] {
                #expect(accepted[token]?.pushType == "liveactivity")
                #expect(accepted[token]?.topic?.hasSuffix(".push-type.liveactivity") == true)
            }
            #expect(accepted[update]?.priority == 5)
            #expect(accepted[noAttributes] == nil)
            // Each payload as the parser builds it: Apple's keys, the timestamp from the Kafka
            // message (ten digits now, so the length does not depend on its value).
            var parser = JobParser()
            parser.http2Apps = [h2]
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            for (job, token, fields) in [("la-start", start, startFields), ("la-update", update, updateFields)] {
                guard case .job(let parsed) = parser.parse(Jobs.job(job, [token], app: h2, fields), producedAt: now)
                else {
                    Issue.record("\(job) does not parse")
                    continue
                }
                #expect(accepted[token]?.payloadLength == parsed.payload.count, "\(job)")
            }
        }
    }

    @Test("apn-worker channels creates, lists, reads and deletes channels at the simulator with the app's credentials")
    func channelsCommand() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        do {
            let app = ["--config", stack.configPath, "--app", WorkerStack.http2App]
            func json(_ arguments: [String]) async throws -> JSONValue? {
                let result = try await run(Paths.executable, ["channels"] + arguments)
                #expect(result.status == 0, "\(arguments): \(result.stderr)")
                return try? JSONValue.parse(Array(result.stdout.utf8))
            }
            let created = try await json(["create"] + app + ["--storage", "most-recent"])
            let id = try #require(created?["channel"]?.stringValue)
            #expect(created?["storage"] == "most-recent")
            #expect(created?["env"] == "production")
            let other = try #require(try await json(["create"] + app)?["channel"]?.stringValue)
            #expect(try await json(["list"] + app)?["channels"] == .array([.string(id), .string(other)]))
            #expect(try await json(["get"] + app + [id])?["storage"] == "most-recent")
            #expect(try await json(["get"] + app + [other])?["storage"] == "none")
            #expect(try await json(["delete"] + app + [id])?["deleted"] == .bool(true))
            #expect(try await json(["list"] + app)?["channels"] == .array([.string(other)]))
            // Apple's refusal: exit 1 with its status and reason.
            let gone = try await run(Paths.executable, ["channels", "get"] + app + [id])
            #expect(gone.status == 1)
            #expect(gone.stderr.contains("ChannelNotRegistered"), "\(gone.stderr)")
            // A binary app has no channels: exit 2 with the sentence.
            let binary = try await run(
                Paths.executable,
                ["channels", "list", "--config", stack.configPath, "--app", WorkerStack.app]
            )
            #expect(binary.status == 2)
            #expect(binary.stderr.contains("binary protocol"), "\(binary.stderr)")
            // What the simulator carried out (the refused read is answered, not recorded).
            let operations = stack.http2Simulator?.channelOperations.map(\.kind) ?? []
            #expect(operations == [.create, .create, .list, .read, .read, .delete, .list], "\(operations)")

            // A channel the command created is in the workers' registry: a broadcast to it
            // without `expiry` is kept the 8 hours its storage policy allows.
            let stored = try #require(
                try await json(["create"] + app + ["--storage", "most-recent"])?["channel"]?.stringValue
            )
            try await stack.startWorker("w1")
            let update = #""liveActivity":{"event":"update","contentState":{"score":"1-1"}}"#
            try await stack.produce([BroadcastEndToEndTests.job("cli-channel", channels: [stored], update)])
            let resultId = Jobs.id("cli-channel", stored)
            let sent = try await Jobs.results(stack, [resultId])[resultId]
            #expect(sent?["type"] == "transmitted", "\(sent ?? [:])")
            let kept = stack.http2Simulator?.broadcasts.last { $0.channelID == stored }?.expiration ?? 0
            let now = Int(Date().timeIntervalSince1970)
            #expect(abs(kept - (now + 8 * 3600)) < 120, "\(kept)")
        } catch {
            Issue.record("\(error)")
        }
        await stack.shutdown()
    }
}
