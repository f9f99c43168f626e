import APNSCore
import APNSHTTP2Core
import Crypto
import Foundation

/// Checks provider tokens the way APNs does (§4), for a simulator of Apple's servers.
///
/// Every failure maps to the reason APNs answers (§3.4):
/// - no `authorization` header, or an empty bearer: `MissingProviderToken`;
/// - not a bearer JWT, not three base64url parts, header or claims not a JSON object,
///   `alg` other than `ES256` (or missing), unknown `kid`, a signature that does not
///   verify, `iss` other than the key's team, a missing or non-integer `iat`, an `iat`
///   in the future beyond ``allowedClockSkew``, or a topic that a topic-specific key does
///   not cover: `InvalidProviderToken`;
/// - a key registered for the other environment: `BadEnvironmentKeyIdInToken`;
/// - an `iat` older than ``maximumAge``: `ExpiredProviderToken`.
///
/// The signature may be the JOSE form (64-byte r‖s) or DER: clients send both (§6.12).
/// The signature is checked before the claims, so the age of a token is only reported for
/// tokens that are otherwise genuine.
public struct APNSJWTVerifier: Sendable {
    /// A signing key APNs knows.
    public struct Key: Sendable {
        public var publicKey: P256.Signing.PublicKey
        /// The team the key belongs to; tokens signed with it must carry it as `iss`.
        public var teamID: String
        /// The topics of a topic-specific key; `nil` for a team-scoped key (§4).
        public var topics: Set<String>?
        /// The environments the key may be used in (§4: keys can be per environment).
        public var environments: Set<APNSEnvironment>

        public init(
            publicKey: P256.Signing.PublicKey,
            teamID: String,
            topics: Set<String>? = nil,
            environments: Set<APNSEnvironment> = Set(APNSEnvironment.allCases)
        ) {
            self.publicKey = publicKey
            self.teamID = teamID
            self.topics = topics
            self.environments = environments
        }
    }

    /// Known keys by key ID (`kid`).
    public var keys: [String: Key]
    /// The environment this server plays; `nil` skips the environment check.
    public var environment: APNSEnvironment?
    /// The oldest accepted `iat` (§4: one hour).
    public var maximumAge: Duration = APNSTokenTiming.maximumAge
    /// How far `iat` may lie in the future (clock differences between hosts).
    public var allowedClockSkew: Duration = .seconds(60)

    public init(keys: [String: Key], environment: APNSEnvironment? = nil) {
        self.keys = keys
        self.environment = environment
    }

    /// A verifier for one team whose keys are all team-scoped.
    public init(teamID: String, keys: [String: P256.Signing.PublicKey], environment: APNSEnvironment? = nil) {
        self.init(keys: keys.mapValues { Key(publicKey: $0, teamID: teamID) }, environment: environment)
    }

    /// Verifies the value of an `authorization` header (`nil` when the header is absent).
    ///
    /// `topic` is the request's `apns-topic`; it is checked against topic-specific keys only.
    public func verify(
        authorization: String?,
        topic: String? = nil,
        now: Date
    ) -> Result<APNSVerifiedToken, APNSJWTRejection> {
        Result { () throws(APNSJWTRejection) -> APNSVerifiedToken in
            try check(authorization: authorization, topic: topic, now: now)
        }
    }

    private func check(authorization: String?, topic: String?, now: Date) throws(APNSJWTRejection) -> APNSVerifiedToken
    {
        // §3.4 MissingProviderToken: no certificate and no or empty authorization.
        guard let authorization, !authorization.allSatisfy(\.isWhitespace) else {
            throw .init(.missingProviderToken, "the request has no authorization header")
        }
        let words = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        // RFC 7235: the scheme name is case-insensitive; APNs documents "bearer" (§3.3).
        guard let scheme = words.first, scheme.lowercased() == "bearer" else {
            throw .init(.invalidProviderToken, "the authorization header is not a bearer token")
        }
        guard words.count == 2 else {
            throw .init(.missingProviderToken, "the bearer token is empty")
        }
        let jwt = words[1].trimmingCharacters(in: .whitespaces)

        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw .init(
                .invalidProviderToken,
                "the bearer token has \(parts.count) dot-separated parts; a signed JWT has 3"
            )
        }
        guard let headerBytes = Base64URL.decode(parts[0]), let claimsBytes = Base64URL.decode(parts[1]),
            let signatureBytes = Base64URL.decode(parts[2])
        else {
            throw .init(.invalidProviderToken, "a part of the bearer token is not unpadded base64url")
        }
        guard let header = (try? JSONValue.parse(headerBytes))?.objectValue else {
            throw .init(.invalidProviderToken, "the JWT header is not a JSON object")
        }

