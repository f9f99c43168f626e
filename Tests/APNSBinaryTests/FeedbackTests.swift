import APNSCore
import APNSSimulator
import PushTestSupport
import Testing

@testable import APNSBinary

@Suite(.timeLimit(.minutes(2))) struct FeedbackTests {
    static func tuples(_ count: Int, base: UInt32 = 1_700_000_000) -> [FeedbackTuple] {
        (0..<count).map { FeedbackTuple(timestamp: base + UInt32($0), token: Harness.token(100_000 + $0)) }
    }

    static func client(
        _ simulator: APNSSimulator,
        readTimeout: Duration = .seconds(5),
        interval: Duration = .seconds(3600)
    ) throws -> APNSFeedbackClient {
        var config = APNSFeedbackClient.Configuration(
            host: "127.0.0.1",
            port: simulator.feedbackPort!,
            credentials: try Harness.clientCredentials()
        )
        config.readTimeout = readTimeout
        config.interval = interval
        return try APNSFeedbackClient(configuration: config)
    }

    @Test func settingsItCannotRunWithFailWhenTheClientIsMade() throws {
        var config = APNSFeedbackClient.Configuration(
            host: "127.0.0.1",
            port: 2196,
            credentials: try Harness.clientCredentials()
        )
        config.readTimeout = .zero
        let error = #expect(throws: APNSError.self) { try APNSFeedbackClient(configuration: config) }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message == "readTimeout must be positive")
        config.readTimeout = .seconds(5)
        config.port = 0
        let port = #expect(throws: APNSError.self) { try APNSFeedbackClient(configuration: config) }
        #expect(port?.message == "port must be between 1 and 65535, not 0")
    }

    @Test func fetchReturnsEveryTupleInOrderAndTheServiceClearsItsList() async throws {
        let expected = Self.tuples(500)
        let simulator = try await Harness.simulator { $0.feedback = expected }
        let client = try Self.client(simulator)
        #expect(try await client.fetch() == expected)
        #expect(try await client.fetch().isEmpty)
        #expect(simulator.statistics.feedbackSessions == 2)
        await simulator.stop()
    }

    @Test func tuplesCanBeDeliveredOneByOneOrInBatches() async throws {
        let expected = Self.tuples(250)
        let simulator = try await Harness.simulator { $0.feedback = expected }
        let client = try Self.client(simulator)
        var calls: [Int] = []
        var seen: [FeedbackTuple] = []
        let count = try await client.fetch(batchSize: 1) { batch in
            calls.append(batch.count)
            seen += batch
        }
        #expect(count == 250)
        #expect(calls.count == 250 && calls.allSatisfy { $0 == 1 })
        #expect(seen == expected)

        simulator.setFeedback(expected)
        var batches: [Int] = []
        try await client.fetch(batchSize: 100) { batches.append($0.count) }
        #expect(batches == [100, 100, 50])
        await simulator.stop()
    }

    @Test func aServiceThatStaysOpenEndsTheSessionAtTheReadTimeout() async throws {
        let expected = Self.tuples(10)
        let simulator = try await Harness.simulator {
            $0.feedback = expected
            $0.feedbackHoldOpen = true
        }
        // The timeout also covers the TLS handshake before the first tuple: 300 ms was exceeded
        // once while the whole suite started at the same time on two cores.
        let client = try Self.client(simulator, readTimeout: .seconds(2))
        #expect(try await client.fetch() == expected)
        await simulator.stop()
    }

    @Test func pollingDeliversEachSessionsList() async throws {
        let first = Self.tuples(3)
        let second = Self.tuples(2, base: 1_800_000_000)
        let simulator = try await Harness.simulator { $0.feedback = first }
        let client = try Self.client(simulator, interval: .milliseconds(20))
        let (stream, continuation) = AsyncStream.makeStream(of: [FeedbackTuple].self)
        let poller = Task {
            try await client.poll(batchSize: 100) { batch in continuation.yield(batch) }
        }
        var received: [[FeedbackTuple]] = []
        for await batch in stream {
            received.append(batch)
            if received.count == 1 { simulator.setFeedback(second) }
            if received.count == 2 { break }
        }
        poller.cancel()
        _ = try? await poller.value
        #expect(received == [first, second])
        await simulator.stop()
    }
}

