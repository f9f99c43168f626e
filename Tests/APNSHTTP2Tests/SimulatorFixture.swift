import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import Synchronization

/// Shared material for the HTTP/2 simulator tests: certificates and keys made once per test
/// process, simulators on 127.0.0.1 with a free port, and request builders.
enum SimulatorFixture {
    static let certificates: TestCertificates = try! TestCertificates()
    static let teamID = "TEAM123456"
    static let keyID = "KEY1234567"
    static let signingKey = try! APNSSigningKey(keyID: keyID, pem: TestCertificates.unrelatedKeyPEM())
    /// 2023-11-14T22:13:20Z: the simulators' clock starts here.
    static let epoch = Date(timeIntervalSince1970: 1_700_000_000)
    static let topic = "com.example.app"
    static let payload = Array(#"{"aps":{"alert":"Hello"}}"#.utf8)

    static var verifier: APNSJWTVerifier {
        APNSJWTVerifier(teamID: teamID, keys: [keyID: signingKey.publicKey])
    }

    /// A simulator with the fixture's certificates and key, its clock at ``epoch``.
    static func simulator(
        clock: TestClock = TestClock(epoch),
        _ change: (inout APNSHTTP2Simulator.Configuration) -> Void = { _ in }
    ) async throws -> APNSHTTP2Simulator {
        var config = APNSHTTP2Simulator.Configuration(
            certificateChainPEM: certificates.server.certificatePEM,
            privateKeyPEM: certificates.server.keyPEM,
            clientCAPEM: certificates.ca.certificatePEM
        )
        config.verifier = verifier
        config.now = { clock.now }
        change(&config)
        return try await APNSHTTP2Simulator.start(configuration: config)
    }

    /// A connection without a client certificate (token authentication).
    static func tokenClient(_ simulator: APNSHTTP2Simulator) async throws -> RawH2Client {
        try await RawH2Client.connect(port: simulator.port, certificates: certificates)
    }

    /// A connection presenting a client certificate (the fixture's, valid for both environments).
    static func certificateClient(
        _ simulator: APNSHTTP2Simulator,
        certificate: TestCertificates.Pair? = nil
    ) async throws -> RawH2Client {
        try await RawH2Client.connect(
            port: simulator.port,
            certificates: certificates,
            clientCertificate: certificate ?? certificates.client
        )
    }

    /// Token number `i`: 32 distinct bytes.
    static func token(_ i: Int) -> DeviceToken {
        var bytes = [UInt8](repeating: 0xA5, count: 32)
        withUnsafeBytes(of: UInt64(i).bigEndian) { raw in
            for (k, b) in raw.enumerated() { bytes[24 + k] = b }
        }
        return try! DeviceToken(bytes: bytes)
    }

    /// The fixture's token issued at ``epoch``, signed once: ECDSA signatures are randomized, so
    /// every new signature is a different token (and changing it counts as a token update, §4).
    static let defaultAuthorization = authorization()

    /// `bearer <JWT>` signed by the fixture key (or `key`), issued at `issuedAt`; a new token
    /// each call.
    static func authorization(issuedAt: Date = epoch, key: APNSSigningKey = signingKey, team: String = teamID) -> String
    {
        try! APNSProviderToken(signingKey: key, teamID: team, issuedAt: issuedAt).authorization
    }

    /// A valid request header block for `token`; `authorization` nil leaves the header out.
    static func headers(
        token: DeviceToken = token(1),
        topic: String? = topic,
        authorization: String? = defaultAuthorization,
        apnsID: String? = nil,
        pushType: String? = "alert"
    ) -> [(String, String)] {
        var headers: [(String, String)] = [
            (":method", "POST"),
            (":scheme", "https"),
            (":path", "/3/device/" + token.hex),
            (":authority", "127.0.0.1"),
        ]
        if let authorization { headers.append(("authorization", authorization)) }
        if let apnsID { headers.append(("apns-id", apnsID)) }
        if let pushType { headers.append(("apns-push-type", pushType)) }
        if let topic { headers.append(("apns-topic", topic)) }
        return headers
    }

    /// `header.claims.signature` signed with `key`, the signature in JOSE (r‖s) or DER form (§6.12).
    static func jwt(
        issuedAt: Date = epoch,
        der: Bool,
        key: APNSSigningKey = signingKey,
        team: String = teamID
    ) throws -> String {
        let header = #"{"alg":"ES256","kid":"\#(key.keyID)"}"#
        let claims = #"{"iss":"\#(team)","iat":\#(Int64(issuedAt.timeIntervalSince1970))}"#
        let input = base64url(Array(header.utf8)) + "." + base64url(Array(claims.utf8))
        let signature = try key.privateKey.signature(for: Array(input.utf8))
        let bytes = der ? Array(signature.derRepresentation) : Array(signature.rawRepresentation)
        return input + "." + base64url(bytes)
    }

    static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// A clock the test moves by hand (§4 timing without waiting).
final class TestClock: Sendable {
    private let date: Mutex<Date>

    init(_ date: Date) { self.date = Mutex(date) }

    var now: Date { date.withLock { $0 } }

    func advance(by seconds: TimeInterval) {
        date.withLock { $0 = $0.addingTimeInterval(seconds) }
    }
}

extension Array where Element == (String, String) {
    /// Replaces (or adds) a header.
    func setting(_ name: String, _ value: String) -> [(String, String)] {
        var out = filter { $0.0 != name }
        out.append((name, value))
        return out
    }

    func removing(_ name: String) -> [(String, String)] {
        filter { $0.0 != name }
    }
}
