import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import NIOSSL
import PushTestSupport
import Testing

@testable import APNSHTTP2

/// What ``APNSHTTP2Client/snapshot()`` reports against the simulator over TLS: connections by
/// state and by why they closed or failed, streams in use, writes and resends, 429s, provider
/// tokens, backpressure, and when each outcome's request was written.
@Suite("HTTP/2 client snapshots", .timeLimit(.minutes(3)))
struct SnapshotTests {
    @Test(
        "after N notifications: N writes, every connection of the pool open, one provider token; closed by the shutdown"
    )
    func afterNNotifications() async throws {
        let simulator = try await ClientHarness.simulator { $0.maxConcurrentStreams = 100 }
        let client = try ClientHarness.tokenClient(port: simulator.port) { $0.maxConnections = 2 }
        let count = 500
        let before = DispatchTime.now().uptimeNanoseconds
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<count), shutdown: false)
        let after = DispatchTime.now().uptimeNanoseconds
        #expect(run.outcomes.count == count && run.outcomes.values.allSatisfy { $0.isTransmitted })
        let s = try await DeliveryHarness.snapshot(of: client, "both connections open") { $0.open == 2 }
        #expect(s.writes == count && s.retransmissions == 0)
        #expect(s.connectionsOpened == 2 && s.connecting == 0 && s.backingOff == 0)
        #expect(s.streamsInUse == 0 && s.queued == 0 && s.cachedNotifications == nil && s.cachedBytes == nil)
        #expect(s.connectFailures.isEmpty && s.connectionsClosed.isEmpty)
        #expect(s.providerTokenRefreshes == 1 && s.tooManyRequests == 0)
        #expect(run.outcomes.values.allSatisfy { $0.writtenAt.map { before < $0 && $0 < after } == true })

        await client.shutdown()
        let closed = client.snapshot()
        #expect(closed.open == 0 && closed.connectionsClosed == [.shutdown: 2])
        await simulator.stop()
    }

    @Test("GOAWAY: each connection the server sends away is counted, and the streams it refused are written again")
    func goAway() async throws {
        let simulator = try await ClientHarness.simulator {
            $0.goAwayEvery = 150
            $0.maxConcurrentStreams = 50
        }
        let client = try ClientHarness.certificateClient(port: simulator.port) { $0.maxConnections = 1 }
        let count = 500
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<count), shutdown: false)
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
        let goAways = simulator.statistics.goAways
        #expect(goAways >= 3)
        let s = try await DeliveryHarness.snapshot(of: client, "\(goAways) connections closed after GOAWAY") {
            $0.connectionsClosed[.goaway] == goAways
        }
        #expect(s.connectionsClosed == [.goaway: goAways])
        #expect(s.connectionsOpened == goAways + s.open)
        #expect(s.writes - s.retransmissions == count)
        await client.shutdown()
        await simulator.stop()
    }

    @Test("429: every TooManyRequests answer is counted, and the retries are retransmissions")
    func tooManyRequests() async throws {
        let simulator = try await ClientHarness.simulator { $0.status429Every = 3 }
        let client = try ClientHarness.certificateClient(port: simulator.port) {
            $0.retryBaseDelay = .milliseconds(5)
            $0.retryMaxDelay = .milliseconds(50)
            $0.defaultRetryLimit = 10
        }
        let count = 150
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<count))
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
        let s = client.snapshot()
        let refused = simulator.statistics.tooManyRequests
        #expect(refused >= 50)
        #expect(s.tooManyRequests == refused)
        #expect(s.retransmissions == refused && s.writes == count + refused)
        await simulator.stop()
    }

    @Test("a refused connect is counted; its notifications were never written")
    func refusedConnect() async throws {
        let refusing = try RefusingPort()
        let client = try ClientHarness.certificateClient(port: refusing.port) {
            $0.maxConnections = 1
            $0.connectionRetryLimit = 3
            $0.reconnectBaseDelay = .milliseconds(5)
            $0.reconnectMaxDelay = .milliseconds(20)
        }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<5))
        #expect(run.outcomes.values.allSatisfy { $0.status == .connectionFailed && $0.writtenAt == nil })
        let s = client.snapshot()
        #expect(s.connectFailures == [.refused: 3])
        #expect(s.connectionsOpened == 0 && s.writes == 0 && s.connectionsClosed.isEmpty)
        withExtendedLifetime(refusing) {}
    }

    @Test("a server certificate from another authority is a TLS failure")
    func tlsFailure() async throws {
        let simulator = try await ClientHarness.simulator()
        let other = try TestCertificates()
        let client = try ClientHarness.tokenClient(port: simulator.port) {
            $0.trustRoots = try! NIOSSLCertificate.fromPEMBytes(Array(other.ca.certificatePEM.utf8))
            $0.maxConnections = 1
            $0.connectionRetryLimit = 2
            $0.reconnectBaseDelay = .milliseconds(5)
        }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<1))
        #expect(run.outcomes[0]?.status == .connectionFailed)
        #expect(client.snapshot().connectFailures == [.tls: 2])
        #expect(simulator.statistics.requests == 0)
        await simulator.stop()
    }

    @Test("provider tokens: the first and each refresh are counted")
    func providerTokens() async throws {
        let clock = ManualClock()
        let provider = try ClientHarness.tokenProvider(clock: { clock.now })
        let simulator = try await ClientHarness.simulator { $0.now = { clock.now } }
        let client = try ClientHarness.tokenClient(port: simulator.port, provider: provider) {
            $0.maxConnections = 1
            $0.idleTimeout = nil
        }
        #expect(client.snapshot().providerTokenAcceptedAt == nil)
        let first = try await ClientHarness.run(client, ClientHarness.submissions(0..<50), shutdown: false)
        #expect(first.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(client.snapshot().providerTokenRefreshes == 1)
        // Accepted by APNs: the time the token was signed.
        let firstToken = try provider.currentToken()
        #expect(client.snapshot().providerTokenAcceptedAt == firstToken.issuedAt)
        clock.advance(by: 51 * 60)  // past the refresh interval of 50 minutes
        let second = try await ClientHarness.run(client, ClientHarness.submissions(50..<100))
        #expect(second.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(client.snapshot().providerTokenRefreshes == 2)
        let secondToken = try provider.currentToken()
        #expect(secondToken.issuedAt >= firstToken.issuedAt + 51 * 60)
        #expect(client.snapshot().providerTokenAcceptedAt == secondToken.issuedAt)
        #expect(simulator.statistics.rejected == 0)
        await simulator.stop()
    }

    @Test("provider tokens: a token APNs refuses (403 InvalidProviderToken) is never counted as accepted")
    func refusedProviderToken() async throws {
        // Without a verifier the simulator refuses every provider token.
        let simulator = try await ClientHarness.simulator { $0.verifier = nil }
        let client = try ClientHarness.tokenClient(port: simulator.port) { $0.maxConnections = 1 }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<20))
        #expect(run.outcomes.count == 20)
        #expect(run.outcomes.values.allSatisfy { $0.status == .forbidden && $0.reason == "InvalidProviderToken" })
        let s = client.snapshot()
        #expect(s.providerTokenRefreshes == 1 && s.writes >= 20)
        #expect(s.providerTokenAcceptedAt == nil)
        await simulator.stop()
    }

    @Test("certificate authentication has no provider token to accept")
    func certificateHasNoProviderToken() async throws {
        let simulator = try await ClientHarness.simulator()
        let client = try ClientHarness.certificateClient(port: simulator.port)
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<10))
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(client.snapshot().providerTokenAcceptedAt == nil)
        await simulator.stop()
    }

    @Test("streams in use while the server takes its time to answer")
    func streamsInUse() async throws {
        // The simulator holds its answers until the gate opens: every stream stays open until then.
        let gate = AnswerGate()
        let simulator = try await ClientHarness.simulator { $0.answerGate = gate }
        let client = try ClientHarness.certificateClient(port: simulator.port) { $0.maxConnections = 1 }
        let count = 40
        try await client.send(ClientHarness.submissions(0..<count))
        let s = try await DeliveryHarness.snapshot(of: client, "\(count) streams open") { $0.streamsInUse == count }
        #expect(s.queued == 0 && s.open == 1)
        gate.open()
        var outcomes = 0
        while outcomes < count, let event = await client.nextEvent() {
            if event.outcome != nil { outcomes += 1 }
        }
        #expect(client.snapshot().streamsInUse == 0)
        #expect(client.snapshot().writes == count)
        await client.shutdown()
        await simulator.stop()
    }

    @Test("send waiting for room is counted; a notification refused before writing has no write time")
    func backpressureAndWriteTimes() async throws {
        let simulator = try await ClientHarness.simulator()
        let client = try ClientHarness.certificateClient(port: simulator.port) { $0.maxPending = 16 }
        var submissions = ClientHarness.submissions(0..<160)
        var collapse = ClientHarness.notification()
        collapse.collapseId = String(repeating: "c", count: 65)
        submissions[0] = APNSSubmission(tag: 0, token: ClientHarness.token(0), notification: collapse)
        let run = try await ClientHarness.run(client, submissions)
        #expect(run.outcomes[0]?.status == .invalidPayload && run.outcomes[0]?.writtenAt == nil)
        #expect(run.outcomes.values.filter { $0.isTransmitted && $0.writtenAt != nil }.count == 159)
        let waits = client.snapshot().backpressureWaits
        #expect(waits >= 1 && waits <= 160 / 16)
        await simulator.stop()
    }
}
