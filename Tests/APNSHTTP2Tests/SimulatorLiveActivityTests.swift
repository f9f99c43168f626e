import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import Testing

/// The simulator refuses the Live Activity requests Apple refuses (§5.1, §7.3), to a device
/// and to a channel, from a raw HTTP/2 client.
@Suite(.timeLimit(.minutes(2)))
struct SimulatorLiveActivityTests {
    static let update = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"n":1}}}"#.utf8)

    static func deviceHeaders(priority: String) -> [(String, String)] {
        F.headers(pushType: "liveactivity").setting("apns-topic", F.topic + ".push-type.liveactivity")
            .setting("apns-priority", priority)
    }

    @Test("A Live Activity to a device with priority 1 is 400 BadPriority; 10 and 5 are accepted (§5.1)")
    func devicePriority() async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let refused = try await client.send(headers: Self.deviceHeaders(priority: "1"), body: Self.update)
        #expect(refused.status == 400)
        #expect(refused.reason == "BadPriority")
        for priority in ["10", "5"] {
            let accepted = try await client.send(headers: Self.deviceHeaders(priority: priority), body: Self.update)
            #expect(accepted.status == 200, "priority \(priority)")
        }
        #expect(simulator.accepted.map(\.priority) == [10, 5])
        await client.close()
        await simulator.stop()
    }

    @Test("A broadcast with priority 1 is 400 BadPriority; 10 and 5 are accepted (§7.3)")
    func broadcastPriority() async throws {
        let simulator = try await F.simulator()
        let client = try await F.certificateClient(simulator)
        let id = try #require(simulator.createChannel(bundleID: F.topic, storagePolicy: .noMessageStored))
        let refused = try await client.send(
            headers: SimulatorChannelTests.broadcastHeaders(id, priority: "1"),
            body: Self.update
        )
        #expect(refused.status == 400)
        #expect(refused.reason == "BadPriority")
        for priority in ["10", "5"] {
            let accepted = try await client.send(
                headers: SimulatorChannelTests.broadcastHeaders(id, priority: priority),
                body: Self.update
            )
            #expect(accepted.status == 200, "priority \(priority)")
        }
        #expect(simulator.broadcasts.map(\.priority) == [10, 5])
        await client.close()
        await simulator.stop()
    }
}
