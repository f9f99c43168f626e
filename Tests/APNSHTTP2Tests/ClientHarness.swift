import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Crypto
import Foundation
import NIOSSL
import PushTestSupport
import Synchronization
import Testing

@testable import APNSHTTP2

/// Shared fixtures of the HTTP/2 client tests: certificates and a signing key made once per
/// test process, clients on 127.0.0.1, and a loop that reads one outcome per notification.
enum ClientHarness {
    static let certificates: TestCertificates = try! TestCertificates()
    static let teamID = "TEAM123456"
    static let keyID = "KEY1234567"
    static let privateKey = P256.Signing.PrivateKey()
    static let signingKey = try! APNSSigningKey(keyID: keyID, privateKey: privateKey)
    static let topic = "com.example.app"

    static func credentials(environment: APNSEnvironment = .production) throws -> APNSCredentials {
        try APNSCredentials(
            certificate: .data(Array(certificates.client.certificatePEM.utf8)),
            key: .data(Array(certificates.client.keyPEM.utf8)),
            ca: [.data(Array(certificates.ca.certificatePEM.utf8))],
            environment: environment
        )
    }

    /// A token provider for the shared key, on `clock`.
    static func tokenProvider(clock: @escaping @Sendable () -> Date = { Date() }) throws -> APNSTokenProvider {
        try APNSTokenProvider(signingKey: signingKey, teamID: teamID, clock: clock)
    }

    static func tokenClient(
        port: Int,
        provider: APNSTokenProvider? = nil,
        _ change: (inout APNSHTTP2Configuration) -> Void = { _ in }
    ) throws -> APNSHTTP2Client {
        var config = APNSHTTP2Configuration(
            host: "127.0.0.1",
            port: port,
            authentication: .token(try provider ?? tokenProvider()),
            topic: topic
        )
        config.trustRoots = try NIOSSLCertificate.fromPEMBytes(Array(certificates.ca.certificatePEM.utf8))
        change(&config)
        return try APNSHTTP2Client(configuration: config)
    }

    static func certificateClient(
        port: Int,
        _ change: (inout APNSHTTP2Configuration) -> Void = { _ in }
    ) throws -> APNSHTTP2Client {
        var config = APNSHTTP2Configuration(
            host: "127.0.0.1",
            port: port,
            authentication: .certificate(try credentials()),
            topic: topic
        )
        change(&config)
        return try APNSHTTP2Client(configuration: config)
    }

    /// Token number `i`: 32 distinct bytes.
    static func token(_ i: Int) -> DeviceToken { DeliveryHarness.token(i, fill: 0x5A) }

    static func notification(_ text: String = "Hello") -> APNSNotification { DeliveryHarness.notification(text) }

    static func submissions(_ range: Range<Int>, _ notification: APNSNotification = notification()) -> [APNSSubmission]
    {
        range.map { APNSSubmission(tag: UInt64($0), token: token($0), notification: notification) }
    }

    typealias Run = DeliveryRun

    /// Sends `submissions` while reading events until every submission has its outcome, then
    /// (unless `shutdown` is false) shuts the client down. Fails if it takes longer than `limit`.
    static func run(
        _ client: APNSHTTP2Client,
        _ submissions: [APNSSubmission],
        limit: Duration = .seconds(120),
        shutdown: Bool = true
    ) async throws -> Run {
        try await DeliveryHarness.run(client, submissions, limit: limit, shutdown: shutdown, gracePeriod: .seconds(10))
    }
}

/// A clock tests move by hand.
final class ManualClock: Sendable {
    private let value: Mutex<Date>
    init(_ start: Date = Date()) { value = Mutex(start) }
    var now: Date { value.withLock { $0 } }
    func set(_ date: Date) { value.withLock { $0 = date } }
    func advance(by seconds: TimeInterval) { value.withLock { $0 += seconds } }
}

extension ClientHarness {
    static var verifier: APNSJWTVerifier {
        APNSJWTVerifier(teamID: teamID, keys: [keyID: privateKey.publicKey])
    }

    /// An HTTP/2 simulator with these certificates that knows the harness's signing key.
    static func simulator(
        _ change: (inout APNSHTTP2Simulator.Configuration) -> Void = { _ in }
    ) async throws -> APNSHTTP2Simulator {
        var config = APNSHTTP2Simulator.Configuration(
            certificateChainPEM: certificates.server.certificatePEM,
            privateKeyPEM: certificates.server.keyPEM,
            clientCAPEM: certificates.ca.certificatePEM
        )
        config.verifier = verifier
        change(&config)
        return try await APNSHTTP2Simulator.start(configuration: config)
    }
}
