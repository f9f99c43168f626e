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
}
