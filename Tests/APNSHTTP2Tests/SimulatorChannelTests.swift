import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import Testing

/// Channel management and broadcasts on the HTTP/2 simulator (§7), from a raw HTTP/2 client.
@Suite(.timeLimit(.minutes(2)))
struct SimulatorChannelTests {
    static let bundle = F.topic
    static let channelsPath = "/1/apps/\(bundle)/channels"
    static let listPath = "/1/apps/\(bundle)/all-channels"
    static let broadcastPath = "/4/broadcasts/apps/\(bundle)"
    static let createStored = Array(#"{"message-storage-policy":1,"push-type":"LiveActivity"}"#.utf8)
    static let createUnstored = Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8)
    static let update = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"n":1}}}"#.utf8)

    /// A request header block; `authorization` nil leaves the header out.
    static func headers(
        _ method: String,
        _ path: String,
        channelID: String? = nil,
        authorization: String? = F.defaultAuthorization,
        _ extra: [(String, String)] = []
    ) -> [(String, String)] {
        var headers: [(String, String)] = [
            (":method", method), (":scheme", "https"), (":path", path), (":authority", "127.0.0.1"),
        ]
        if let authorization { headers.append(("authorization", authorization)) }
        if let channelID { headers.append(("apns-channel-id", channelID)) }
        return headers + extra
    }

    static func broadcastHeaders(
        _ channelID: String?,
        pushType: String? = "liveactivity",
        priority: String? = "10",
        expiration: String? = "0"
    ) -> [(String, String)] {
        var extra: [(String, String)] = []
        if let pushType { extra.append(("apns-push-type", pushType)) }
        if let priority { extra.append(("apns-priority", priority)) }
        if let expiration { extra.append(("apns-expiration", expiration)) }
        return headers("POST", broadcastPath, channelID: channelID, extra)
    }

    static func create(_ client: RawH2Client, body: [UInt8] = createStored) async throws -> RawH2Client.Response {
        try await client.send(headers: headers("POST", channelsPath), body: body)
    }

    static func json(_ response: RawH2Client.Response) throws -> [String: JSONValue] {
        try #require(try JSONValue.parse(response.body).objectValue)
    }

    @Test("Create, list, read and delete a channel: 201 with apns-channel-id, 200 with JSON, 204 (§7.2)")
    func lifecycle() async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let requestID = "7b0f2a3c-1d2e-4f5a-8b9c-0d1e2f3a4b5c"
        let created = try await client.send(
            headers: Self.headers("POST", Self.channelsPath, [("apns-request-id", requestID)]),
            body: Self.createStored
        )
        #expect(created.status == 201)
        #expect(created.endStreamOnHeaders)
        #expect(created.header("apns-request-id") == requestID)
        let id = try #require(created.header("apns-channel-id"))
        #expect(id.utf8.count == 24 && Data(base64Encoded: id)?.count == 16)
        let second = try #require(try await Self.create(client, body: Self.createUnstored).header("apns-channel-id"))
        #expect(second != id)

        let list = try await client.send(headers: Self.headers("GET", Self.listPath), body: [])
        #expect(list.status == 200)
        #expect(list.header("content-type") == "application/json")
        #expect(try Self.json(list)["channels"] == .array([.string(id), .string(second)]))
        let generated = try #require(list.header("apns-request-id"))
        #expect(UUID(uuidString: generated) != nil)

        let read = try await client.send(headers: Self.headers("GET", Self.channelsPath, channelID: id), body: [])
        #expect(read.status == 200)
        #expect(try Self.json(read) == ["message-storage-policy": .int(1), "push-type": .string("LiveActivity")])

        let deleted = try await client.send(headers: Self.headers("DELETE", Self.channelsPath, channelID: id), body: [])
        #expect(deleted.status == 204)
        #expect(deleted.endStreamOnHeaders && deleted.body.isEmpty)
        let gone = try await client.send(headers: Self.headers("GET", Self.channelsPath, channelID: id), body: [])
        #expect(gone.status == 400)
        #expect(gone.reason == "ChannelNotRegistered")
        #expect(simulator.channels(bundleID: Self.bundle).map(\.id) == [second])
        #expect(simulator.channels(bundleID: Self.bundle).first?.storagePolicy == .noMessageStored)

        #expect(simulator.channelOperations.map(\.kind) == [.create, .create, .list, .read, .delete])
        #expect(simulator.channelOperations.first?.requestID == requestID)
        #expect(simulator.channelOperations.first?.authorization == .token(teamID: F.teamID, keyID: F.keyID))
        #expect(simulator.channelOperations[2].listed == 2)
        let statistics = simulator.statistics
        #expect(statistics.channelOperations == 5)
        #expect(statistics.channels == 1)
        #expect(statistics.rejectionsByReason == ["ChannelNotRegistered": 1])
        #expect(statistics.accepted == 0)
        await client.close()
        await simulator.stop()
    }

    @Test("The channel limit per app: one more is 400 CannotCreateChannelConfig; other apps have their own (§7.1)")
    func limit() async throws {
        let simulator = try await F.simulator { $0.maxChannelsPerApp = 3 }
        let client = try await F.certificateClient(simulator)
        for _ in 0..<3 { #expect(try await Self.create(client).status == 201) }
        let refused = try await Self.create(client)
        #expect(refused.status == 400)
        #expect(refused.reason == "CannotCreateChannelConfig")
        #expect(refused.header("apns-request-id") != nil)
        let other = try await client.send(
            headers: Self.headers("POST", "/1/apps/com.example.other/channels"),
            body: Self.createStored
        )
        #expect(other.status == 201)
        let first = try #require(simulator.channels(bundleID: Self.bundle).first?.id)
        _ = try await client.send(headers: Self.headers("DELETE", Self.channelsPath, channelID: first), body: [])
        #expect(try await Self.create(client).status == 201)
        #expect(simulator.statistics.channels == 4)
        await client.close()
        await simulator.stop()
    }

    @Test(
        "Management errors: each documented reason for each bad input (§7.4)",
        arguments: [
            ("POST", SimulatorChannelTests.channelsPath, nil, #"{"message-storage-policy":1}"#, 400, "MissingPushType"),
            (
                "POST", SimulatorChannelTests.channelsPath, nil, #"{"message-storage-policy":1,"push-type":"alert"}"#,
                400, "InvalidPushType"
            ),
            (
                "POST", SimulatorChannelTests.channelsPath, nil,
                #"{"message-storage-policy":2,"push-type":"LiveActivity"}"#, 400,
                "MissingChannelQueueSize"
            ),
            (
                "POST", SimulatorChannelTests.channelsPath, nil, #"{"push-type":"LiveActivity"}"#, 400,
                "MissingChannelQueueSize"
            ),
            ("POST", SimulatorChannelTests.channelsPath, nil, "not json", 400, "BadRequestPayload"),
            (
                "POST", SimulatorChannelTests.channelsPath, nil,
                #"{"message-storage-policy":1,"push-type":"LiveActivity","colour":"red"}"#, 400, "BadRequestParams"
            ),
            (
                "GET", "/1/apps/\(SimulatorChannelTests.bundle).push-type.liveactivity/all-channels", nil, "", 400,
                "TopicDisallowed"
            ),
            ("GET", SimulatorChannelTests.channelsPath, nil, "", 400, "MissingChannelId"),
            ("DELETE", SimulatorChannelTests.channelsPath, nil, "", 400, "MissingChannelId"),
            ("GET", SimulatorChannelTests.channelsPath, "not base64!", "", 400, "BadChannelId"),
            (
                "DELETE", SimulatorChannelTests.channelsPath, String(repeating: "QUJD", count: 257), "", 400,
                "BadChannelId"
            ),
            // Longer than any ID APNs hands out today, and well formed: unknown, not refused.
            (
                "DELETE", SimulatorChannelTests.channelsPath, String(repeating: "QUJD", count: 64), "", 400,
                "ChannelNotRegistered"
            ),
            ("GET", SimulatorChannelTests.channelsPath, "c29tZUNoYW5uZWw=", "", 400, "ChannelNotRegistered"),
            ("DELETE", SimulatorChannelTests.channelsPath, "c29tZUNoYW5uZWw=", "", 400, "ChannelNotRegistered"),
            ("PUT", SimulatorChannelTests.channelsPath, nil, "", 405, "MethodNotAllowed"),
            ("POST", SimulatorChannelTests.listPath, nil, "", 405, "MethodNotAllowed"),
            ("GET", SimulatorChannelTests.broadcastPath, nil, "", 405, "MethodNotAllowed"),
            ("GET", "/1/apps/\(SimulatorChannelTests.bundle)/channel", nil, "", 404, "BadPath"),
            ("GET", "/1/apps//channels", nil, "", 404, "BadPath"),
            ("POST", "/4/broadcasts/apps/", nil, "", 404, "BadPath"),
        ] as [(String, String, String?, String, Int, String)]
    )
    func managementErrors(
        method: String,
        path: String,
        channelID: String?,
        body: String,
        status: Int,
        reason: String
    ) async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let response = try await client.send(
            headers: Self.headers(method, path, channelID: channelID),
            body: Array(body.utf8)
        )
        #expect(response.status == status)
        #expect(response.reason == reason)
        #expect(response.header("content-type") == "application/json")
        #expect(response.header("apns-request-id") != nil)
        #expect(simulator.channelOperations.isEmpty)
        await client.close()
        await simulator.stop()
    }

    @Test(
        "Authentication as for device requests: no token is 403 MissingProviderToken, a bad one InvalidProviderToken, a bundle ID the credentials lack 403 TopicMismatch"
    )
    func authentication() async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let missing = try await client.send(headers: Self.headers("GET", Self.listPath, authorization: nil), body: [])
        #expect(missing.status == 403)
        #expect(missing.reason == "MissingProviderToken")
        let bad = try await client.send(
            headers: Self.headers("GET", Self.listPath, authorization: "bearer x.y.z"),
            body: []
        )
        #expect(bad.status == 403)
        #expect(bad.reason == "InvalidProviderToken")
        let topics = try await F.simulator { $0.allowedTopics = ["com.example.other"] }
        let other = try await F.tokenClient(topics)
        let mismatch = try await other.send(headers: Self.headers("GET", Self.listPath), body: [])
        #expect(mismatch.status == 403)
        #expect(mismatch.reason == "TopicMismatch")
        await other.close()
        await topics.stop()
        await client.close()
        await simulator.stop()
    }

    @Test(
        "A broadcast is 200 with apns-request-id (and apns-unique-id in the sandbox) and is recorded (§7.3)",
        arguments: APNSEnvironment.allCases
    )
    func broadcast(environment: APNSEnvironment) async throws {
        let simulator = try await F.simulator { $0.environment = environment }
        let client = try await F.tokenClient(simulator)
        let id = try #require(try await Self.create(client).header("apns-channel-id"))
        let response = try await client.send(
            headers: Self.broadcastHeaders(id, priority: "5", expiration: "1900000000"),
            body: Self.update
        )
        #expect(response.status == 200)
        #expect(response.endStreamOnHeaders && response.body.isEmpty)
        #expect(response.header("apns-request-id") != nil)
        #expect(response.header("apns-id") == nil)
        #expect((response.header("apns-unique-id") != nil) == (environment == .sandbox))
        let broadcast = try #require(simulator.broadcasts.first)
        #expect(broadcast.channelID == id)
        #expect(broadcast.bundleID == Self.bundle)
        #expect(broadcast.pushType == "liveactivity")
        #expect(broadcast.priority == 5)
        #expect(broadcast.expiration == 1_900_000_000)
        #expect(broadcast.payloadLength == Self.update.count)
        #expect(broadcast.requestID == response.header("apns-request-id"))
        #expect(simulator.statistics.broadcasts == 1)
        await client.close()
        await simulator.stop()
    }

    @Test("A broadcast with a non-zero expiration to a channel that stores nothing is 400 BadExpirationDate (§7.3)")
    func expirationOnUnstoredChannel() async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let id = try #require(try await Self.create(client, body: Self.createUnstored).header("apns-channel-id"))
        let refused = try await client.send(
            headers: Self.broadcastHeaders(id, expiration: "1900000000"),
            body: Self.update
        )
        #expect(refused.status == 400)
        #expect(refused.reason == "BadExpirationDate")
        let zero = try await client.send(headers: Self.broadcastHeaders(id, expiration: "0"), body: Self.update)
        #expect(zero.status == 200)
        let absent = try await client.send(headers: Self.broadcastHeaders(id, expiration: nil), body: Self.update)
        #expect(absent.status == 200)
        #expect(simulator.broadcasts.count == 2)
        await client.close()
        await simulator.stop()
    }

    @Test("Broadcast errors: each documented reason for each bad input (§7.4)")
    func broadcastErrors() async throws {
        let simulator = try await F.simulator()
        let client = try await F.certificateClient(simulator)
        let id = try #require(try await Self.create(client).header("apns-channel-id"))
        let cases: [([(String, String)], [UInt8], Int, String)] = [
            (Self.broadcastHeaders(nil), Self.update, 400, "MissingChannelId"),
            (Self.broadcastHeaders(""), Self.update, 400, "MissingChannelId"),
            (Self.broadcastHeaders("%%%"), Self.update, 400, "BadChannelId"),
            (Self.broadcastHeaders("c29tZUNoYW5uZWw="), Self.update, 400, "ChannelNotRegistered"),
            (Self.broadcastHeaders(id, pushType: nil), Self.update, 400, "MissingPushType"),
            (Self.broadcastHeaders(id, pushType: "alert"), Self.update, 400, "InvalidPushType"),
            (Self.broadcastHeaders(id, priority: "7"), Self.update, 400, "BadPriority"),
            (Self.broadcastHeaders(id, expiration: "soon"), Self.update, 400, "BadExpirationDate"),
            (Self.broadcastHeaders(id), [], 400, "PayloadEmpty"),
            (Self.broadcastHeaders(id), SimulatorTests.body(5121), 413, "PayloadTooLarge"),
            (Self.broadcastHeaders(id).setting(":method", "PUT"), Self.update, 405, "MethodNotAllowed"),
        ]
        for (headers, body, status, reason) in cases {
            let response = try await client.send(headers: headers, body: body)
            #expect(response.status == status, "\(reason)")
            #expect(response.reason == reason)
        }
        #expect(
            try await client.send(headers: Self.broadcastHeaders(id), body: SimulatorTests.body(5120)).status == 200
        )
        #expect(simulator.broadcasts.count == 1)
        await client.close()
        await simulator.stop()
    }

    @Test("Channel operations and broadcasts are recorded as JSON lines with \"api\":\"channels\" and \"broadcast\"")
    func recordFile() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("h2chan-\(UUID().uuidString).jsonl")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let simulator = try await F.simulator { $0.recordPath = path }
        let client = try await F.certificateClient(simulator)
        let id = try #require(try await Self.create(client).header("apns-channel-id"))
        _ = try await client.send(headers: Self.broadcastHeaders(id, expiration: "1900000000"), body: Self.update)
        _ = try await client.send(headers: Self.headers("GET", Self.listPath), body: [])
        await client.close()
        await simulator.stop()
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        let records = try lines.map { try #require(try JSONValue.parse(Array($0.utf8)).objectValue) }
        try #require(records.count == 3)
        #expect(records[0]["api"] == .string("channels"))
        #expect(records[0]["operation"] == .string("create"))
        #expect(records[0]["channelID"] == .string(id))
        #expect(records[0]["messageStoragePolicy"] == .int(1))
        #expect(records[0]["authorization"] == .string("certificate"))
        #expect(records[1]["api"] == .string("broadcast"))
        #expect(records[1]["channelID"] == .string(id))
        #expect(records[1]["pushType"] == .string("liveactivity"))
        #expect(records[1]["priority"] == .int(10))
        #expect(records[1]["expiration"] == .int(1_900_000_000))
        #expect(records[1]["payloadLength"] == .int(Int64(Self.update.count)))
        #expect(records[2]["operation"] == .string("list"))
        #expect(records[2]["channels"] == .int(1))
    }
}
