import APNSCore
import APNSSimulator
import Dispatch
import NIOCore
import NIOPosix
import PushTestSupport
import Testing

@testable import APNSBinary

/// What ``APNSBinaryClient/snapshot()`` reports against the simulator over TLS: connections by
/// state and by why they closed or failed, writes and resends, the sent cache, backpressure,
/// and when each outcome's notification was written.
@Suite(.timeLimit(.minutes(3))) struct SnapshotTests {
    static func submissions(_ tags: Range<Int>) -> [APNSSubmission] {
        let n = Harness.notification()
        return tags.map { APNSSubmission(tag: UInt64($0), token: Harness.token($0), notification: n) }
    }

    @Test func afterNNotificationsEveryOneWasWrittenOnceOverTheWholePool() async throws {
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator) {
            $0.maxConnections = 2
            $0.confirmationWindow = .milliseconds(200)
        }
        let count = 500
        let before = DispatchTime.now().uptimeNanoseconds
        let run = try await Harness.run(client, Self.submissions(0..<count), shutdown: false)
        let after = DispatchTime.now().uptimeNanoseconds
        #expect(run.outcomes.count == count && run.outcomes.values.allSatisfy { $0.isTransmitted })
        let s = try await DeliveryHarness.snapshot(of: client, "both connections open") { $0.open == 2 }
        #expect(s.writes == count && s.retransmissions == 0)
        #expect(s.connectionsOpened == 2 && s.connecting == 0 && s.backingOff == 0)
        #expect(s.queued == 0 && s.cachedNotifications == 0 && s.cachedBytes == 0 && s.streamsInUse == nil)
        #expect(s.connectFailures.isEmpty && s.connectionsClosed.isEmpty)
        #expect(s.providerTokenRefreshes == 0 && s.tooManyRequests == 0)
        // Each outcome says when its notification was written: before it was confirmed.
        #expect(run.outcomes.values.allSatisfy { $0.writtenAt.map { before < $0 && $0 < after } == true })

        await client.shutdown()
        let closed = client.snapshot()
        #expect(closed.open == 0 && closed.connectionsClosed == [.shutdown: 2])
        await simulator.stop()
    }

    @Test func anErrorPacketCountsItsCloseAndTheNotificationsWrittenAgain() async throws {
        let simulator = try await Harness.simulator { $0.badTokens = [Harness.token(5)] }
        // A window long enough for the error packet on a busy machine: nothing is confirmed by
        // time before it arrives.
        let client = try Harness.client(simulator) { $0.confirmationWindow = .seconds(3) }
        let run = try await Harness.run(client, Self.submissions(0..<20), shutdown: false)
        #expect(run.outcomes[5]?.status == .invalidToken)
        let s = try await DeliveryHarness.snapshot(of: client, "the failed connection closed") {
            $0.connectionsClosed[.errorResponse] == 1
        }
        // The 20 went out in one batch; the gateway discarded the 14 after the bad one, which
        // were written again on a second connection.
        #expect(s.retransmissions == 14)
        #expect(s.writes == 34)
        #expect(s.retransmissions == run.outcomes.values.reduce(0) { $0 + $1.attempts - 1 })
        #expect(s.writes == run.outcomes.values.reduce(0) { $0 + $1.attempts })
        #expect(s.connectionsOpened == 2 && s.open == 1 && s.connectionsClosed == [.errorResponse: 1])
        // The rejected notification was written before the gateway answered.
        #expect(run.outcomes[5]?.writtenAt != nil)
        await client.shutdown()
        await simulator.stop()
    }

    @Test func aConnectionTheGatewayDropsWithoutAnErrorPacketIsASilentClose() async throws {
        let simulator = try await Harness.simulator { $0.dropEvery = 50 }
        // Nothing is confirmed by time before the gateway hangs up after 50; without resending,
        // all 80 are reported indeterminate at once.
        let client = try Harness.client(simulator) {
            $0.confirmationWindow = .seconds(5)
            $0.resendOnUnknown = false
        }
        let count = 80
        let run = try await Harness.run(client, Self.submissions(0..<count), shutdown: false)
        #expect(run.outcomes.count == count)
        #expect(
            run.outcomes.values.allSatisfy {
                $0.status == .indeterminate && $0.possibleDuplicate && $0.writtenAt != nil
            }
        )
        #expect(simulator.statistics.silentDrops == 1)
        let s = try await DeliveryHarness.snapshot(of: client, "one silent close") {
            $0.connectionsClosed[.silentClose] == 1
        }
        #expect(s.connectionsClosed == [.silentClose: 1])
        #expect(s.writes == count && s.retransmissions == 0 && s.cachedNotifications == 0)
        await client.shutdown()
        await simulator.stop()
    }

    @Test func aRefusedConnectIsCountedAndItsNotificationWasNeverWritten() async throws {
        let refusing = try RefusingPort()
        var config = APNSBinaryConfiguration(
            host: "127.0.0.1",
            port: refusing.port,
            credentials: try Harness.clientCredentials()
        )
        config.connectionRetryLimit = 2
        let client = try APNSBinaryClient(configuration: config)
        let run = try await Harness.run(client, Self.submissions(0..<1))
        #expect(run.outcomes[0]?.status == .connectionFailed)
        #expect(run.outcomes[0]?.writtenAt == nil)
        let s = client.snapshot()
        #expect(s.connectFailures == [.refused: 2])
        #expect(s.connectionsOpened == 0 && s.writes == 0 && s.open == 0)
        withExtendedLifetime(refusing) {}
    }

    @Test func aGatewayCertificateFromAnotherAuthorityIsATLSFailure() async throws {
        let simulator = try await Harness.simulator()
        let other = try TestCertificates()
        let credentials = try APNSCredentials(
            certificate: .data(Array(Harness.certificates.client.certificatePEM.utf8)),
            key: .data(Array(Harness.certificates.client.keyPEM.utf8)),
            ca: [.data(Array(other.ca.certificatePEM.utf8))],
            environment: .sandbox
        )
        let client = try Harness.client(simulator, credentials: credentials) { $0.connectionRetryLimit = 1 }
        let run = try await Harness.run(client, Self.submissions(0..<1))
        #expect(run.outcomes[0]?.status == .connectionFailed)
        #expect(client.snapshot().connectFailures == [.tls: 1])
        #expect(simulator.acceptedByToken.isEmpty)
        await simulator.stop()
    }

    @Test func aHandshakeThatNeverCompletesIsATimeout() async throws {
        // A TCP listener that accepts and then says nothing.
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { $0.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        var config = APNSBinaryConfiguration(
            host: "127.0.0.1",
            port: silent.localAddress!.port!,
            credentials: try Harness.clientCredentials()
        )
        config.connectTimeout = .milliseconds(300)
        config.connectionRetryLimit = 1
        let client = try APNSBinaryClient(configuration: config)
        _ = try await Harness.run(client, Self.submissions(0..<1))
        #expect(client.snapshot().connectFailures == [.timeout: 1])
        try await silent.close()
    }

    @Test func theSentCacheHoldsWhatAwaitsConfirmation() async throws {
        let simulator = try await Harness.simulator()
        // With a one-hour window only the shutdown probe confirms these notifications.
        let client = try Harness.client(simulator) { $0.confirmationWindow = .seconds(3600) }
        let count = 50
        try await client.send(Self.submissions(0..<count))
        let s = try await DeliveryHarness.snapshot(of: client, "\(count) notifications in the sent cache") {
            $0.cachedNotifications == count
        }
        #expect((s.cachedBytes ?? 0) > count * (29 + 32))
        #expect(s.writes == count && s.queued == 0 && s.open == 1)
        let collector = Task {
            var outcomes: [APNSDeliveryOutcome] = []
            for await event in client.events {
                if let o = event.outcome { outcomes.append(o) }
            }
            return outcomes
        }
        await client.shutdown()
        let outcomes = await collector.value
        #expect(outcomes.count == count && outcomes.allSatisfy { $0.isTransmitted && $0.writtenAt != nil })
        // The probe's error packet ends the connection, but it closed because of the shutdown.
        let after = client.snapshot()
        #expect(after.cachedNotifications == 0 && after.cachedBytes == 0)
        #expect(after.connectionsClosed == [.shutdown: 1])
        await simulator.stop()
    }

    @Test func sendWaitingForRoomIsCountedAndRejectedNotificationsHaveNoWriteTime() async throws {
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator) {
            $0.maxPending = 8
            $0.confirmationWindow = .milliseconds(50)
        }
        var submissions = Self.submissions(0..<100)
        var big = Harness.notification(String(repeating: "x", count: 3000))
        big.truncateAtWordEnd = false
        submissions[0] = APNSSubmission(tag: 0, token: Harness.token(0), notification: big)
        let run = try await Harness.run(client, submissions)
        #expect(run.outcomes.count == 100)
        #expect(run.outcomes[0]?.status == .invalidPayload && run.outcomes[0]?.writtenAt == nil)
        #expect(run.outcomes.values.filter { $0.writtenAt != nil }.count == 99)
        let waits = client.snapshot().backpressureWaits
        // Admitted in chunks of maxPending: every chunk after the first may have waited once.
        #expect(waits >= 1 && waits <= 100 / 8)
        await simulator.stop()
    }
}
