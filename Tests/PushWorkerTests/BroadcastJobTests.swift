import APNSCore
import Foundation
import Testing

@testable import PushWorker

/// Broadcast jobs (`docs/jobs.md`, "Broadcasts"): `channel` or `channels` in place of tokens,
/// each a base64 channel ID (§7.2); a Live Activity update or end (§7.3); expiration 0 unless
/// the job gives one; a result that names the channel.
@Suite struct BroadcastJobTests {
    static let update = #""liveActivity":{"event":"update","contentState":{"score":"1-0"}}"#
    static let channelA = "c29tZUNoYW5uZWw="
    static let channelB = Data((0..<16).map { UInt8($0) }).base64EncodedString()

    func parse(_ fields: String, defaultExpiry: APNSExpiry? = nil) -> JobParseResult {
        var parser = JobParser()
        parser.http2Apps = ["a"]
        if let defaultExpiry { parser.defaultExpiry = ["a": defaultExpiry] }
        return parser.parse(Array(#"{"id":"j","app":"a",\#(fields)}"#.utf8), producedAt: 1_795_651_200_000)
    }

    func reason(_ fields: String) -> String? {
        switch parse(fields) {
        case .job: nil
        case .rejected(_, _, _, let reason, _, _), .unreadable(_, _, let reason, _): reason
        }
    }

    @Test func channelsAreParsedInOrderOnceEachAsBroadcastTargets() throws {
        let result = parse(#""channels":["\#(Self.channelA)","\#(Self.channelB)","\#(Self.channelA)"],\#(Self.update)"#)
        guard case .job(let job) = result else {
            Issue.record("not a job: \(result)")
            return
        }
        #expect(job.broadcast)
        #expect(job.tokens.map(\.text) == [Self.channelA, Self.channelB])
        guard case .valid(let bytes, _) = job.tokens[0] else {
            Issue.record("the channel is not valid: \(job.tokens[0])")
            return
        }
        #expect(bytes.bytes == Array("someChannel".utf8))
        #expect(job.notification.pushType == "liveactivity")
        guard case .job(let single) = parse(#""channel":"\#(Self.channelB)",\#(Self.update)"#) else {
            Issue.record("a job with one channel does not parse")
            return
        }
        #expect(single.broadcast && single.tokens.map(\.text) == [Self.channelB])
    }

    @Test func aChannelThatIsNotBase64IsMalformedWithASentence() throws {
        guard
            case .job(let job) = parse(
                #""channels":["\#(Self.channelA)","not base64!","c29tZUNoYW5uZWw"],\#(Self.update)"#
            )
        else {
            Issue.record("not a job")
            return
        }
        #expect(job.tokens.count == 3)
        for entry in job.tokens.dropFirst() {
            guard case .malformed(_, let reason) = entry else {
                Issue.record("\(entry.text) was taken as a channel")
                continue
            }
            #expect(reason.contains("is not base64; channel IDs are base64"), "\(reason)")
        }
    }

    @Test func aChannelIDIsNotHeldToADeviceTokensLength() throws {
        // Apple: "don't make assumptions on the channel ID size". 150 bytes pass where a device
        // token stops at 100; past 1,024 characters it is not taken for a channel.
        let long = Data((0..<150).map { UInt8($0) }).base64EncodedString()
        let tooLong = Data(repeating: 1, count: 769).base64EncodedString()
        #expect(long.utf8.count == 200 && tooLong.utf8.count == 1028)
        guard case .job(let job) = parse(#""channels":["\#(long)","\#(tooLong)"],\#(Self.update)"#) else {
            Issue.record("not a job")
            return
        }
        guard case .valid(let bytes, let text) = job.tokens[0] else {
            Issue.record("a 150-byte channel ID was refused: \(job.tokens[0])")
            return
        }
        #expect(bytes.bytes == (0..<150).map { UInt8($0) } && text == long)
        guard case .malformed(_, let reason) = job.tokens[1] else {
            Issue.record("a 1,028-character channel ID was taken")
            return
        }
        #expect(reason.contains("has 1028 characters") && reason.contains("at most 1024"), "\(reason)")
    }

    @Test func theRecipientFieldsExcludeEachOtherAndChannelsAreLimited() {
        let token = String(repeating: "ab", count: 32)
        #expect(
            reason(#""token":"\#(token)","channel":"\#(Self.channelA)",\#(Self.update)"#)
                == #"the job has both "token" and "channel"; give one of them"#
        )
        #expect(
            reason(#""channel":"\#(Self.channelA)","channels":["\#(Self.channelB)"],\#(Self.update)"#)
                == #"the job has both "channel" and "channels"; give one of them"#
        )
        #expect(
            reason(#""channels":[],\#(Self.update)"#) == #""channels" must be a non-empty array of base64 channel IDs"#
        )
        #expect(reason(#""channel":7,\#(Self.update)"#) == #""channel" must be a base64 channel ID"#)
        let many = (0...JobParser.maxChannels).map {
            "\"\(Data([UInt8($0 % 256), UInt8($0 / 256)]).base64EncodedString())\""
        }
        #expect(
            reason(#""channels":[\#(many.joined(separator: ","))],\#(Self.update)"#)
                == #""channels" has 1001 entries, over the limit of 1000 per job; split the job"#
        )
    }

    @Test func aBroadcastMustUpdateOrEndALiveActivity() {
        #expect(
            reason(#""channel":"\#(Self.channelA)","alert":"hi""#)?.hasPrefix(
                "a broadcast to a channel updates a Live Activity"
            ) == true
        )
        let start =
            #""liveActivity":{"event":"start","attributesType":"T","attributes":{},"contentState":{},"alert":{"title":"t","body":"b"}}"#
        #expect(reason(#""channel":"\#(Self.channelA)",\#(start)"#)?.hasPrefix("a broadcast cannot start") == true)
        #expect(reason(#""channel":"\#(Self.channelA)",\#(Self.update)"#) == nil)
        #expect(
            reason(#""channel":"\#(Self.channelA)","liveActivity":{"event":"end","contentState":{}}"#) == nil
        )
    }

    @Test func aBroadcastCarriesNoCollapseID() {
        // §7.3: Apple's broadcast requests have no apns-collapse-id header.
        #expect(
            reason(#""channel":"\#(Self.channelA)",\#(Self.update),"collapseId":"score""#)?.hasPrefix(
                "a broadcast has no collapse ID"
            ) == true
        )
        let token = String(repeating: "ab", count: 32)
        #expect(reason(#""token":"\#(token)",\#(Self.update),"collapseId":"score""#) == nil)
    }

    @Test func aBroadcastPayloadMayHave5120BytesWhereATokensHas4096() throws {
        // §7.3: 5 KB for a broadcast; §1.3: 4 KB for a Live Activity to a device.
        let state = String(repeating: "x", count: 4_050)
        let update = #""liveActivity":{"event":"update","contentState":{"s":"\#(state)"}}"#
        guard case .job(let job) = parse(#""channel":"\#(Self.channelA)",\#(update)"#) else {
            Issue.record(
                "a broadcast of about 4.1 KB was refused: \(String(describing: reason(#""channel":"\#(Self.channelA)",\#(update)"#)))"
            )
            return
        }
        #expect(job.payloadError == nil)
        let size = job.payload.count
        #expect(size > 4096 && size <= 5120, "\(size) bytes")
        let token = String(repeating: "ab", count: 32)
        guard case .job(let toToken) = parse(#""token":"\#(token)",\#(update)"#) else {
            Issue.record("the same update to a token was refused as a job")
            return
        }
        // Each of its tokens gets the payload's error as its result.
        #expect(toToken.payloadError?.contains("4096") == true, "\(toToken.payloadError ?? "no error")")
    }

    @Test func aBroadcastIsNotStoredUnlessItsJobSaysSo() {
        guard
            case .job(let job) = parse(
                #""channel":"\#(Self.channelA)",\#(Self.update)"#,
                defaultExpiry: .after(.seconds(3600))
            )
        else {
            Issue.record("not a job")
            return
        }
        #expect(job.notification.expiry == .immediately)
        guard
            case .job(let kept) = parse(
                #""channel":"\#(Self.channelA)",\#(Self.update),"expiry":"1h""#,
                defaultExpiry: .after(.seconds(60))
            )
        else {
            Issue.record("not a job")
            return
        }
        #expect(kept.notification.expiry == .after(.seconds(3600)))
    }

    @Test func aBroadcastResultNamesItsChannelAndIsKeyedByIt() throws {
        var result = WorkerResult(
            kind: .transmitted,
            resultId: WorkerResult.notificationId(jobId: "j", token: Self.channelA),
            jobId: "j",
            app: "a",
            environment: "production",
            token: Self.channelA,
            worker: "w",
            at: 1
        )
        result.addressToChannel()
        let parsed = try JSONValue.parse(result.serialized())
        #expect(parsed["channel"]?.stringValue == Self.channelA)
        #expect(parsed["token"] == nil)
        #expect(result.key == Array(Self.channelA.utf8))
    }

    @Test func channelJobsCreateWithAPolicyOrDeleteANamedChannel() {
        guard case .job(let create) = parse(#""channelAction":"create""#) else {
            Issue.record("a create does not parse")
            return
        }
        #expect(create.channelAction == .create(.none))
        #expect(create.tokens.map(\.text) == [""])
        guard case .job(let stored) = parse(#""channelAction":"create","storagePolicy":"most-recent","env":"sandbox""#)
        else {
            Issue.record("a create with a policy does not parse")
            return
        }
        #expect(stored.channelAction == .create(.mostRecent) && stored.environment == "sandbox")
        guard case .job(let delete) = parse(#""channelAction":"delete","channel":"\#(Self.channelA)""#) else {
            Issue.record("a delete does not parse")
            return
        }
        #expect(delete.channelAction == .delete && delete.tokens.map(\.text) == [Self.channelA])
    }

    @Test func aChannelJobThatCannotBeCarriedOutIsUnreadableWithItsReason() {
        func unreadable(_ fields: String) -> String? {
            guard case .unreadable(let id, _, let reason, _) = parse(fields) else { return nil }
            #expect(id == "j")
            return reason
        }
        #expect(unreadable(#""channelAction":"rename""#) == #""channelAction" must be "create" or "delete""#)
        #expect(unreadable(#""channelAction":"delete""#)?.hasPrefix("a delete needs \"channel\"") == true)
        #expect(unreadable(#""channelAction":"delete","channel":"%%%""#)?.contains("is not base64") == true)
        #expect(
            unreadable(#""channelAction":"create","channel":"\#(Self.channelA)""#)?.hasPrefix("a create names no")
                == true
        )
        #expect(unreadable(#""channelAction":"create","tokens":["ab"]"#)?.contains(#"not "tokens""#) == true)
        #expect(
            unreadable(#""channelAction":"create","storagePolicy":1"#)?.hasPrefix(#""storagePolicy" must be"#) == true
        )
    }
}
