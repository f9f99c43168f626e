import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import PushLocalStack
import PushTestSupport
import Testing

@testable import APNSHTTP2

/// The client against an HTTP/2 server the project did not write: `Tests/Peers/h2_peer.py`,
/// built on the PyPI `h2` library (framing, HPACK, flow control) and `cryptography` (ES256).
/// It checks every request against Apple's rules (§3.3, §4) and records what it received.
@Suite("HTTP/2 client against an independent peer (Python h2)", .timeLimit(.minutes(3)))
struct PeerTests {
    /// The Python with `h2` and `cryptography`: `scripts/test` installs it and exports
    /// `APN_WORKER_H2_PEER_PYTHON`; otherwise the venv it creates.
    static var python: String {
        if let path = ProcessInfo.processInfo.environment["APN_WORKER_H2_PEER_PYTHON"], !path.isEmpty { return path }
        return Paths.root + "/.build/h2-peer-venv/bin/python"
    }

    struct Peer {
        var process: ChildProcess
        var port: Int
        var record: String
        var directory: String

        /// Stops the peer (it flushes its record on SIGTERM) and returns the recorded requests.
        func stop() async throws -> [[String: Any]] {
            defer { try? FileManager.default.removeItem(atPath: directory) }
            process.signal(SIGTERM)
            let finished = await process.finish()
            #expect(finished.status == 0, "the peer exited with \(finished.status): \(finished.stderr)")
            let text = try String(contentsOfFile: record, encoding: .utf8)
            return text.split(separator: "\n").compactMap { jsonObject(String($0)) }
        }
    }

