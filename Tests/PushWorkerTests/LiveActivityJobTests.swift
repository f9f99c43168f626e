import APNSCore
import APNSHTTP2Core
import Testing

@testable import PushWorker

/// Live Activity jobs (`docs/jobs.md`, "Live Activities"): the `aps` dictionary Apple documents
/// (`docs/apns-protocol.md` §5.1), push type `liveactivity`, and a one-sentence reason for
/// everything a job writer can get wrong.
@Suite struct LiveActivityJobTests {
    static let token = String(repeating: "ab", count: 32)
    /// 2026-11-26T00:00:00Z, in milliseconds: the job's Kafka timestamp.
    static let producedAt: Int64 = 1_795_651_200_000

    func parse(_ liveActivity: String, extra: String = "", app: String = "a") -> JobParseResult {
        var parser = JobParser()
        parser.http2Apps = ["a"]
        let job = #"{"id":"j","app":"\#(app)","token":"\#(Self.token)","liveActivity":\#(liveActivity)\#(extra)}"#
        return parser.parse(Array(job.utf8), producedAt: Self.producedAt)
    }

    /// The reason a job is rejected, or `nil` when it parses.
    func reason(_ liveActivity: String, extra: String = "", app: String = "a") -> String? {
        switch parse(liveActivity, extra: extra, app: app) {
        case .job: nil
        case .rejected(_, _, _, let reason, _, _), .unreadable(_, _, let reason, _): reason
        }
    }

    func aps(_ liveActivity: String, extra: String = "") throws -> [String: JSONValue] {
        guard case .job(let job) = parse(liveActivity, extra: extra) else {
            Issue.record("not a job: \(parse(liveActivity, extra: extra))")
            throw CancellationError()
        }
        #expect(job.payloadError == nil)
        #expect(job.notification.pushType == "liveactivity")
        let payload = try JSONValue.parse(job.payload)
        return try #require(payload["aps"]?.objectValue)
    }