        // §4: APNs accepts only ES256; an unsigned JWT or another algorithm is invalid.
        guard let alg = header["alg"]?.stringValue else {
            throw .init(.invalidProviderToken, "the JWT header has no alg; APNs requires ES256")
        }
        guard alg == "ES256" else {
            throw .init(.invalidProviderToken, "the JWT algorithm is \(alg); APNs accepts only ES256")
        }
        guard let keyID = header["kid"]?.stringValue else {
            throw .init(.invalidProviderToken, "the JWT header has no kid")
        }
        // §4 (pushy's mock server): an unknown key is InvalidProviderToken.
        guard let key = keys[keyID] else {
            throw .init(.invalidProviderToken, "the key ID \(keyID) is not known")
        }

        // §6.12: accept the JOSE r‖s form and DER.
        let signingInput = Array(jwt.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        let encoding: APNSVerifiedToken.SignatureEncoding
        if signatureBytes.count == 64,
            let raw = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            key.publicKey.isValidSignature(raw, for: signingInput)
        {
            encoding = .raw
        } else if let der = try? P256.Signing.ECDSASignature(derRepresentation: signatureBytes),
            key.publicKey.isValidSignature(der, for: signingInput)
        {
            encoding = .der
        } else {
            throw .init(.invalidProviderToken, "the JWT signature does not verify with key \(keyID)")
        }

        // §3.4 BadEnvironmentKeyIdInToken: the key is for the other environment.
        if let environment, !key.environments.contains(environment) {
            throw .init(.badEnvironmentKeyIdInToken, "the key \(keyID) is not valid in the \(environment) environment")
        }

        guard let claims = (try? JSONValue.parse(claimsBytes))?.objectValue else {
            throw .init(.invalidProviderToken, "the JWT claims are not a JSON object")
        }
        guard let issuer = claims["iss"]?.stringValue else {
            throw .init(.invalidProviderToken, "the JWT claims have no iss")
        }
        guard issuer == key.teamID else {
            throw .init(.invalidProviderToken, "the JWT issuer \(issuer) is not the team of key \(keyID)")
        }
        // §4 (pushy's mock server): a topic the topic-specific key does not cover is invalid.
        if let topics = key.topics, let topic, !topics.contains(topic) {
            throw .init(.invalidProviderToken, "the key \(keyID) is not linked to the topic \(topic)")
        }
        // §6.12: iat is whole seconds as a JSON number (Apple's sample has a string in ms).
        guard let issuedAt = claims["iat"]?.intValue else {
            throw .init(.invalidProviderToken, "the JWT claims have no iat number in seconds")
        }
        let age = now.timeIntervalSince1970 - TimeInterval(issuedAt)
        guard age >= -allowedClockSkew.timeInterval else {
            throw .init(.invalidProviderToken, "the JWT iat \(issuedAt) lies in the future")
        }
        // §4: iat must be within the last hour.
        guard age <= maximumAge.timeInterval else {
            throw .init(
                .expiredProviderToken,
                "the JWT iat \(issuedAt) is more than \(APNSTokenTiming.describe(maximumAge)) old"
            )
        }
        return APNSVerifiedToken(
            jwt: jwt,
            keyID: keyID,
            teamID: issuer,
            issuedAt: issuedAt,
            isTopicSpecific: key.topics != nil,
            signatureEncoding: encoding
        )
    }
}

/// A provider token that passed ``APNSJWTVerifier``.
public struct APNSVerifiedToken: Sendable, Hashable {
    public enum SignatureEncoding: String, Sendable, Hashable {
        /// JOSE: r‖s, 64 bytes.
        case raw
        /// ASN.1 DER `SEQUENCE { r, s }`.
        case der
    }

    /// The JWT as sent, without `bearer `.
    public var jwt: String
    public var keyID: String
    public var teamID: String
    public var issuedAt: Int64
    /// The key is topic-specific rather than team-scoped.
    public var isTopicSpecific: Bool
    public var signatureEncoding: SignatureEncoding

