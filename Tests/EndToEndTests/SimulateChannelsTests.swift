import Foundation
import PushLocalStack
import PushTestSupport
import Testing

/// `apn-worker simulate` serving the broadcast API (§7) to an independent HTTP/2 client
/// (`Tests/Peers/h2_peer.py channels-client`, Python h2).
@Suite(.timeLimit(.minutes(3)))
struct SimulateChannelsTests {
    static var python: String {
        if let path = ProcessInfo.processInfo.environment["APN_WORKER_H2_PEER_PYTHON"], !path.isEmpty { return path }
        return Paths.root + "/.build/h2-peer-venv/bin/python"
    }

    @Test("--max-channels limits the channels; the stopped statistics count channel operations and broadcasts")
    func channelsThroughTheCommand() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.python) else {
            Issue.record("no Python with h2 at \(Self.python); run scripts/lib/install-h2-peer.sh .build/h2-peer-venv")
            return
        }
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let simulator = try ChildProcess(
            Paths.executable,
            [
                "simulate", "--generate-certs", dir + "/c", "--http2-port", "0", "--max-channels", "1",
                "--record", dir + "/record.jsonl",
            ]
        )
        let ready = try #require(await simulator.readLine().flatMap(jsonObject))
        let port = try #require(ready["http2Port"] as? Int)
        let client = try ChildProcess(
            Self.python,
            [
                Paths.root + "/Tests/Peers/h2_peer.py", "channels-client", "--port", String(port),
                "--ca", dir + "/c/ca.pem", "--cert", dir + "/c/client.pem", "--key", dir + "/c/client-key.pem",
                "--bundle", "com.example.app",
            ],
            stderrFile: dir + "/client.log"
        )
        let finished = await client.finish()
        #expect(finished.status == 0)
        let steps = finished.stdout.split(separator: "\n").compactMap { jsonObject(String($0)) }
        let statuses = steps.map { ($0["step"] as? String ?? "", $0["status"] as? Int ?? 0) }
        // With one channel allowed the second create is refused, and the broadcast to it too.
        #expect(statuses.map(\.1) == [201, 400, 200, 200, 200, 400, 204, 400, 200], "\(statuses)")
        #expect((steps[1]["body"] as? String).flatMap(jsonObject)?["reason"] as? String == "CannotCreateChannelConfig")

        simulator.signal(SIGTERM)
        let stopped = await simulator.finish()
        #expect(stopped.status == 0)
        let stats = try #require(jsonObject(stopped.stdout.split(separator: "\n").last.map(String.init) ?? ""))
        let http2 = try #require(stats["http2"] as? [String: Any])
        // create, list, read, delete, list; one broadcast; no channel left.
        #expect(http2["channelOperations"] as? Int == 5)
        #expect(http2["broadcasts"] as? Int == 1)
        #expect(http2["channels"] as? Int == 0)
        #expect(
            http2["rejectionsByReason"] as? [String: Int] == [
                "CannotCreateChannelConfig": 1, "MissingChannelId": 1, "ChannelNotRegistered": 1,
            ]
        )
        let recorded = try String(contentsOfFile: dir + "/record.jsonl", encoding: .utf8).split(separator: "\n")
        #expect(
            recorded.compactMap { jsonObject(String($0))?["api"] as? String } == [
                "channels", "channels", "channels", "broadcast", "channels", "channels",
            ]
        )
    }
}