    @Test func aStartBuildsApplesApsDictionary() throws {
        let aps = try aps(
            #"""
            {"event":"start","contentState":{"score":"0-0"},"attributesType":"MatchAttributes",
             "attributes":{"home":"A","away":"B"},"alert":{"title":"Kick-off","body":"A v B","sound":"default"},
             "staleDate":1795654800,"relevanceScore":75,"inputPushToken":true}
            """#
        )
        #expect(aps["event"] == .string("start"))
        #expect(aps["content-state"] == .object(["score": .string("0-0")]))
        #expect(aps["timestamp"] == .int(1_795_651_200), "the job's production time, in seconds")
        #expect(aps["stale-date"] == .int(1_795_654_800))
        #expect(aps["attributes-type"] == .string("MatchAttributes"))
        #expect(aps["attributes"] == .object(["home": .string("A"), "away": .string("B")]))
        // §5.1: the sound is inside the alert, where ActivityKit plays it; not beside it in aps.
        #expect(
            aps["alert"]
                == .object(["title": .string("Kick-off"), "body": .string("A v B"), "sound": .string("default")])
        )
        #expect(aps["sound"] == nil)
        #expect(aps["relevance-score"]?.doubleValue == 75)
        #expect(aps["input-push-token"] == .int(1))
        #expect(aps["dismissal-date"] == nil)
    }

    @Test func anUpdateAndAnEndCarryTheirOwnFields() throws {
        let update = try aps(#"{"event":"update","contentState":{"score":"1-0"},"timestamp":1795651300}"#)
        #expect(update["event"] == .string("update"))
        #expect(update["timestamp"] == .int(1_795_651_300))
        #expect(update["alert"] == nil)
        let end = try aps(#"{"event":"end","contentState":{"score":"2-1"},"dismissalDate":1795660000}"#)
        #expect(end["event"] == .string("end"))
        #expect(end["dismissal-date"] == .int(1_795_660_000))
        let channel = try aps(
            #"{"event":"start","contentState":{},"attributesType":"T","attributes":{},"alert":{"title":"t","body":"b"},"inputPushChannel":"dHN0LXNyY2gtY2hubA=="}"#
        )
        #expect(channel["input-push-channel"] == .string("dHN0LXNyY2gtY2hubA=="))
    }

    @Test func aLocalizedTitleAndBodyAreWrittenAsAppleShowsThem() throws {
        // Apple's example (§5.1): title and body as loc-key and loc-args, the sound in the alert.
        let aps = try aps(
            #"""
            {"event":"update","contentState":{"health":0.941},
             "alert":{"title":{"loc-key":"%@ found a sword!","loc-args":["Power Panda"]},
                      "body":{"loc-key":"%@ found a sword in a cave."},"sound":"chime.aiff"}}
            """#
        )
        let title: JSONValue = .object([
            "loc-key": .string("%@ found a sword!"), "loc-args": .array([.string("Power Panda")]),
        ])
        #expect(
            aps["alert"]
                == .object([
                    "title": title, "body": .object(["loc-key": .string("%@ found a sword in a cave.")]),
                    "sound": .string("chime.aiff"),
                ])
        )
        #expect(aps["sound"] == nil)
    }

    @Test func theTopicIsTheBundleWithTheLiveActivitySuffix() throws {
        guard case .job(let job) = parse(#"{"event":"update","contentState":{}}"#) else {
            Issue.record("not a job")
            return
        }
        #expect(job.liveActivity?.event == .update)
        #expect(job.notification.pushType == "liveactivity")
        #expect(APNSPushType.liveactivity.topic(bundleID: "com.example") == "com.example.push-type.liveactivity")
    }

    @Test(
        "Each mistake is answered with its reason",
        arguments: [
            (#"{"event":"start","contentState":{},"alert":{"title":"t","body":"b"}}"#, "attributesType"),
            (
                #"{"event":"start","contentState":{},"attributesType":"T","attributes":{}}"#,
                "needs \"liveActivity.alert\""
            ),
            (#"{"event":"update"}"#, "contentState\" is required"),
            (#"{"event":"update","contentState":[1]}"#, "contentState\" is required"),
            (#"{"event":"pause","contentState":{}}"#, "\"start\", \"update\" or \"end\""),
            (#"{"event":"end","contentState":{},"staleDate":1795600000}"#, "would show as stale at once"),
            (#"{"event":"update","contentState":{},"dismissalDate":1795660000}"#, "end event only"),
            (#"{"event":"update","contentState":{},"attributes":{}}"#, "start event only"),
            (#"{"event":"update","contentState":{},"colour":"red"}"#, "not a Live Activity field"),
            (#"{"event":"update","contentState":{},"timestamp":"now"}"#, "UNIX time in seconds"),
            (#"{"event":"update","contentState":{},"alert":{"title":"t"}}"#, "both a title and a body"),
            (#"{"event":"update","contentState":{},"alert":{"title":7,"body":"b"}}"#, "or an object with \"loc-key\""),
            (
                #"{"event":"update","contentState":{},"alert":{"title":{"loc-args":[]},"body":"b"}}"#,
                "needs \"loc-key\""
            ),
            (
                #"{"event":"update","contentState":{},"alert":{"title":"t","body":{"loc-key":"k","loc-args":[1]}}}"#,
                "array of strings"
            ),
            (
                #"{"event":"update","contentState":{},"alert":{"title":"t","body":{"loc-key":"k","args":[]}}}"#,
                "not a localized text field"
            ),
            (
                #"{"event":"start","contentState":{},"attributesType":"T","attributes":{},"alert":{"title":"t","body":"b"},"inputPushToken":true,"inputPushChannel":"YQ=="}"#,
                "not both"
            ),
            (#"{"event":"start","contentState":{},"inputPushChannel":"%%%"}"#, "base64"),
            ("[1]", "must be an object"),
        ]
    )
    func eachMistakeIsAnsweredWithItsReason(liveActivity: String, expected: String) {
        let answer = reason(liveActivity)
        #expect(answer?.contains(expected) == true, "\(liveActivity) → \(answer ?? "accepted")")
    }

    @Test func priorityOneIsRefusedAndTenAndFiveAreSent() throws {
        // §5.1, §7.3: apns-priority 10 or 5 for a Live Activity, to a token or a channel.
        let update = #"{"event":"update","contentState":{}}"#
        guard case .rejected(_, _, let tokens, let reason, _, _) = parse(update, extra: #","priority":1"#) else {
            Issue.record("a Live Activity with priority 1 was not refused")
            return
        }
        #expect(tokens == [Self.token])
        #expect(reason.contains("priority") && reason.contains("10") && reason.contains("5"), "\(reason)")
        for priority in [10, 5] {
            guard case .job(let job) = parse(update, extra: #","priority":\#(priority)"#) else {
                Issue.record("priority \(priority) was refused")
                continue
            }
            #expect(job.notification.priority.rawValue == UInt8(priority))
        }
    }

    @Test func aContentStateOverTheLimitIsRefused() {
        let big = String(repeating: "x", count: LiveActivity.maxContentStateBytes)
        #expect(
            reason(#"{"event":"update","contentState":{"s":"\#(big)"}}"#)?.contains("over ActivityKit's limit") == true
        )
    }

    @Test func aBinaryAppCannotSendALiveActivity() {
        #expect(reason(#"{"event":"update","contentState":{}}"#, app: "binary")?.contains("binary protocol") == true)
    }

    @Test func otherPushTypesAndTopLevelAlertsDoNotMix() {
        #expect(
            reason(#"{"event":"update","contentState":{}}"#, extra: #","pushType":"alert""#)?.contains(
                "push type liveactivity"
            ) == true
        )
        #expect(reason(#"{"event":"update","contentState":{}}"#, extra: #","pushType":"liveactivity""#) == nil)
        #expect(
            reason(#"{"event":"update","contentState":{}}"#, extra: #","alert":"hi""#)?.contains("does not go with")
                == true
        )
    }

    @Test(
        "\"priority\": \"auto\" is taken for a Live Activity job, with its alert noted, and refused for any other job"
    )
    func autoPriority() throws {
        guard case .job(let job) = parse(#"{"event":"update","contentState":{}}"#, extra: #","priority":"auto""#) else {
            Issue.record("an auto-priority update does not parse")
            return
        }
        #expect(job.liveActivity?.autoPriority == true)
        #expect(job.liveActivity?.hasAlert == false)
        #expect(job.notification.priority == .immediate)
        guard
            case .job(let alerted) = parse(
                #"{"event":"update","contentState":{},"alert":{"title":"Goal","body":"1-0"}}"#,
                extra: #","priority":"auto""#
            )
        else {
            Issue.record("an auto-priority update with an alert does not parse")
            return
        }
        #expect(alerted.liveActivity?.hasAlert == true)
        var parser = JobParser()
        parser.http2Apps = ["a"]
        let plain = #"{"id":"j","app":"a","token":"\#(Self.token)","alert":"hi","priority":"auto"}"#
        guard case .rejected(_, _, _, let refusal, _, _) = parser.parse(Array(plain.utf8), producedAt: Self.producedAt)
        else {
            Issue.record("an auto-priority alert job was taken")
            return
        }
        #expect(refusal.contains("is for Live Activity jobs"), "\(refusal)")
        #expect(
            reason(#"{"event":"update","contentState":{}}"#, extra: #","priority":"soon""#)?.contains("\"auto\"")
                == true
        )
    }
}
