import APNSCore
import APNSSimulator
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// Broadcast jobs through `apn-worker run` (`docs/jobs.md`, "Broadcasts"): in through Kafka,
/// sent to the HTTP/2 simulator's broadcast endpoint (§7.3), one result per (job, channel) out
/// of Kafka, sent once however often the job is produced.
@Suite("Broadcasts end to end", .serialized, .timeLimit(.minutes(3)))
struct BroadcastEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    static func job(_ id: String, channels: [String], _ fields: String) -> [UInt8] {
        let list = channels.map { "\"\($0)\"" }.joined(separator: ",")
        return Array(#"{"id":"\#(id)","app":"\#(WorkerStack.http2App)","channels":[\#(list)],\#(fields)}"#.utf8)
    }

    @Test(
        "A broadcast to 100 channels produced twice: 100 results naming their channels, 100 broadcasts at the simulator"
    )
    func aBroadcastProducedTwiceIsSentOncePerChannel() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        await Jobs.withStack(stack) { stack in
            let simulator = try #require(stack.http2Simulator)
            let channels = (0..<100).compactMap { _ in
                simulator.createChannel(bundleID: WorkerStack.http2App, storagePolicy: .noMessageStored)
            }
            #expect(channels.count == 100)
            let update = #""liveActivity":{"event":"update","contentState":{"score":"2-1"}},"priority":5"#
            let job = Self.job("bc", channels: channels, update)
            // A channel nobody created, one that is not base64, and a broadcast that would start
            // an activity.
            let unknown = Data(repeating: 7, count: 16).base64EncodedString()
            let start =
                #""liveActivity":{"event":"start","attributesType":"T","attributes":{},"contentState":{},"alert":{"title":"t","body":"b"}}"#
            // A broadcast over the 4,096 bytes of a device request and within the 5,120 of a
            // broadcast (§7.3), and one with a collapse ID, which broadcasts do not carry.
            let state = String(repeating: "x", count: 4_050)
            let large = #""liveActivity":{"event":"update","contentState":{"s":"\#(state)"}},"priority":5"#
            try await stack.produce([
                job, job,
                Self.job("bc-unknown", channels: [unknown], update),
                Self.job("bc-malformed", channels: ["not base64"], update),
                Self.job("bc-start", channels: [channels[0]], start),
                Self.job("bc-large", channels: [channels[1]], large),
                Self.job("bc-collapse", channels: [channels[2]], update + #","collapseId":"score""#),
            ])
            let ids =
                channels.map { Jobs.id("bc", $0) } + [
                    Jobs.id("bc-unknown", unknown), Jobs.id("bc-malformed", "not base64"),
                    Jobs.id("bc-start", channels[0]), Jobs.id("bc-large", channels[1]),
                    Jobs.id("bc-collapse", channels[2]),
                ]
            let byId = try await Jobs.results(stack, ids)
            #expect(try await stack.waitForAllCommitted())

            for channel in channels {
                let result = byId[Jobs.id("bc", channel)]
                #expect(result?["type"] == "transmitted", "\(result ?? [:])")
                #expect(result?["channel"]?.stringValue == channel)
                #expect(result?["token"] == nil)
            }
            let written = stack.results.filter { $0["jobId"] == "bc" }.compactMap { $0["resultId"]?.stringValue }
            #expect(Set(written).count == 100 && written.count == 100, "\(written.count) results for 100 channels")

            let unknownResult = byId[Jobs.id("bc-unknown", unknown)]
            #expect(unknownResult?["status"] == .int(400) && unknownResult?["reason"] == "ChannelNotRegistered")
            #expect(unknownResult?["channel"]?.stringValue == unknown)
            let malformed = byId[Jobs.id("bc-malformed", "not base64")]
            #expect(malformed?["status"] == .int(518) && malformed?["channel"] == "not base64")
            let refused = byId[Jobs.id("bc-start", channels[0])]
            #expect(refused?["status"] == .int(517))
            #expect(refused?["reason"]?.stringValue?.hasPrefix("a broadcast cannot start") == true)
            #expect(byId[Jobs.id("bc-large", channels[1])]?["type"] == "transmitted")
            let collapsed = byId[Jobs.id("bc-collapse", channels[2])]
            #expect(collapsed?["status"] == .int(517))
            #expect(collapsed?["reason"]?.stringValue?.hasPrefix("a broadcast has no collapse ID") == true)

            // Once per channel, as Apple documents it: push type, priority, expiration 0.
            let largeBroadcasts = simulator.broadcasts.filter { $0.payloadLength > 4096 }
            #expect(largeBroadcasts.map(\.channelID) == [channels[1]])
            #expect(largeBroadcasts.allSatisfy { $0.payloadLength <= 5120 })
            let broadcasts = simulator.broadcasts.filter { $0.payloadLength <= 4096 }
            #expect(broadcasts.count == 100, "\(broadcasts.count) broadcasts")
            #expect(Set(broadcasts.map(\.channelID)) == Set(channels))
            #expect(broadcasts.allSatisfy { $0.pushType == "liveactivity" && $0.priority == 5 && $0.expiration == 0 })
            #expect(broadcasts.allSatisfy { $0.bundleID == WorkerStack.http2App })
            #expect(simulator.accepted.isEmpty, "a broadcast went to a device endpoint")

            // The channel Apple does not know is remembered: the next broadcast to it is answered
            // 519 at once, with the verdict, and never reaches Apple.
            #expect(unknownResult?["tokenVerdict"]?["reason"] == "ChannelNotRegistered", "\(unknownResult ?? [:])")
            let requestsBefore = simulator.statistics.requests
            try await stack.produce([Self.job("bc-unknown-again", channels: [unknown], update)])
            let again = try await Jobs.results(stack, [Jobs.id("bc-unknown-again", unknown)])[
                Jobs.id("bc-unknown-again", unknown)
            ]
            #expect(again?["status"] == .int(519), "\(again ?? [:])")
            #expect(again?["tokenVerdict"]?["reason"] == "ChannelNotRegistered")
            #expect(again?["channel"]?.stringValue == unknown)
            #expect(simulator.statistics.requests == requestsBefore)
        }
    }
    @Test(
        "broadcastGateway: broadcasts go to that gateway, device notifications to the app's; its pool is its own, and its gateway gone fails only the broadcasts"
    )
    func broadcastsGoToTheirOwnGateway() async throws {
        let stack = try await WorkerStack.start(
            http2: (badTokens: [], unregistered: [:]),
            http2AppSettings: ["connectRetryLimit: 2"],
            http2BroadcastGateway: true
        )
        await Jobs.withStack(stack) { stack in
            let gateway = try #require(stack.http2Simulator)
            let broadcastGateway = try #require(stack.broadcastHTTP2Simulator)
            let channels = (0..<3).compactMap { _ in
                broadcastGateway.createChannel(bundleID: WorkerStack.http2App, storagePolicy: .noMessageStored)
            }
            let update = #""liveActivity":{"event":"update","contentState":{"score":"1-0"}},"priority":5"#
            let devices = [DeviceToken.numbered(61), DeviceToken.numbered(62)]
            try await stack.produce([
                Self.job("bg-broadcast", channels: channels, update),
                Jobs.job("bg-device", devices, app: WorkerStack.http2App, #""alert":"hi""#),
            ])
            let ids = channels.map { Jobs.id("bg-broadcast", $0) } + devices.map { Jobs.id("bg-device", $0) }
            let byId = try await Jobs.results(stack, ids)
            for id in ids { #expect(byId[id]?["type"] == "transmitted", "\(id): \(byId[id] ?? [:])") }
            #expect(Set(broadcastGateway.broadcasts.map(\.channelID)) == Set(channels))
            #expect(broadcastGateway.accepted.isEmpty, "a device notification went to the broadcast gateway")
            #expect(gateway.broadcasts.isEmpty, "a broadcast went to the app's gateway")
            #expect(Set(gateway.accepted.map(\.token)) == Set(devices))

            // The broadcast gateway gone: device notifications still go; the broadcast fails
            // with its pool's connects (`connectRetryLimit`), the app's pool untouched.
            await broadcastGateway.stop()
            let more = [DeviceToken.numbered(63), DeviceToken.numbered(64)]
            try await stack.produce([
                Self.job("bg-broadcast-2", channels: [channels[0]], update),
                Jobs.job("bg-device-2", more, app: WorkerStack.http2App, #""alert":"hi""#),
            ])
            let moreIds = more.map { Jobs.id("bg-device-2", $0) }
            let failedId = Jobs.id("bg-broadcast-2", channels[0])
            let delivered = try await Jobs.results(stack, moreIds + [failedId])
            for id in moreIds { #expect(delivered[id]?["type"] == "transmitted", "\(id): \(delivered[id] ?? [:])") }
            #expect(delivered[failedId]?["status"] == .int(515), "\(delivered[failedId] ?? [:])")
            #expect(Set(gateway.accepted.map(\.token)) == Set(devices + more))
        }
    }

    @Test("Channel jobs: create (produced twice, one channel) → broadcast → delete, each refusal with its reason")
    func channelJobsCreateBroadcastAndDelete() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        await Jobs.withStack(stack) { stack in
            let simulator = try #require(stack.http2Simulator)
            let h2 = WorkerStack.http2App
            func channelJob(_ id: String, _ fields: String, app: String = h2) -> [UInt8] {
                Array(#"{"id":"\#(id)","app":"\#(app)",\#(fields)}"#.utf8)
            }
            let create = channelJob(
                "ch-create",
                #""channelAction":"create","storagePolicy":"most-recent","metadata":{"m":1}"#
            )
            try await stack.produce([create, create])
            let createId = WorkerResult.channelJobId(jobId: "ch-create")
            let created = try #require(try await Jobs.results(stack, [createId])[createId])
            #expect(created["type"] == "channel" && created["action"] == "create", "\(created)")
            #expect(created["storagePolicy"] == "most-recent" && created["metadata"] == ["m": 1])
            let channel = try #require(created["channel"]?.stringValue)
            #expect(simulator.channels(bundleID: h2).map(\.id) == [channel])
            #expect(simulator.channels(bundleID: h2).first?.storagePolicy == .mostRecentMessageStored)

            let update = #""liveActivity":{"event":"update","contentState":{"score":"3-1"}},"expiry":"1h""#
            try await stack.produce([Self.job("ch-broadcast", channels: [channel], update)])
            let sent = try await Jobs.results(stack, [Jobs.id("ch-broadcast", channel)])
            #expect(sent[Jobs.id("ch-broadcast", channel)]?["type"] == "transmitted")
            #expect(simulator.broadcasts.map(\.channelID) == [channel])
            let now = Int(Date().timeIntervalSince1970)
            let asked = simulator.broadcasts.first?.expiration ?? 0
            #expect(abs(asked - (now + 3600)) < 120, "the job's expiry was not sent: \(asked)")

            // The registry knows the channel stores the most recent update: a broadcast without
            // `expiry` is kept 8 hours; one to a channel created to store nothing is sent with
            // 0 whatever its job says (Apple would refuse it with BadExpirationDate).
            let unstored = channelJob("ch-create-none", #""channelAction":"create","storagePolicy":"none""#)
            try await stack.produce([unstored])
            let unstoredId = WorkerResult.channelJobId(jobId: "ch-create-none")
            let noStorage = try #require(
                try await Jobs.results(stack, [unstoredId])[unstoredId]?["channel"]?.stringValue
            )
            let plain = #""liveActivity":{"event":"update","contentState":{"score":"3-2"}}"#
            try await stack.produce([
                Self.job("ch-broadcast-plain", channels: [channel], plain),
                Self.job("ch-broadcast-none", channels: [noStorage], update),
            ])
            let stored = try await Jobs.results(
                stack,
                [Jobs.id("ch-broadcast-plain", channel), Jobs.id("ch-broadcast-none", noStorage)]
            )
            #expect(stored[Jobs.id("ch-broadcast-plain", channel)]?["type"] == "transmitted")
            #expect(stored[Jobs.id("ch-broadcast-none", noStorage)]?["type"] == "transmitted", "\(stored)")
            let kept = simulator.broadcasts.last { $0.channelID == channel }?.expiration ?? 0
            #expect(abs(kept - (now + 8 * 3600)) < 120, "a stored broadcast without expiry: \(kept)")
            #expect(simulator.broadcasts.last { $0.channelID == noStorage }?.expiration == 0)
            try await stack.produce([
                channelJob("ch-delete-none", #""channelAction":"delete","channel":"\#(noStorage)""#)
            ])

            let missing = Data(repeating: 9, count: 16).base64EncodedString()
            try await stack.produce([
                channelJob("ch-delete", #""channelAction":"delete","channel":"\#(channel)""#),
                channelJob("ch-delete-missing", #""channelAction":"delete","channel":"\#(missing)""#),
                channelJob("ch-bad-policy", #""channelAction":"create","storagePolicy":"forever""#),
                channelJob("ch-with-alert", #""channelAction":"create","alert":"x""#),
                channelJob("ch-binary", #""channelAction":"create""#, app: WorkerStack.app),
            ])
            let deleteIds = ["ch-delete", "ch-delete-missing", "ch-delete-none"].map {
                WorkerResult.channelJobId(jobId: $0)
            }
            let deletes = try await Jobs.results(stack, deleteIds)
            #expect(deletes[deleteIds[0]]?["type"] == "channel" && deletes[deleteIds[0]]?["action"] == "delete")
            #expect(deletes[deleteIds[0]]?["channel"]?.stringValue == channel)
            let refused = deletes[deleteIds[1]]
            #expect(refused?["type"] == "transmissionError" && refused?["status"] == .int(400))
            #expect(refused?["reason"] == "ChannelNotRegistered" && refused?["channel"]?.stringValue == missing)
            #expect(simulator.channels(bundleID: h2).isEmpty)

            let invalid = try await stack.readResults { results in
                ["ch-bad-policy", "ch-with-alert", "ch-binary"].allSatisfy { id in
                    results.contains { $0["jobId"]?.stringValue == id }
                }
            }
            func reason(_ id: String) -> String {
                let result = invalid.first { $0["jobId"]?.stringValue == id }
                #expect(result?["type"] == "invalidJob", "\(id): \(result ?? [:])")
                return result?["reason"]?.stringValue ?? ""
            }
            #expect(reason("ch-bad-policy").hasPrefix("\"storagePolicy\" must be \"none\""))
            #expect(reason("ch-with-alert").contains("not \"alert\""))
            #expect(reason("ch-binary").contains("binary protocol"))

            // Apple's limit of 10,000 channels per app and environment: the refused create says so.
            while simulator.createChannel(bundleID: h2, storagePolicy: .noMessageStored) != nil {}
            #expect(simulator.channels(bundleID: h2).count == 10_000)
            try await stack.produce([channelJob("ch-full", #""channelAction":"create""#)])
            let fullId = WorkerResult.channelJobId(jobId: "ch-full")
            let full = try await Jobs.results(stack, [fullId])[fullId]
            #expect(full?["type"] == "transmissionError" && full?["status"] == .int(400), "\(full ?? [:])")
            #expect(full?["reason"]?.stringValue?.contains("limit of 10,000 channels") == true, "\(full ?? [:])")

            #expect(try await stack.waitForAllCommitted())
            // The create produced twice was carried out once, and had one result (the other
            // create and delete are the no-storage channel's; the refused delete is not recorded).
            let operations = simulator.channelOperations.map(\.kind)
            #expect(operations.filter { $0 == .create }.count == 2, "\(operations)")
            #expect(operations.filter { $0 == .delete }.count == 2, "\(operations)")
            #expect(operations.count == 4, "\(operations)")
            #expect(stack.results.filter { $0["resultId"]?.stringValue == createId }.count == 1)
        }
    }

}

extension JobFeaturesEndToEndTests {
    /// A broadcast notification's `resultId`: the channel ID in place of the token.
    static func id(_ job: String, _ channel: String) -> String {
        WorkerResult.notificationId(jobId: job, token: channel)
    }
}
