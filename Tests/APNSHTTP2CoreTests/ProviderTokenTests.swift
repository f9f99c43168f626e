import APNSCore
import Crypto
import Foundation
import Testing

@testable import APNSHTTP2Core

@Test func providerTokenHasAppleHeaderClaimsAndRawSignature() throws {
    let key = try Fixture.signingKey()
    let token = try APNSProviderToken(
        signingKey: key,
        teamID: Fixture.teamID,
        issuedAt: Fixture.epoch.addingTimeInterval(0.9)
    )

    #expect(token.issuedAt == 1_700_000_000)
    #expect(token.authorization == "bearer " + token.jwt)
    let parts = token.jwt.split(separator: ".", omittingEmptySubsequences: false)
    #expect(parts.count == 3)
    #expect(!token.jwt.contains("=") && !token.jwt.contains("+") && !token.jwt.contains("/"))

    let header = try #require(Base64URL.decode(parts[0]))
    let claims = try #require(Base64URL.decode(parts[1]))
    let signature = try #require(Base64URL.decode(parts[2]))
    #expect(String(decoding: header, as: UTF8.self) == #"{"alg":"ES256","kid":"ABCDE12345"}"#)
    #expect(String(decoding: claims, as: UTF8.self) == #"{"iss":"TEAM123456","iat":1700000000}"#)
    #expect(signature.count == 64)

    let raw = try P256.Signing.ECDSASignature(rawRepresentation: signature)
    let input = Array("\(parts[0]).\(parts[1])".utf8)
    #expect(key.publicKey.isValidSignature(raw, for: input))
    #expect(!token.description.contains(token.jwt))
}

@Test func providerTokenRejectsABadTeamID() throws {
    let key = try Fixture.signingKey()
    #expect(throws: APNSError.self) {
        try APNSProviderToken(signingKey: key, teamID: "team", issuedAt: Fixture.epoch)
    }
}

@Test func base64urlRoundTripsAndRejectsPaddingAndForeignCharacters() {
    for length in 0..<40 {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 250) }
        let text = Base64URL.encode(bytes)
        #expect(!text.contains("="))
        #expect(Base64URL.decode(Substring(text)) == bytes)
    }
    #expect(Base64URL.decode("YQ==") == nil)
    #expect(Base64URL.decode("a+b/") == nil)
    #expect(Base64URL.decode("abcde") == nil)
}
