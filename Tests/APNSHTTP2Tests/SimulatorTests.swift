import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import NIOCore
import NIOHTTP2
import Testing

typealias F = SimulatorFixture

/// The HTTP/2 simulator against a raw HTTP/2 client over real TLS (§3, §4, §6.8-§6.13).
@Suite(.timeLimit(.minutes(2)))
struct SimulatorTests {
    // MARK: Success

    @Test(
        "200 with an empty body, END_STREAM on HEADERS and apns-id echoed; apns-unique-id only in the sandbox",
        arguments: APNSEnvironment.allCases
    )
    func successEchoesApnsID(environment: APNSEnvironment) async throws {
        let simulator = try await F.simulator { $0.environment = environment }
        let client = try await F.tokenClient(simulator)
        let id = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"
        let response = try await client.send(headers: F.headers(apnsID: id), body: F.payload)
        #expect(response.status == 200)
        #expect(response.header("apns-id") == id)
        #expect(response.endStreamOnHeaders)
        #expect(response.dataFrames == 0)
        #expect(response.body.isEmpty)
        #expect((response.header("apns-unique-id") != nil) == (environment == .sandbox))
        let accepted = simulator.accepted
        #expect(accepted.count == 1)
        #expect(accepted.first?.apnsID == id)
        #expect(accepted.first?.token == F.token(1))
        #expect(accepted.first?.topic == F.topic)
        #expect(accepted.first?.payloadLength == F.payload.count)
        #expect(accepted.first?.authorization == .token(teamID: F.teamID, keyID: F.keyID))
        #expect(simulator.acceptedByToken == [F.token(1): 1])
        await client.close()
        await simulator.stop()
    }

