import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Crypto
import Foundation
import PushTestSupport
import Testing

@testable import APNSHTTP2

/// The HTTP/2 client against the simulator over real TLS: one outcome per notification,
/// stream limits, GOAWAY, retries, provider tokens.
@Suite("HTTP/2 client against the simulator", .timeLimit(.minutes(3)))
struct ClientTests {
    // The scenarios that lean on the frame layer run against both of the simulator's: its own
    // and swift-nio-http2's, an implementation the project did not write.
    static let framings = APNSHTTP2Simulator.Configuration.Framing.allCases

    @Test(
        "20,000 notifications, 1% bad and 1% unregistered tokens, token auth, 2 connections, limit 100: each valid one accepted once",
        arguments: framings
    )
    func twentyThousand(framing: APNSHTTP2Simulator.Configuration.Framing) async throws {
        let total = 20_000
        let bad = Set(stride(from: 7, to: total, by: 100))
        let unregistered = Set(stride(from: 53, to: total, by: 100))
        let since = Date(timeIntervalSince1970: 1_700_000_123.456)
        let simulator = try await ClientHarness.simulator {
            $0.framing = framing
            $0.maxConcurrentStreams = 100
            $0.badTokens = Set(bad.map(ClientHarness.token))
            $0.unregistered = Dictionary(uniqueKeysWithValues: unregistered.map { (ClientHarness.token($0), since) })
        }
        let client = try ClientHarness.tokenClient(port: simulator.port) { $0.maxConnections = 2 }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<total))
        let stats = simulator.statistics
        let accepted = simulator.acceptedByToken
        await simulator.stop()

        #expect(run.outcomes.count == total)
        #expect(run.duplicateOutcomes == 0)
        for i in 0..<total {
            let outcome = try #require(run.outcomes[UInt64(i)])
            if bad.contains(i) {
                #expect(outcome.status == .badRequest && outcome.reason == "BadDeviceToken", "\(i): \(outcome)")
            } else if unregistered.contains(i) {
                #expect(outcome.status == .gone && outcome.reason == "Unregistered", "\(i): \(outcome)")
                #expect(outcome.unregisteredAt == 1_700_000_123_456)
            } else {
                #expect(outcome.isTransmitted, "\(i): \(outcome)")
                #expect(accepted[ClientHarness.token(i)] == 1)
            }
            #expect(!outcome.possibleDuplicate)
        }
        #expect(accepted.count == total - bad.count - unregistered.count)
        #expect(stats.connections == 2)
        #expect(stats.maxConcurrentStreamsSeen <= 100)
        #expect(stats.streamLimitViolations == 0)
        #expect(client.streamLimitsFollowed?.upperBound == 100)
    }

    @Test(
        "the stream limit drops to 1 after each error and comes back, hundreds of times; the client follows it on one connection",
        arguments: framings
    )
    func streamLimitDropsToOne(framing: APNSHTTP2Simulator.Configuration.Framing) async throws {
        // 300 errors: 600 SETTINGS frames, beyond NIOHTTP2's default flood limit of 200 per 30 s.
        let bad = Set(stride(from: 10, to: 3_000, by: 10))
        let simulator = try await ClientHarness.simulator {
            $0.framing = framing
            $0.maxConcurrentStreams = 50
            $0.dropStreamsToOneAfterError = true
            $0.badTokens = Set(bad.map(ClientHarness.token))
        }
        let client = try ClientHarness.tokenClient(port: simulator.port) { $0.maxConnections = 1 }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<3_000))
        let stats = simulator.statistics
        let accepted = simulator.acceptedByToken
        await simulator.stop()

        #expect(run.outcomes.count == 3_000)
        #expect(run.outcomes.values.allSatisfy { !$0.possibleDuplicate })
        #expect(stats.connections == 1)
        #expect(run.outcomes.values.filter { $0.reason == "BadDeviceToken" }.count == bad.count)
        #expect(accepted.count == 3_000 - bad.count)
        #expect(accepted.values.allSatisfy { $0 == 1 })
        #expect(client.streamLimitsFollowed == 1...50)
        #expect(stats.settingsChanges > 400)
        #expect(stats.streamLimitViolations == 0)
    }

    @Test("a limit changed by the server mid-run, to 1 and back, is followed on every connection", arguments: framings)
    func limitChangedMidRun(framing: APNSHTTP2Simulator.Configuration.Framing) async throws {
        let simulator = try await ClientHarness.simulator {
            $0.framing = framing
            $0.maxConcurrentStreams = 64
            $0.responseDelay = .milliseconds(2)
        }
        let client = try ClientHarness.certificateClient(port: simulator.port) { $0.maxConnections = 2 }
        let reader = Task { try await ClientHarness.run(client, ClientHarness.submissions(0..<4_000), shutdown: false) }
        // Change the limit once the first answers are back, and again later.
        try #require(
            await eventually("500 answers back", within: .seconds(60), every: .milliseconds(1)) {
                simulator.statistics.accepted >= 500
            }
        )
        simulator.setMaxConcurrentStreams(1)
        try #require(
            await eventually("800 answers back", within: .seconds(60), every: .milliseconds(1)) {
                simulator.statistics.accepted >= 800
            }
        )
        simulator.setMaxConcurrentStreams(64)
        let run = try await reader.value
        await client.shutdown()
        let stats = simulator.statistics
        await simulator.stop()
        #expect(run.outcomes.count == 4_000)
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted && !$0.possibleDuplicate })
        #expect(client.streamLimitsFollowed?.lowerBound == 1)
        #expect(stats.streamLimitViolations == 0)
        #expect(stats.accepted == 4_000)
    }

    @Test(
        "GOAWAY every 700 requests: streams above last-stream-id are resent on a new connection, nothing twice",
        arguments: framings
    )
    func goAwayMidStream(framing: APNSHTTP2Simulator.Configuration.Framing) async throws {
        let simulator = try await ClientHarness.simulator {
            $0.framing = framing
            $0.goAwayEvery = 700
            $0.maxConcurrentStreams = 100
        }
        let client = try ClientHarness.tokenClient(port: simulator.port) { $0.maxConnections = 2 }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<5_000))
        let stats = simulator.statistics
        let accepted = simulator.acceptedByToken
        await simulator.stop()
        #expect(run.outcomes.count == 5_000)
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted && !$0.possibleDuplicate })
        #expect(accepted.count == 5_000 && accepted.values.allSatisfy { $0 == 1 })
        #expect(stats.goAways >= 5)
        #expect(client.snapshot().connectionsClosed[.goaway, default: 0] >= 5)
        #expect(stats.connections >= 7)
    }

    @Test("429 storms: TooManyRequests is retried with back-off until accepted; past the retry limit it is reported")
    func tooManyRequests() async throws {
        let simulator = try await ClientHarness.simulator { $0.status429Every = 3 }
        let client = try ClientHarness.tokenClient(port: simulator.port) {
            $0.retryBaseDelay = .milliseconds(5)
            $0.retryMaxDelay = .milliseconds(50)
            $0.defaultRetryLimit = 10
        }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<1_500))
        let stats = simulator.statistics
        let accepted = simulator.acceptedByToken
        await simulator.stop()
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(accepted.count == 1_500 && accepted.values.allSatisfy { $0 == 1 })
        #expect(stats.tooManyRequests >= 500)
        #expect(run.outcomes.values.contains { $0.attempts > 1 })

        // Every request refused: each notification is tried 1 + retryLimit times, then reported.
        let storm = try await ClientHarness.simulator { $0.status429Every = 1 }
        let limited = try ClientHarness.tokenClient(port: storm.port) {
            $0.retryBaseDelay = .milliseconds(1)
            $0.retryMaxDelay = .milliseconds(4)
            $0.defaultRetryLimit = 2
        }
        let refused = try await ClientHarness.run(limited, ClientHarness.submissions(0..<100))
        await storm.stop()
        #expect(refused.outcomes.count == 100)
        #expect(
            refused.outcomes.values.allSatisfy {
                $0.status == .tooManyRequests && $0.reason == "TooManyRequests" && $0.attempts == 3
            }
        )
        #expect(storm.statistics.accepted == 0)
        #expect(storm.statistics.tooManyRequests == 300)
    }

    @Test(
        "ExpiredProviderToken: the token is refreshed once, the connection replaced, and every notification accepted once"
    )
    func expiredProviderToken() async throws {
        // The shared token is 59 minutes old (refresh interval 60); the server's clock runs
        // two minutes ahead, so it finds the token over an hour old (§4).
        let clock = ManualClock(Date() - 59 * 60)
        let provider = try APNSTokenProvider(
            signingKey: ClientHarness.signingKey,
            teamID: ClientHarness.teamID,
            refreshInterval: .seconds(3600),
            clock: { clock.now }
        )
        let stale = try provider.currentToken()
        clock.set(Date())
        let simulator = try await ClientHarness.simulator { $0.now = { Date() + 120 } }
        let client = try ClientHarness.tokenClient(port: simulator.port, provider: provider) { $0.maxConnections = 1 }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<200))
        let stats = simulator.statistics
        let accepted = simulator.acceptedByToken
        await simulator.stop()

        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(accepted.count == 200 && accepted.values.allSatisfy { $0 == 1 })
        #expect(stats.rejectionsByReason["ExpiredProviderToken", default: 0] >= 1)
        #expect(stats.connections >= 2)
        let fresh = try provider.currentToken()
        #expect(fresh != stale)
        #expect(fresh.issuedAt >= Int64(Date().timeIntervalSince1970) - 60)
        // The refused token never counted as accepted; the fresh one did.
        #expect(client.snapshot().providerTokenAcceptedAt == fresh.issuedAt)
    }

    @Test("two teams on one simulator: each client keeps its team on its own connections")
    func secondTeam() async throws {
        let otherKey = P256.Signing.PrivateKey()
        let other = try APNSSigningKey(keyID: "OTHERKEY01", privateKey: otherKey)
        let simulator = try await ClientHarness.simulator {
            $0.verifier = APNSJWTVerifier(keys: [
                ClientHarness.keyID: .init(publicKey: ClientHarness.privateKey.publicKey, teamID: ClientHarness.teamID),
                "OTHERKEY01": .init(publicKey: otherKey.publicKey, teamID: "OTHERTEAM1"),
            ])
        }
        let first = try ClientHarness.tokenClient(port: simulator.port)
        let second = try ClientHarness.tokenClient(
            port: simulator.port,
            provider: try APNSTokenProvider(signingKey: other, teamID: "OTHERTEAM1")
        )
        async let a = ClientHarness.run(first, ClientHarness.submissions(0..<500))
        async let b = ClientHarness.run(second, ClientHarness.submissions(1_000..<1_500))
        let (runA, runB) = try await (a, b)
        let accepted = simulator.accepted
        await simulator.stop()
        #expect(runA.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(runB.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(simulator.statistics.rejected == 0)
        var teams: [Int: Set<String>] = [:]
        for item in accepted {
            if case .token(let team, _) = item.authorization { teams[item.connection, default: []].insert(team) }
        }
        #expect(teams.count >= 2)
        #expect(teams.values.allSatisfy { $0.count == 1 })
    }

    @Test(
        "refresh timing: the shared token is replaced after the refresh interval, on the same connection, never sooner"
    )
    func refreshTiming() async throws {
        let clock = ManualClock()
        let provider = try APNSTokenProvider(
            signingKey: ClientHarness.signingKey,
            teamID: ClientHarness.teamID,
            refreshInterval: .seconds(50 * 60),
            clock: { clock.now }
        )
        let simulator = try await ClientHarness.simulator { $0.now = { clock.now } }
        let client = try ClientHarness.tokenClient(port: simulator.port, provider: provider) {
            $0.maxConnections = 1
            $0.idleTimeout = nil
        }
        func batch(_ range: Range<Int>) async throws -> APNSProviderToken {
            let run = try await ClientHarness.run(client, ClientHarness.submissions(range), shutdown: false)
            #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
            return try provider.currentToken()
        }
        let t0 = try await batch(0..<50)
        clock.advance(by: 19 * 60)
        let t19 = try await batch(50..<100)
        clock.advance(by: 31 * 60)  // 50 minutes after the first token
        let t50 = try await batch(100..<150)
        clock.advance(by: 10 * 60)
        let t60 = try await batch(150..<200)
        await client.shutdown()
        let stats = simulator.statistics
        await simulator.stop()

        #expect(t0 == t19)
        #expect(t50 != t0)
        #expect(t50.issuedAt - t0.issuedAt == 50 * 60)
        #expect(t60 == t50)
        #expect(stats.connections == 1)
        #expect(stats.rejected == 0)
        #expect(stats.accepted == 200)
    }

    @Test("backpressure: with maxPending 64, send waits and no more than 64 notifications are ever in the client")
    func backpressure() async throws {
        let simulator = try await ClientHarness.simulator { $0.responseDelay = .milliseconds(1) }
        let client = try ClientHarness.certificateClient(port: simulator.port) { $0.maxPending = 64 }
        let sender = Task { try await client.send(ClientHarness.submissions(0..<2_000)) }
        var outcomes = 0
        var most = 0
        while outcomes < 2_000, let event = await client.nextEvent() {
            let s = client.snapshot()
            most = max(most, s.queued + (s.streamsInUse ?? 0))
            if event.outcome != nil { outcomes += 1 }
        }
        try await sender.value
        // The premise: the sender did wait for room, more than once.
        let waits = client.snapshot().backpressureWaits
        await client.shutdown()
        await simulator.stop()
        #expect(waits > 0, "send never waited for room")
        #expect(outcomes == 2_000)
        #expect(most <= 64)
        #expect(simulator.statistics.accepted == 2_000)
    }

    @Test("an idle connection is closed, and the next notification opens a new one")
    func idleClose() async throws {
        let simulator = try await ClientHarness.simulator()
        let client = try ClientHarness.certificateClient(port: simulator.port) {
            $0.idleTimeout = .milliseconds(200)
            $0.maxConnections = 1
        }
        let first = try await ClientHarness.run(client, ClientHarness.submissions(0..<10), shutdown: false)
        #expect(first.outcomes.values.allSatisfy { $0.isTransmitted })
        var closed: String?
        while closed == nil, let event = await client.nextEvent() {
            if case .disconnected(_, let reason) = event { closed = reason }
        }
        #expect(closed?.contains("idle") == true)
        let second = try await ClientHarness.run(client, ClientHarness.submissions(10..<20))
        #expect(second.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(simulator.statistics.connections == 2)
        await simulator.stop()
    }

    @Test("invalid notifications fail before sending, with a sentence, and are never sent")
    func invalidNotifications() async throws {
        let simulator = try await ClientHarness.simulator()
        let client = try ClientHarness.certificateClient(port: simulator.port)
        var background = APNSNotification()
        background.alert = .text("visible")
        background.pushType = "background"
        var unknown = ClientHarness.notification()
        unknown.pushType = "carrier-pigeon"
        var collapse = ClientHarness.notification()
        collapse.collapseId = String(repeating: "c", count: 65)
        var location = ClientHarness.notification()
        location.pushType = "location"
        let submissions = [
            APNSSubmission(tag: 1, token: ClientHarness.token(1), notification: background),
            APNSSubmission(tag: 2, token: ClientHarness.token(2), notification: unknown),
            APNSSubmission(tag: 3, token: ClientHarness.token(3), notification: collapse),
            APNSSubmission(tag: 4, token: ClientHarness.token(4), notification: location),
            APNSSubmission(tag: 5, token: ClientHarness.token(5), notification: ClientHarness.notification()),
        ]
        let run = try await ClientHarness.run(client, submissions)
        await simulator.stop()
        for tag in 1...4 {
            let outcome = try #require(run.outcomes[UInt64(tag)])
            #expect(
                outcome.status == .invalidPayload && outcome.attempts == 0 && (outcome.message?.isEmpty == false),
                "\(outcome)"
            )
        }
        #expect(run.outcomes[2]?.message?.contains("carrier-pigeon") == true)
        #expect(run.outcomes[5]?.isTransmitted == true)
        #expect(simulator.statistics.requests == 1)
    }

    @Test("a server that is not listening: queued notifications fail with connectionFailed after the retry limit")
    func connectionFailures() async throws {
        let refusing = try RefusingPort()
        let client = try ClientHarness.certificateClient(port: refusing.port) {
            $0.connectionRetryLimit = 3
            $0.reconnectBaseDelay = .milliseconds(5)
            $0.reconnectMaxDelay = .milliseconds(20)
        }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<20))
        #expect(run.outcomes.count == 20)
        #expect(
            run.outcomes.values.allSatisfy {
                $0.status == .connectionFailed && $0.attempts == 0 && !$0.possibleDuplicate
            }
        )
        withExtendedLifetime(refusing) {}
    }

    @Test(
        "an unreachable server without a retry limit: notifications wait, the client reports it unavailable, then available, and delivers them"
    )
    func anOutageIsWaitedOut() async throws {
        var refusing: RefusingPort? = try RefusingPort()
        let port = refusing!.port
        let client = try ClientHarness.certificateClient(port: port) {
            $0.connectionRetryLimit = nil
            $0.reconnectBaseDelay = .milliseconds(5)
            $0.reconnectMaxDelay = .milliseconds(50)
        }
        var submissions = ClientHarness.submissions(0..<20)
        // One of them may not wait past a moment ago: it is reported expired, not sent.
        submissions[19] = APNSSubmission(
            tag: 19,
            token: ClientHarness.token(19),
            content: .init(
                notification: ClientHarness.notification(),
                staleAt: UnixTime.nowMilliseconds() - 1
            )
        )
        try await client.send(submissions)
        var outcomes: [UInt64: APNSDeliveryOutcome] = [:]
        var sawUnavailable = false
        let deadline = ContinuousClock.now + .seconds(30)
        while !sawUnavailable || outcomes.isEmpty, ContinuousClock.now < deadline, let event = await client.nextEvent()
        {
            if case .unavailable = event { sawUnavailable = true }
            if let outcome = event.outcome { outcomes[outcome.tag] = outcome }
        }
        #expect(sawUnavailable)
        #expect(outcomes.keys.sorted() == [19] && outcomes[19]?.status == .expired, "\(outcomes)")

        // The server comes up on that port.
        refusing = nil
        let simulator = try await ClientHarness.simulator { $0.port = port }
        var sawAvailable = false
        while outcomes.count < 20 || !sawAvailable, ContinuousClock.now < deadline, let event = await client.nextEvent()
        {
            if case .available = event { sawAvailable = true }
            if let outcome = event.outcome { outcomes[outcome.tag] = outcome }
        }
        #expect(sawAvailable)
        #expect(outcomes.count == 20)
        #expect(
            outcomes.filter { $0.key != 19 }.values.allSatisfy { $0.isTransmitted && !$0.possibleDuplicate },
            "\(outcomes)"
        )
        await client.shutdown()
        await simulator.stop()
        withExtendedLifetime(refusing) {}
    }
}