/// Failures of TLS and connection set-up end in clear outcomes, not in waiting forever.
@Suite(.timeLimit(.minutes(2))) struct ConnectionFailureTests {
    static func submissions(_ n: Int) -> [APNSSubmission] {
        (0..<n).map { APNSSubmission(tag: UInt64($0), token: Harness.token($0), notification: Harness.notification()) }
    }

    @Test func aClientCertificateFromAnotherCAIsRefusedAndNotificationsFail() async throws {
        let simulator = try await Harness.simulator()
        let stranger = try TestCertificates()
        let credentials = try APNSCredentials(
            certificate: .data(Array(stranger.client.certificatePEM.utf8)),
            key: .data(Array(stranger.client.keyPEM.utf8)),
            ca: [.data(Array(Harness.certificates.ca.certificatePEM.utf8))],
            environment: .sandbox
        )
        let client = try Harness.client(simulator, credentials: credentials) { $0.connectionRetryLimit = 2 }
        let run = try await Harness.run(client, Self.submissions(5))
        #expect(run.outcomes.count == 5)
        #expect(run.outcomes.values.allSatisfy { $0.status == .connectionFailed })
        #expect(run.outcomes.values.allSatisfy { $0.message?.contains("2 connection attempts") == true })
        #expect(simulator.acceptedByToken.isEmpty)
        await simulator.stop()
    }

    @Test func aServerCertificateFromAnUntrustedCAIsRefusedUnlessVerificationIsOff() async throws {
        let simulator = try await Harness.simulator()
        let other = try TestCertificates()
        let distrusting = try APNSCredentials(
            certificate: .data(Array(Harness.certificates.client.certificatePEM.utf8)),
            key: .data(Array(Harness.certificates.client.keyPEM.utf8)),
            ca: [.data(Array(other.ca.certificatePEM.utf8))],
            environment: .sandbox
        )
        let strict = try Harness.client(simulator, credentials: distrusting) { $0.connectionRetryLimit = 1 }
        let refused = try await Harness.run(strict, Self.submissions(3))
        #expect(refused.outcomes.values.allSatisfy { $0.status == .connectionFailed })

        let lenient = try Harness.client(simulator, credentials: distrusting) { $0.verifyServer = false }
        let accepted = try await Harness.run(lenient, Self.submissions(3))
        #expect(accepted.outcomes.values.allSatisfy { $0.isTransmitted })
        await simulator.stop()
    }

    @Test func aClosedPortFailsAfterTheRetryLimitWithTheReason() async throws {
        let refusing = try RefusingPort()
        defer { withExtendedLifetime(refusing) {} }
        var config = APNSBinaryConfiguration(
            host: "127.0.0.1",
            port: refusing.port,
            credentials: try Harness.clientCredentials()
        )
        config.connectionRetryLimit = 3
        let client = try APNSBinaryClient(configuration: config)
        let run = try await Harness.run(client, Self.submissions(4))
        #expect(run.outcomes.count == 4)
        #expect(run.outcomes.values.allSatisfy { $0.status == .connectionFailed && $0.attempts == 0 })
        let errors = run.events.filter { if case .error(let e) = $0 { e.code == .connectionFailed } else { false } }
        #expect(errors.count == 1)
    }

    @Test func invalidConfigurationIsRejectedWithTheSettingNamed() throws {
        var config = APNSBinaryConfiguration(
            host: "127.0.0.1",
            port: 2195,
            credentials: try Harness.clientCredentials()
        )
        config.maxConnections = 0
        #expect {
            _ = try APNSBinaryClient(configuration: config)
        } throws: { error in
            (error as? APNSError)?.message.contains("maxConnections") == true
        }
    }
}