    public init(
        jwt: String,
        keyID: String,
        teamID: String,
        issuedAt: Int64,
        isTopicSpecific: Bool,
        signatureEncoding: SignatureEncoding
    ) {
        self.jwt = jwt
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = issuedAt
        self.isTopicSpecific = isTopicSpecific
        self.signatureEncoding = signatureEncoding
    }
}

/// Why a provider token was refused: the APNs reason to answer with (§3.4) and a sentence
/// for logs.
public struct APNSJWTRejection: Error, Sendable, Hashable, CustomStringConvertible {
    public var reason: APNSReason
    public var message: String

    public init(_ reason: APNSReason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    /// The HTTP status that goes with ``reason``.
    public var status: Int { reason.status ?? 403 }

    public var description: String { "\(reason): \(message)" }
}

/// The provider-token state of one server-side connection (§3.2, §4):
/// - the first accepted token binds the connection to its team; a token of another team is
///   `InvalidProviderToken` (pushy's mock server, §4);
/// - a token signed with a different key ID, when either key is topic-specific, is
///   `UnrelatedKeyIdInToken` (§3.4);
/// - a different token less than 20 minutes after the connection last started using one
///   (the first one included) is `TooManyProviderTokenUpdates` (§4); the connection keeps
///   its previous token;
/// - optionally, once the connection answered `ExpiredProviderToken`, it keeps answering it
///   whatever token comes next, as clients observed (§6.10).
///
/// Until a token is accepted, ``isAuthenticated`` is false; APNs allows one stream at a time
/// on such a connection (§3.2).
public struct APNSConnectionTokenTracker: Sendable, Hashable {
    /// Reproduce §6.10: after `ExpiredProviderToken` the connection never recovers.
    public var expiredTokenSticks: Bool
    /// The team the connection is bound to.
    public private(set) var teamID: String?
    /// The token currently accepted on the connection.
    public private(set) var current: APNSVerifiedToken?
    /// When the connection started using ``current``.
    public private(set) var changedAt: Date?
    /// The connection has answered `ExpiredProviderToken` at least once.
    public private(set) var answeredExpired = false

    public init(expiredTokenSticks: Bool = false) {
        self.expiredTokenSticks = expiredTokenSticks
    }

    /// A valid token has been accepted on this connection.
    public var isAuthenticated: Bool { current != nil }

    /// Applies the connection rules to the verifier's answer for one request and returns the
    /// final answer.
    public mutating func admit(
        _ verification: Result<APNSVerifiedToken, APNSJWTRejection>,
        now: Date
    ) -> Result<APNSVerifiedToken, APNSJWTRejection> {
        if answeredExpired && expiredTokenSticks {
            return .failure(
                .init(
                    .expiredProviderToken,
                    "this connection answered ExpiredProviderToken before and keeps doing so; open a new connection"
                )
            )
        }
        let token: APNSVerifiedToken
        switch verification {
        case .failure(let rejection):
            if rejection.reason == .expiredProviderToken { answeredExpired = true }
            return .failure(rejection)
        case .success(let verified):
            token = verified
        }
        guard let current, let changedAt, let teamID else {
            self.current = token
            self.changedAt = now
            self.teamID = token.teamID
            return .success(token)
        }
        if token.jwt == current.jwt { return .success(token) }
        // §3.2: one team per connection.
        guard token.teamID == teamID else {
            return .failure(
                .init(
                    .invalidProviderToken,
                    "this connection is bound to team \(teamID); a token of team \(token.teamID) needs a new connection"
                )
            )
        }
        // §3.4 UnrelatedKeyIdInToken.
        if token.keyID != current.keyID && (token.isTopicSpecific || current.isTopicSpecific) {
            return .failure(
                .init(
                    .unrelatedKeyIdInToken,
                    "key \(token.keyID) is unrelated to key \(current.keyID) of this connection's first push; open a new connection"
                )
            )
        }
        // §4: at most one token change per 20 minutes on one connection.
        let elapsed = now.timeIntervalSince(changedAt)
        guard elapsed >= APNSTokenTiming.minimumChangeInterval.timeInterval else {
            return .failure(
                .init(
                    .tooManyProviderTokenUpdates,
                    "the provider token changed \(Int(elapsed)) seconds after the previous change; wait at least 20 minutes"
                )
            )
        }
        self.current = token
        self.changedAt = now
        return .success(token)
    }
}
