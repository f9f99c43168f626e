import APNSCore
import APNSSimulator
import Foundation
import NIOCore
import PushTestSupport
import Testing

@testable import APNSBinary

/// Shared fixtures: certificates made once per test process, simulators and clients on 127.0.0.1.
enum Harness {
    static let certificates: TestCertificates = try! TestCertificates()

    static func clientCredentials(environment: APNSEnvironment = .sandbox) throws -> APNSCredentials {
        try APNSCredentials(
            certificate: .data(Array(certificates.client.certificatePEM.utf8)),
            key: .data(Array(certificates.client.keyPEM.utf8)),
            ca: [.data(Array(certificates.ca.certificatePEM.utf8))],
            environment: environment
        )
    }

    static func simulator(
        _ change: (inout APNSSimulator.Configuration) -> Void = { _ in }
    ) async throws -> APNSSimulator {
        var config = APNSSimulator.Configuration(
            certificateChainPEM: certificates.server.certificatePEM,
            privateKeyPEM: certificates.server.keyPEM,
            clientCAPEM: certificates.ca.certificatePEM
        )
        change(&config)
        return try await APNSSimulator.start(configuration: config)
    }

    static func client(
        _ simulator: APNSSimulator,
        credentials: APNSCredentials? = nil,
        _ change: (inout APNSBinaryConfiguration) -> Void = { _ in }
    ) throws -> APNSBinaryClient {
        var config = APNSBinaryConfiguration(
            host: "127.0.0.1",
            port: simulator.binaryPort,
            credentials: try credentials ?? clientCredentials()
        )
        change(&config)
        return try APNSBinaryClient(configuration: config)
    }

    /// Token number `i`: 32 distinct bytes.
    static func token(_ i: Int) -> DeviceToken { DeliveryHarness.token(i, fill: 0xA5) }

    static func notification(_ text: String = "Hello") -> APNSNotification { DeliveryHarness.notification(text) }

    typealias Run = DeliveryRun

    /// Sends `submissions` while reading events, until every submission has its outcome, then
    /// (unless `shutdown` is false) shuts the client down. Fails the test if it takes longer than `limit`.
    static func run(
        _ client: APNSBinaryClient,
        _ submissions: [APNSSubmission],
        limit: Duration = .seconds(240),
        shutdown: Bool = true
    ) async throws -> Run {
        try await DeliveryHarness.run(client, submissions, limit: limit, shutdown: shutdown, gracePeriod: .seconds(30))
    }
}