    static func startPeer(maxStreams: Int = 100, extraArguments: [String] = []) async throws -> Peer {
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw ServerError(
                "no Python with h2 at \(python); run scripts/test, or scripts/lib/install-h2-peer.sh .build/h2-peer-venv"
            )
        }
        let dir = try Paths.temporaryDirectory()
        let certs = ClientHarness.certificates
        try certs.server.certificatePEM.write(toFile: dir + "/server.pem", atomically: false, encoding: .utf8)
        try certs.server.keyPEM.write(toFile: dir + "/server.key", atomically: false, encoding: .utf8)
        try certs.ca.certificatePEM.write(toFile: dir + "/ca.pem", atomically: false, encoding: .utf8)
        try ClientHarness.privateKey.publicKey.pemRepresentation.write(
            toFile: dir + "/jwt.pem",
            atomically: false,
            encoding: .utf8
        )
        let record = dir + "/requests.jsonl"
        let process = try ChildProcess(
            python,
            [
                Paths.root + "/Tests/Peers/h2_peer.py",
                "--cert", dir + "/server.pem", "--key", dir + "/server.key", "--port", "0", "--record", record,
                "--jwt-key", "\(ClientHarness.keyID)=\(dir)/jwt.pem", "--team", ClientHarness.teamID,
                "--client-ca", dir + "/ca.pem", "--max-streams", String(maxStreams),
            ] + extraArguments,
            stderrFile: dir + "/peer.log"
        )
        guard let line = await process.readLine(), let ready = jsonObject(line), let port = ready["port"] as? Int else {
            throw ServerError("the Python peer did not start; see \(dir)/peer.log")
        }
        return Peer(process: process, port: port, record: record, directory: dir)
    }

    @Test("token-authenticated requests of several push types are accepted, with the headers and bodies we meant")
    func tokenAuthentication() async throws {
        let peer = try await Self.startPeer(maxStreams: 50)
        let client = try ClientHarness.tokenClient(port: peer.port) { $0.maxConnections = 2 }
        var submissions = ClientHarness.submissions(0..<1_000)
        var background = APNSNotification()
        background.contentAvailable = true
        background.priority = .powerConsiderate
        background.custom["k"] = .string("v")
        submissions.append(APNSSubmission(tag: 5_000, token: ClientHarness.token(5_000), notification: background))
        var voip = ClientHarness.notification("call")
        voip.pushType = "voip"
        voip.collapseId = "call-1"
        voip.expiry = .at(unixSeconds: 2_000_000_000)
        submissions.append(APNSSubmission(tag: 5_001, token: ClientHarness.token(5_001), notification: voip))

        let run = try await ClientHarness.run(client, submissions)
        let records = try await peer.stop()

        #expect(run.outcomes.count == submissions.count)
        #expect(
            run.outcomes.values.allSatisfy { $0.isTransmitted },
            "\(run.outcomes.values.filter { !$0.isTransmitted }.prefix(3))"
        )
        #expect(run.duplicateOutcomes == 0)
        #expect(records.count == submissions.count)
        #expect(
            records.allSatisfy { ($0["status"] as? Int) == 200 },
            "\(records.first { ($0["status"] as? Int) != 200 } ?? [:])"
        )
        #expect(records.allSatisfy { ($0["auth"] as? String) == "token" })
        // One provider token for every request of both connections (§4: never per request).
        let jwts = Set(records.compactMap { ($0["headers"] as? [String: Any])?["authorization"] as? String })
        #expect(jwts.count == 1)
        #expect(Set(records.compactMap { $0["connection"] as? Int }).count == 2)

        let byPath = Dictionary(records.map { (($0["path"] as? String) ?? "", $0) }, uniquingKeysWith: { a, _ in a })
        let first = try #require(byPath["/3/device/" + ClientHarness.token(0).hex])
        let headers = try #require(first["headers"] as? [String: Any])
        #expect(headers["apns-topic"] as? String == "com.example.app")
        #expect(headers["apns-push-type"] as? String == "alert")
        #expect(headers["apns-priority"] as? String == "10")
        #expect(headers["apns-id"] as? String == run.outcomes[0]?.apnsID)
        #expect(first["body"] as? String == #"{"aps":{"alert":"Hello","badge":1}}"#)
        #expect((first["jwt"] as? [String: Any])?["kid"] as? String == ClientHarness.keyID)

        let bg = try #require(byPath["/3/device/" + ClientHarness.token(5_000).hex])
        let bgHeaders = try #require(bg["headers"] as? [String: Any])
        #expect(bgHeaders["apns-push-type"] as? String == "background")
        #expect(bgHeaders["apns-priority"] as? String == "5")
        #expect(bg["body"] as? String == #"{"aps":{"content-available":1},"k":"v"}"#)

        let call = try #require(byPath["/3/device/" + ClientHarness.token(5_001).hex])
        let callHeaders = try #require(call["headers"] as? [String: Any])
        #expect(callHeaders["apns-push-type"] as? String == "voip")
        #expect(callHeaders["apns-topic"] as? String == "com.example.app.voip")
        #expect(callHeaders["apns-collapse-id"] as? String == "call-1")
        #expect(callHeaders["apns-expiration"] as? String == "2000000000")
    }

    @Test(
        "a 16-byte stream window and no HPACK dynamic table: bodies go in parts as WINDOW_UPDATEs arrive, every request intact"
    )
    func smallWindowsAndNoDynamicTable() async throws {
        let peer = try await Self.startPeer(
            maxStreams: 20,
            extraArguments: ["--initial-window", "16", "--header-table-size", "0"]
        )
        let client = try ClientHarness.tokenClient(port: peer.port) { $0.maxConnections = 1 }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<200))
        let records = try await peer.stop()
        #expect(run.outcomes.count == 200)
        #expect(
            run.outcomes.values.allSatisfy { $0.isTransmitted },
            "\(run.outcomes.values.filter { !$0.isTransmitted }.prefix(3))"
        )
        #expect(records.count == 200)
        #expect(
            records.allSatisfy {
                ($0["status"] as? Int) == 200 && ($0["body"] as? String) == #"{"aps":{"alert":"Hello","badge":1}}"#
            },
            "\(records.first { ($0["status"] as? Int) != 200 } ?? [:])"
        )
    }

    @Test("certificate-authenticated requests are accepted and carry no authorization header")
    func certificateAuthentication() async throws {
        let peer = try await Self.startPeer()
        let client = try ClientHarness.certificateClient(port: peer.port) { $0.maxConnections = 1 }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<300))
        let records = try await peer.stop()
        #expect(run.outcomes.count == 300)
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(records.count == 300)
        #expect(records.allSatisfy { ($0["status"] as? Int) == 200 && ($0["auth"] as? String) == "certificate" })
        #expect(records.allSatisfy { ($0["headers"] as? [String: Any])?["authorization"] == nil })
    }

    @Test(
        "An independent HTTP/2 client (Python h2) creates, lists, reads and deletes channels and broadcasts on the simulator (§7)",
        arguments: ["certificate", "token"]
    )
    func channelsClientAgainstTheSimulator(authentication: String) async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.python) else {
            throw ServerError(
                "no Python with h2 at \(Self.python); run scripts/lib/install-h2-peer.sh .build/h2-peer-venv"
            )
        }
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let certs = SimulatorFixture.certificates
        try certs.ca.certificatePEM.write(toFile: dir + "/ca.pem", atomically: false, encoding: .utf8)
        try certs.client.certificatePEM.write(toFile: dir + "/client.pem", atomically: false, encoding: .utf8)
        try certs.client.keyPEM.write(toFile: dir + "/client.key", atomically: false, encoding: .utf8)
        let simulator = try await SimulatorFixture.simulator { $0.environment = .sandbox }
        let bundle = SimulatorFixture.topic
        var arguments = [
            Paths.root + "/Tests/Peers/h2_peer.py", "channels-client", "--port", String(simulator.port),
            "--ca", dir + "/ca.pem", "--bundle", bundle,
        ]
        if authentication == "certificate" {
            arguments += ["--cert", dir + "/client.pem", "--key", dir + "/client.key"]
        } else {
            arguments += ["--authorization", SimulatorFixture.defaultAuthorization]
        }
        let client = try ChildProcess(Self.python, arguments, stderrFile: dir + "/client.log")
        let finished = await client.finish()
        await simulator.stop()
        let log = (try? String(contentsOfFile: dir + "/client.log", encoding: .utf8)) ?? ""
        #expect(finished.status == 0, "the Python client exited with \(finished.status): \(log)")
        let steps = Dictionary(
            finished.stdout.split(separator: "\n").compactMap { jsonObject(String($0)) }.map {
                (($0["step"] as? String) ?? "", $0)
            },
            uniquingKeysWith: { first, _ in first }
        )
        func status(_ step: String) -> Int? { steps[step]?["status"] as? Int }
        func header(_ step: String, _ name: String) -> String? {
            (steps[step]?["headers"] as? [String: Any])?[name] as? String
        }
        func body(_ step: String) -> [String: Any]? { (steps[step]?["body"] as? String).flatMap(jsonObject) }

        #expect(status("create-stored") == 201)
        let stored = try #require(header("create-stored", "apns-channel-id"))
        let unstored = try #require(header("create-unstored", "apns-channel-id"))
        #expect(Data(base64Encoded: stored) != nil)
        #expect(header("create-stored", "apns-request-id") == steps["create-stored"]?["requestID"] as? String)
        #expect(status("list") == 200)
        #expect(body("list")?["channels"] as? [String] == [stored, unstored])
        #expect(status("read") == 200)
        #expect(body("read")?["message-storage-policy"] as? Int == 1)
        #expect(body("read")?["push-type"] as? String == "LiveActivity")
        #expect(status("broadcast") == 200)
        #expect(header("broadcast", "apns-request-id") == steps["broadcast"]?["requestID"] as? String)
        #expect(header("broadcast", "apns-unique-id") != nil)
        #expect(status("broadcast-expiring") == 400)
        #expect(body("broadcast-expiring")?["reason"] as? String == "BadExpirationDate")
        #expect(status("delete") == 204)
        #expect(status("read-deleted") == 400)
        #expect(body("read-deleted")?["reason"] as? String == "ChannelNotRegistered")
        #expect(body("list-after-delete")?["channels"] as? [String] == [unstored])

        #expect(simulator.broadcasts.map(\.channelID) == [stored])
        #expect(simulator.broadcasts.first?.expiration == 1_900_000_000)
        #expect(
            simulator.channelOperations.map(\.kind) == [.create, .create, .list, .read, .delete, .list],
            "\(simulator.channelOperations.map(\.kind))"
        )
        let expected: APNSHTTP2Simulator.Authorization =
            authentication == "certificate"
            ? .certificate : .token(teamID: SimulatorFixture.teamID, keyID: SimulatorFixture.keyID)
        #expect(simulator.broadcasts.first?.authorization == expected)
    }
}
