import APNSCore
import Crypto
import Foundation

/// A signed provider authentication token (JWT) for the `authorization` header (§4).
///
/// Header `{"alg":"ES256","kid":"<KeyID>"}`, claims `{"iss":"<TeamID>","iat":<seconds>}`,
/// each base64url-encoded without padding, and an ES256 signature in the JOSE form
/// (raw r‖s, 64 bytes) over `header.claims`.
///
/// The token is a credential: ``description`` names its key, team and issue time only.
public struct APNSProviderToken: Sendable, Hashable, CustomStringConvertible {
    public let keyID: String
    public let teamID: String
    /// The `iat` claim: whole seconds since the UNIX epoch (UTC).
    public let issuedAt: Int64
    /// `header.claims.signature`.
    public let jwt: String

    /// Signs a token issued at `now` (rounded down to whole seconds).
    ///
    /// Throws `invalidCredentials` when `teamID` is not 10 letters or digits, and
    /// `signingFailed` when the crypto library cannot sign.
    public init(signingKey: APNSSigningKey, teamID: String, issuedAt now: Date) throws(APNSError) {
        try APNSAccountIdentifier.validate(teamID, what: "team ID")
        guard let iat = Int64(exactly: now.timeIntervalSince1970.rounded(.down)) else {
            throw APNSError(.signingFailed, "the issue time \(now) cannot be written as whole UNIX seconds")
        }
        // §4: header and claims exactly as Apple documents them; nothing else is required.
        let header = #"{"alg":"ES256","kid":"# + Self.jsonString(signingKey.keyID) + "}"
        let claims = #"{"iss":"# + Self.jsonString(teamID) + #","iat":"# + String(iat) + "}"
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(claims)
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try signingKey.privateKey.signature(for: Array(signingInput.utf8))
        } catch {
            throw APNSError(
                .signingFailed,
                "signing the provider token for key \(signingKey.keyID) failed in the crypto library",
                underlying: error
            )
        }
        // §4, §6.12: JOSE ES256 is the 64-byte r‖s form, not DER.
        self.jwt = signingInput + "." + Base64URL.encode(signature.rawRepresentation)
        self.keyID = signingKey.keyID
        self.teamID = teamID
        self.issuedAt = iat
    }

    /// The `iat` claim as a date.
    public var issueDate: Date { Date(timeIntervalSince1970: TimeInterval(issuedAt)) }

    /// The value of the `authorization` header: `bearer <JWT>` (§3.3).
    public var authorization: String { "bearer " + jwt }

    /// Seconds since `iat` at `now` (negative when `now` is earlier).
    public func age(at now: Date) -> TimeInterval { now.timeIntervalSince1970 - TimeInterval(issuedAt) }

    public var description: String { "provider token (kid \(keyID), iss \(teamID), iat \(issuedAt))" }

    private static func jsonString(_ value: String) -> String {
        String(decoding: JSONValue.string(value).serialized(), as: UTF8.self)
    }
}
