import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Crypto
import Foundation
import Testing

/// Keys, times and hand-made JWTs for the verifier's tests.
private enum Fixture {
    static let keyID = "ABCDE12345"
    static let teamID = "TEAM123456"
    /// 2023-11-14T22:13:20Z
    static let epoch = Date(timeIntervalSince1970: 1_700_000_000)

    static func minutes(_ m: Double) -> Date { epoch.addingTimeInterval(m * 60) }

    static func signingKey(_ keyID: String = keyID) throws -> APNSSigningKey {
        try APNSSigningKey(keyID: keyID, privateKey: P256.Signing.PrivateKey())
    }

    /// A JWT with the given header and claims text, signed with `key` in the chosen encoding.
    static func jwt(header: String, claims: String, key: P256.Signing.PrivateKey, der: Bool = false) throws -> String {
        let input = Base64URL.encode(header) + "." + Base64URL.encode(claims)
        let signature = try key.signature(for: Array(input.utf8))
        let bytes = der ? Array(signature.derRepresentation) : Array(signature.rawRepresentation)
        return input + "." + Base64URL.encode(bytes)
    }

    static func claims(team: String = teamID, iat: Date) -> String {
        #"{"iss":"\#(team)","iat":\#(Int64(iat.timeIntervalSince1970))}"#
    }

    static let header = #"{"alg":"ES256","kid":"\#(keyID)"}"#
}

private func verifier(_ key: APNSSigningKey) -> APNSJWTVerifier {
    APNSJWTVerifier(teamID: Fixture.teamID, keys: [key.keyID: key.publicKey])
}

private func reason(_ result: Result<APNSVerifiedToken, APNSJWTRejection>) -> APNSReason? {
    if case .failure(let rejection) = result { return rejection.reason }
    return nil
}

@Test func signedTokensRoundTripThroughTheVerifier() throws {
    let key = try Fixture.signingKey()
    let token = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.epoch)
    let verified = try verifier(key).verify(authorization: token.authorization, now: Fixture.minutes(30)).get()
    #expect(verified.keyID == Fixture.keyID)
    #expect(verified.teamID == Fixture.teamID)
    #expect(verified.issuedAt == token.issuedAt)
    #expect(verified.jwt == token.jwt)
    #expect(verified.signatureEncoding == .raw)
    // The scheme name is case-insensitive.
    #expect(try verifier(key).verify(authorization: "Bearer " + token.jwt, now: Fixture.epoch).get() == verified)
}

@Test func rawAndDERSignaturesBothVerify() throws {
    let key = try Fixture.signingKey()
    let claims = Fixture.claims(iat: Fixture.epoch)
    let raw = try Fixture.jwt(header: Fixture.header, claims: claims, key: key.privateKey, der: false)
    let der = try Fixture.jwt(header: Fixture.header, claims: claims, key: key.privateKey, der: true)
    #expect(raw.split(separator: ".")[2].count == 86)  // 64 bytes
    #expect(der.split(separator: ".")[2].count > 86)  // 70–72 bytes

    let v = verifier(key)
    #expect(try v.verify(authorization: "bearer " + raw, now: Fixture.epoch).get().signatureEncoding == .raw)
    #expect(try v.verify(authorization: "bearer " + der, now: Fixture.epoch).get().signatureEncoding == .der)
}

@Test func tamperedTokensAreInvalid() throws {
    let key = try Fixture.signingKey()
    let token = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.epoch)
    let v = verifier(key)
    let parts = token.jwt.split(separator: ".").map(String.init)

    // Claims changed after signing (another team, same key).
    let forgedClaims = Base64URL.encode(#"{"iss":"OTHERTEAM1","iat":1700000000}"#)
    #expect(
        reason(v.verify(authorization: "bearer \(parts[0]).\(forgedClaims).\(parts[2])", now: Fixture.epoch))
            == .invalidProviderToken
    )

    // One signature bit flipped.
    var signature = try #require(Base64URL.decode(Substring(parts[2])))
    signature[10] ^= 0x01
    let flipped = "\(parts[0]).\(parts[1]).\(Base64URL.encode(signature))"
    #expect(reason(v.verify(authorization: "bearer " + flipped, now: Fixture.epoch)) == .invalidProviderToken)

    // Signed by a different key under the same key ID.
    let other = try Fixture.signingKey()
    let impostor = try APNSProviderToken(signingKey: other, teamID: Fixture.teamID, issuedAt: Fixture.epoch)
    #expect(reason(v.verify(authorization: impostor.authorization, now: Fixture.epoch)) == .invalidProviderToken)
}