    @Test("Without apns-id the simulator generates a canonical one")
    func generatesApnsID() async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let response = try await client.send(headers: F.headers(), body: F.payload)
        #expect(response.status == 200)
        let id = try #require(response.header("apns-id"))
        #expect(UUID(uuidString: id) != nil)
        #expect(id == id.lowercased())
        await client.close()
        await simulator.stop()
    }

    @Test("A certificate connection is accepted without authorization, and an authorization header is ignored")
    func certificateConnectionWithoutAuthorization() async throws {
        let simulator = try await F.simulator()
        let client = try await F.certificateClient(simulator)
        let plain = try await client.send(headers: F.headers(topic: nil, authorization: nil), body: F.payload)
        #expect(plain.status == 200)
        let ignored = try await client.send(headers: F.headers(authorization: "bearer garbage"), body: F.payload)
        #expect(ignored.status == 200)
        #expect(simulator.accepted.map(\.authorization) == [.certificate, .certificate])
        #expect(simulator.accepted.first?.topic == nil)
        await client.close()
        await simulator.stop()
    }

    @Test("Payload limits: 4096 bytes for alert and 5120 for voip are accepted (§1.3)")
    func payloadLimits() async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let alert = try await client.send(headers: F.headers(), body: Self.body(4096))
        let voip = try await client.send(
            headers: F.headers(topic: F.topic + ".voip", pushType: "voip"),
            body: Self.body(5120)
        )
        #expect(alert.status == 200)
        #expect(voip.status == 200)
        await client.close()
        await simulator.stop()
    }

    // MARK: Reasons

    struct ReasonCase: Sendable, CustomTestStringConvertible {
        enum Connection: Sendable {
            case token
            case certificate(Set<APNSEnvironment>)
        }

        var reason: String
        var status: Int
        var note: String
        var connection: Connection = .token
        var configure: @Sendable (inout APNSHTTP2Simulator.Configuration) -> Void = { _ in }
        var headers: @Sendable ([(String, String)]) -> [(String, String)] = { $0 }
        var body: [UInt8] = F.payload

        var testDescription: String { "\(status) \(reason): \(note)" }
    }

    static let reasonCases: [ReasonCase] = [
        ReasonCase(reason: "MethodNotAllowed", status: 405, note: "GET", headers: { $0.setting(":method", "GET") }),
        ReasonCase(
            reason: "BadPath",
            status: 404,
            note: "not /3/device/",
            headers: { $0.setting(":path", "/3/devices/abcd") }
        ),
        ReasonCase(
            reason: "MissingDeviceToken",
            status: 400,
            note: "empty token",
            headers: { $0.setting(":path", "/3/device/") }
        ),
        ReasonCase(
            reason: "BadDeviceToken",
            status: 400,
            note: "not hex",
            headers: { $0.setting(":path", "/3/device/xyz1") }
        ),
        ReasonCase(reason: "BadDeviceToken", status: 400, note: "listed", configure: { $0.badTokens = [F.token(1)] }),
        ReasonCase(
            reason: "DuplicateHeaders",
            status: 400,
            note: "apns-topic twice",
            headers: { $0 + [("apns-topic", F.topic)] }
        ),
        ReasonCase(
            reason: "MissingProviderToken",
            status: 403,
            note: "no authorization",
            headers: { $0.removing("authorization") }
        ),
        ReasonCase(
            reason: "MissingProviderToken",
            status: 403,
            note: "empty bearer",
            headers: { $0.setting("authorization", "bearer ") }
        ),
        ReasonCase(
            reason: "InvalidProviderToken",
            status: 403,
            note: "not a JWT",
            headers: { $0.setting("authorization", "bearer a.b") }
        ),
        ReasonCase(
            reason: "InvalidProviderToken",
            status: 403,
            note: "no keys configured",
            configure: { $0.verifier = nil }
        ),
        ReasonCase(
            reason: "ExpiredProviderToken",
            status: 403,
            note: "iat two hours old",
            headers: { $0.setting("authorization", F.authorization(issuedAt: F.epoch - 7200)) }
        ),
        ReasonCase(
            reason: "BadEnvironmentKeyIdInToken",
            status: 403,
            note: "sandbox-only key",
            configure: {
                $0.verifier = APNSJWTVerifier(
                    keys: [
                        F.keyID: .init(publicKey: F.signingKey.publicKey, teamID: F.teamID, environments: [.sandbox])
                    ],
                    environment: .production
                )
            }
        ),
        ReasonCase(
            reason: "BadCertificateEnvironment",
            status: 403,
            note: "sandbox certificate on production",
            connection: .certificate([.sandbox])
        ),
        ReasonCase(reason: "BadCertificate", status: 403, note: "no APNs extension", connection: .certificate([])),
        ReasonCase(
            reason: "InvalidPushType",
            status: 400,
            note: "unknown type",
            headers: { $0.setting("apns-push-type", "fax") }
        ),
        ReasonCase(
            reason: "InvalidPushType",
            status: 400,
            note: "location on a certificate connection",
            connection: .certificate([.production]),
            headers: { $0.setting("apns-push-type", "location").setting("apns-topic", F.topic + ".location-query") }
        ),
        ReasonCase(
            reason: "MissingTopic",
            status: 400,
            note: "token connection",
            headers: { $0.removing("apns-topic") }
        ),
        ReasonCase(
            reason: "BadTopic",
            status: 400,
            note: "voip without .voip",
            headers: { $0.setting("apns-push-type", "voip") }
        ),
        ReasonCase(
            reason: "BadTopic",
            status: 400,
            note: "space in topic",
            headers: { $0.setting("apns-topic", "com.example app") }
        ),
        ReasonCase(
            reason: "TopicDisallowed",
            status: 400,
            note: "not allowed",
            configure: { $0.allowedTopics = ["com.example.other"] }
        ),
        ReasonCase(
            reason: "BadMessageId",
            status: 400,
            note: "not a UUID",
            headers: { $0.setting("apns-id", "12345") }
        ),
        ReasonCase(reason: "BadPriority", status: 400, note: "7", headers: { $0.setting("apns-priority", "7") }),
        ReasonCase(
            reason: "BadPriority",
            status: 400,
            note: "10 with background",
            headers: { $0.setting("apns-push-type", "background").setting("apns-priority", "10") }
        ),
        ReasonCase(
            reason: "BadExpirationDate",
            status: 400,
            note: "not a number",
            headers: { $0.setting("apns-expiration", "tomorrow") }
        ),
        ReasonCase(
            reason: "BadCollapseId",
            status: 400,
            note: "65 bytes",
            headers: { $0.setting("apns-collapse-id", String(repeating: "x", count: 65)) }
        ),
        ReasonCase(reason: "PayloadEmpty", status: 400, note: "no body", body: []),
        ReasonCase(reason: "PayloadTooLarge", status: 413, note: "4097 bytes alert", body: SimulatorTests.body(4097)),
        ReasonCase(
            reason: "PayloadTooLarge",
            status: 413,
            note: "5121 bytes voip",
            headers: { $0.setting("apns-push-type", "voip").setting("apns-topic", F.topic + ".voip") },
            body: SimulatorTests.body(5121)
        ),
        ReasonCase(
            reason: "Unregistered",
            status: 410,
            note: "listed",
            configure: { $0.unregistered = [F.token(1): F.epoch] }
        ),
        ReasonCase(reason: "TooManyRequests", status: 429, note: "every request", configure: { $0.status429Every = 1 }),
    ]

    @Test("Each reason the simulator produces (§3.4)", arguments: reasonCases)
    func reason(_ c: ReasonCase) async throws {
        let simulator = try await F.simulator(c.configure)
        let client: RawH2Client
        switch c.connection {
        case .token:
            client = try await F.tokenClient(simulator)
        case .certificate(let environments):
            let pair = try F.certificates.makeClient(environments: environments)
            client = try await F.certificateClient(simulator, certificate: pair)
        }
        let response = try await client.send(headers: c.headers(F.headers()), body: c.body)
        #expect(response.status == c.status)
        #expect(response.reason == c.reason)
        #expect(response.header("content-type") == "application/json")
        #expect(response.header("apns-id") != nil)
        #expect(response.dataFrames == 1)
        #expect(simulator.accepted.isEmpty)
        let statistics = simulator.statistics
        #expect(statistics.rejectionsByReason == [c.reason: 1])
        #expect(statistics.requests == 1 && statistics.rejected == 1 && statistics.accepted == 0)
        await client.close()
        await simulator.stop()
    }

    @Test("410 Unregistered carries the timestamp in milliseconds since the epoch")
    func unregisteredTimestampInMilliseconds() async throws {
        let when = Date(timeIntervalSince1970: 1_700_000_000.123)
        let simulator = try await F.simulator()
        simulator.setUnregistered([F.token(7): when])
        let client = try await F.tokenClient(simulator)
        let response = try await client.send(headers: F.headers(token: F.token(7)), body: F.payload)
        #expect(response.status == 410)
        let text = String(decoding: response.body, as: UTF8.self)
        #expect(text == #"{"reason":"Unregistered","timestamp":1700000000123}"#)
        await client.close()
        await simulator.stop()
    }

    @Test("setBadTokens applies to open connections")
    func setBadTokensOnOpenConnection() async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        #expect(try await client.send(headers: F.headers(), body: F.payload).status == 200)
        simulator.setBadTokens([F.token(1)])
        let response = try await client.send(headers: F.headers(), body: F.payload)
        #expect(response.status == 400)
        #expect(response.reason == "BadDeviceToken")
        await client.close()
        await simulator.stop()
    }

    @Test("Every Nth valid request over all connections gets 429 TooManyRequests and is not accepted")
    func status429EveryN() async throws {
        let simulator = try await F.simulator { $0.status429Every = 4 }
        let first = try await F.tokenClient(simulator)
        let second = try await F.certificateClient(simulator)
        var statuses: [Int?] = []
        for i in 0..<6 {
            statuses.append(try await first.send(headers: F.headers(token: F.token(i)), body: F.payload).status)
            statuses.append(try await second.send(headers: F.headers(token: F.token(100 + i)), body: F.payload).status)
        }
        #expect(statuses.filter { $0 == 429 }.count == 3)
        #expect(statuses.enumerated().filter { $0.element == 429 }.map(\.offset) == [3, 7, 11])
        let statistics = simulator.statistics
        #expect(statistics.tooManyRequests == 3)
        #expect(statistics.accepted == 9)
        #expect(statistics.rejectionsByReason == ["TooManyRequests": 3])
        await first.close()
        await second.close()
        await simulator.stop()
    }

    // MARK: Stream limits

    @Test("A token connection starts with one stream and is raised to the limit after the first valid token (§3.2)")
    func tokenConnectionStartsWithOneStream() async throws {
        let simulator = try await F.simulator { $0.maxConcurrentStreams = 50 }
        let client = try await F.tokenClient(simulator)
        #expect(try await client.waitForLimits { !$0.isEmpty } == [1])
        // Three requests at once: the client queues two of them until the limit allows.
        let responses = try await client.send((0..<3).map { (F.headers(token: F.token($0)), F.payload) })
        #expect(responses.map(\.status) == [200, 200, 200])
        #expect(try await client.limits == [1, 50])
        let statistics = simulator.statistics
        #expect(statistics.settingsChanges == 1)
        #expect(statistics.streamLimitViolations == 0)
        await client.close()

        let certificate = try await F.certificateClient(simulator)
        #expect(try await certificate.waitForLimits { !$0.isEmpty } == [50])
        await certificate.close()
        await simulator.stop()
    }

    @Test(
        "With dropStreamsToOneAfterError the limit drops to 1 after an error, not after a 410, and comes back after a 200 (§6.8)"
    )
    func dropsToOneAfterErrorAndRestores() async throws {
        let simulator = try await F.simulator {
            $0.maxConcurrentStreams = 20
            $0.dropStreamsToOneAfterError = true
            $0.unregistered = [F.token(9): F.epoch]
        }
        let client = try await F.certificateClient(simulator)
        #expect(try await client.waitForLimits { !$0.isEmpty } == [20])
        let bad = try await client.send(headers: F.headers().setting("apns-priority", "7"), body: F.payload)
        #expect(bad.status == 400)
        // The SETTINGS frame is written before the answer, so it has arrived by now.
        #expect(try await client.limits == [20, 1])
        let good = try await client.send(headers: F.headers(), body: F.payload)
        #expect(good.status == 200)
        #expect(try await client.limits == [20, 1, 20])
        let gone = try await client.send(headers: F.headers(token: F.token(9)), body: F.payload)
        #expect(gone.status == 410)
        #expect(try await client.send(headers: F.headers(), body: F.payload).status == 200)
        #expect(try await client.limits == [20, 1, 20])
        #expect(simulator.statistics.settingsChanges == 2)
        await client.close()
        await simulator.stop()
    }

    @Test("setMaxConcurrentStreams announces the new limit on open connections")
    func setMaxConcurrentStreams() async throws {
        let simulator = try await F.simulator { $0.maxConcurrentStreams = 20 }
        let client = try await F.certificateClient(simulator)
        #expect(try await client.waitForLimits { !$0.isEmpty } == [20])
        simulator.setMaxConcurrentStreams(1)
        #expect(try await client.waitForLimits { $0.last == 1 } == [20, 1])
        simulator.setMaxConcurrentStreams(20)
        #expect(try await client.waitForLimits { $0.count == 3 } == [20, 1, 20])
        let responses = try await client.send((0..<10).map { (F.headers(token: F.token($0)), F.payload) })
        #expect(responses.allSatisfy { $0.status == 200 })
        await client.close()
        await simulator.stop()
    }

    // MARK: GOAWAY

    @Test(
        "goAwayEvery: GOAWAY names the last stream answered; streams above it are refused and never recorded (§3.5, §6.9)"
    )
    func goAwayEvery() async throws {
        let simulator = try await F.simulator { $0.goAwayEvery = 3 }
        let client = try await F.certificateClient(simulator)
        _ = try await client.waitForLimits { !$0.isEmpty }
        let responses = try await client.send((0..<10).map { (F.headers(token: F.token($0)), F.payload) })
        let goAway = try await client.waitForGoAway()
        try await client.waitForClose()
        #expect(goAway.errorCode == .noError)
        #expect(goAway.lastStreamID == 5)
        #expect(APNSGoAwayDebugData(bytes: goAway.debugData ?? []) == .reason(.shutdown))
        for response in responses {
            if response.streamID <= goAway.lastStreamID {
                #expect(response.status == 200, "stream \(response.streamID)")
            } else {
                #expect(response.status == nil && response.reset != nil, "stream \(response.streamID)")
            }
        }
        let accepted = simulator.accepted
        #expect(accepted.map(\.streamID) == [1, 3, 5])
        #expect(simulator.statistics.goAways == 1)

        // The debug data rotates: JSON, plain text, empty (§6.9).
        var debug: [APNSGoAwayDebugData] = []
        for _ in 0..<2 {
            let next = try await F.certificateClient(simulator)
            _ = try await next.send((0..<3).map { (F.headers(token: F.token($0)), F.payload) })
            debug.append(APNSGoAwayDebugData(bytes: try await next.waitForGoAway().debugData ?? []))
            try await next.waitForClose()
        }
        guard case .text = debug[0] else {
            Issue.record("second GOAWAY debug data is \(debug[0]), expected plain text")
            return
        }
        #expect(debug[1] == .empty)
        await simulator.stop()
    }

    @Test("sendGoAwayToAll sends GOAWAY with the given debug data and closes the connection")
    func sendGoAwayToAll() async throws {
        let simulator = try await F.simulator()
        let client = try await F.certificateClient(simulator)
        #expect(try await client.send(headers: F.headers(), body: F.payload).status == 200)
        simulator.sendGoAwayToAll(debugData: .text("maintenance"))
        let goAway = try await client.waitForGoAway()
        #expect(goAway.lastStreamID == 1)
        #expect(goAway.errorCode == .noError)
        #expect(goAway.debugData == Array("maintenance".utf8))
        try await client.waitForClose()
        await simulator.stop()
    }

    @Test("An idle connection gets GOAWAY {\"reason\":\"IdleTimeout\"} and is closed (§6.11)")
    func idleTimeout() async throws {
        let simulator = try await F.simulator { $0.idleTimeout = .milliseconds(200) }
        // No request: under load a first request could arrive after the idle timer fired, and
        // would then be above the GOAWAY's last-stream-id, unanswered.
        let client = try await F.certificateClient(simulator)
        let goAway = try await client.waitForGoAway()
        #expect(APNSGoAwayDebugData(bytes: goAway.debugData ?? []) == .reason(.idleTimeout))
        try await client.waitForClose()
        await simulator.stop()
    }

    @Test("A client that does not offer h2 is disconnected (§3.1)")
    func requiresH2() async throws {
        let simulator = try await F.simulator()
        let client = try await RawH2Client.connect(
            port: simulator.port,
            certificates: F.certificates,
            alpn: ["http/1.1"]
        )
        try await client.waitForClose()
        await simulator.stop()
    }
}