@Test func tokenAgeDecidesExpiry() throws {
    let key = try Fixture.signingKey()
    let token = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.epoch)
    let v = verifier(key)
    #expect((try? v.verify(authorization: token.authorization, now: Fixture.minutes(60)).get()) != nil)
    #expect(reason(v.verify(authorization: token.authorization, now: Fixture.minutes(60.02))) == .expiredProviderToken)
    // iat a little ahead of the server clock is tolerated; far ahead is invalid.
    #expect((try? v.verify(authorization: token.authorization, now: Fixture.minutes(-0.5)).get()) != nil)
    #expect(reason(v.verify(authorization: token.authorization, now: Fixture.minutes(-5))) == .invalidProviderToken)
}

@Test func missingOrEmptyBearerIsMissingProviderToken() throws {
    let v = verifier(try Fixture.signingKey())
    for value in [nil, "", "  ", "bearer", "bearer "] as [String?] {
        #expect(
            reason(v.verify(authorization: value, now: Fixture.epoch)) == .missingProviderToken,
            "\(String(describing: value))"
        )
    }
}

@Test func malformedTokensAreInvalidProviderToken() throws {
    let key = try Fixture.signingKey()
    let v = verifier(key)
    let iat = Fixture.epoch
    let cases: [String] = [
        "Basic dXNlcjpwYXNz",
        "bearer abc",
        "bearer a.b",
        "bearer a.b.c.d",
        "bearer !!!.abc.def",
        // alg none, unsigned
        "bearer " + Base64URL.encode(#"{"alg":"none","kid":"ABCDE12345"}"#) + "."
            + Base64URL.encode(Fixture.claims(iat: iat)) + ".",
        // no alg (like Apple's sample token, §6.12)
        "bearer "
            + (try Fixture.jwt(header: #"{"kid":"ABCDE12345"}"#, claims: Fixture.claims(iat: iat), key: key.privateKey)),
        // another algorithm
        "bearer "
            + (try Fixture.jwt(
                header: #"{"alg":"HS256","kid":"ABCDE12345"}"#,
                claims: Fixture.claims(iat: iat),
                key: key.privateKey
            )),
        // unknown key
        "bearer "
            + (try Fixture.jwt(
                header: #"{"alg":"ES256","kid":"ZZZZZ99999"}"#,
                claims: Fixture.claims(iat: iat),
                key: key.privateKey
            )),
        // wrong team
        "bearer "
            + (try Fixture.jwt(
                header: Fixture.header,
                claims: Fixture.claims(team: "OTHERTEAM1", iat: iat),
                key: key.privateKey
            )),
        // iat as a string in milliseconds (Apple's sample, §6.12)
        "bearer "
            + (try Fixture.jwt(
                header: Fixture.header,
                claims: #"{"iss":"TEAM123456","iat":"1700000000000"}"#,
                key: key.privateKey
            )),
        // iat in milliseconds as a number: far in the future
        "bearer "
            + (try Fixture.jwt(
                header: Fixture.header,
                claims: #"{"iss":"TEAM123456","iat":1700000000000}"#,
                key: key.privateKey
            )),
        // claims not an object
        "bearer " + (try Fixture.jwt(header: Fixture.header, claims: "[]", key: key.privateKey)),
    ]
    for value in cases {
        let result = v.verify(authorization: value, now: Fixture.epoch)
        #expect(reason(result) == .invalidProviderToken, "\(value): \(result)")
    }
}

@Test func keyScopeAndEnvironmentAreChecked() throws {
    let key = try Fixture.signingKey()
    let token = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.epoch)
    var v = APNSJWTVerifier(
        keys: [
            key.keyID: .init(
                publicKey: key.publicKey,
                teamID: Fixture.teamID,
                topics: ["com.example.app"],
                environments: [.sandbox]
            )
        ],
        environment: .sandbox
    )
    #expect(
        (try? v.verify(authorization: token.authorization, topic: "com.example.app", now: Fixture.epoch).get()) != nil
    )
    #expect(
        reason(v.verify(authorization: token.authorization, topic: "com.example.other", now: Fixture.epoch))
            == .invalidProviderToken
    )
    v.environment = .production
    #expect(
        reason(v.verify(authorization: token.authorization, topic: "com.example.app", now: Fixture.epoch))
            == .badEnvironmentKeyIdInToken
    )
}

@Test func trackerAllowsOneTokenChangePerTwentyMinutes() throws {
    let key = try Fixture.signingKey()
    let v = verifier(key)
    let a = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(0))
    let b = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(10))
    var tracker = APNSConnectionTokenTracker()
    #expect(!tracker.isAuthenticated)

    func send(_ token: APNSProviderToken, at minute: Double) -> APNSReason? {
        reason(
            tracker.admit(
                v.verify(authorization: token.authorization, now: Fixture.minutes(minute)),
                now: Fixture.minutes(minute)
            )
        )
    }
    #expect(send(a, at: 0) == nil)
    #expect(tracker.isAuthenticated)
    #expect(send(a, at: 5) == nil)
    #expect(send(b, at: 10) == .tooManyProviderTokenUpdates)
    #expect(tracker.current?.jwt == a.jwt)  // the old token still works
    #expect(send(a, at: 11) == nil)
    #expect(send(b, at: 20) == nil)
    #expect(tracker.changedAt == Fixture.minutes(20))
    #expect(send(a, at: 30) == .tooManyProviderTokenUpdates)
    #expect(send(a, at: 40) == nil)
}

@Test func trackerBindsAConnectionToOneTeamAndOneTopicKey() throws {
    let teamKey = try Fixture.signingKey("KEYTEAM001")
    let otherTeamKey = try Fixture.signingKey("KEYOTHER01")
    let topicKey = try Fixture.signingKey("KEYTOPIC01")
    let v = APNSJWTVerifier(keys: [
        teamKey.keyID: .init(publicKey: teamKey.publicKey, teamID: Fixture.teamID),
        otherTeamKey.keyID: .init(publicKey: otherTeamKey.publicKey, teamID: "OTHERTEAM1"),
        topicKey.keyID: .init(publicKey: topicKey.publicKey, teamID: Fixture.teamID, topics: ["com.example.app"]),
    ])
    let first = try APNSProviderToken(signingKey: teamKey, teamID: Fixture.teamID, issuedAt: Fixture.minutes(0))
    let otherTeam = try APNSProviderToken(signingKey: otherTeamKey, teamID: "OTHERTEAM1", issuedAt: Fixture.minutes(30))
    let topicScoped = try APNSProviderToken(signingKey: topicKey, teamID: Fixture.teamID, issuedAt: Fixture.minutes(30))

    var tracker = APNSConnectionTokenTracker()
    let now = Fixture.minutes(40)
    _ = tracker.admit(v.verify(authorization: first.authorization, now: Fixture.minutes(0)), now: Fixture.minutes(0))
    #expect(
        reason(tracker.admit(v.verify(authorization: otherTeam.authorization, now: now), now: now))
            == .invalidProviderToken
    )
    #expect(
        reason(
            tracker.admit(
                v.verify(authorization: topicScoped.authorization, topic: "com.example.app", now: now),
                now: now
            )
        )
            == .unrelatedKeyIdInToken
    )
    #expect(tracker.teamID == Fixture.teamID)

    // A fresh connection accepts the other team.
    var fresh = APNSConnectionTokenTracker()
    #expect((try? fresh.admit(v.verify(authorization: otherTeam.authorization, now: now), now: now).get()) != nil)
}

@Test func expiredTokenCanStickToAConnection() throws {
    let key = try Fixture.signingKey()
    let v = verifier(key)
    let old = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(0))
    let fresh = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(70))
    let now = Fixture.minutes(70)

    var sticky = APNSConnectionTokenTracker(expiredTokenSticks: true)
    #expect(
        reason(sticky.admit(v.verify(authorization: old.authorization, now: now), now: now)) == .expiredProviderToken
    )
    #expect(sticky.answeredExpired)
    #expect(
        reason(sticky.admit(v.verify(authorization: fresh.authorization, now: now), now: now)) == .expiredProviderToken
    )

    var lenient = APNSConnectionTokenTracker()
    #expect(
        reason(lenient.admit(v.verify(authorization: old.authorization, now: now), now: now)) == .expiredProviderToken
    )
    #expect(reason(lenient.admit(v.verify(authorization: fresh.authorization, now: now), now: now)) == nil)
}
