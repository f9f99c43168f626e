import APNSCore
import Crypto
import Foundation

/// An APNs auth key: the P-256 private key from an `AuthKey_<KEYID>.p8` file and its
/// 10-character key ID (§4). Signs provider tokens; see ``APNSProviderToken``.
public struct APNSSigningKey: Sendable {
    /// The key ID shown in the developer account; the JWT header's `kid`.
    public let keyID: String
    public let privateKey: P256.Signing.PrivateKey

    /// The matching public key, as a verifier (such as the simulator's `APNSJWTVerifier`) needs it.
    public var publicKey: P256.Signing.PublicKey { privateKey.publicKey }

    /// Wraps a key that is already loaded. Throws `invalidCredentials` when `keyID` is not
    /// 10 letters or digits.
    public init(keyID: String, privateKey: P256.Signing.PrivateKey) throws(APNSError) {
        try APNSAccountIdentifier.validate(keyID, what: "key ID")
        self.keyID = keyID
        self.privateKey = privateKey
    }

    /// Loads the PEM text of a `.p8` file: a PKCS#8 (`BEGIN PRIVATE KEY`) P-256 key; the
    /// SEC 1 form (`BEGIN EC PRIVATE KEY`) is accepted too. Windows line endings and
    /// surrounding whitespace are tolerated.
    ///
    /// Throws `invalidCredentials` with a sentence naming the problem: an empty text, no PEM
    /// block, an encrypted key, a key on another curve, or anything else that is not a
    /// P-256 private key.
    public init(keyID: String, pem: String) throws(APNSError) {
        try self.init(keyID: keyID, pem: pem, label: "(inline text)")
    }

    /// Loads a `.p8` key from a file or from bytes holding its PEM text
    /// (see ``init(keyID:pem:)`` for the accepted forms and the errors).
    public init(keyID: String, source: CredentialSource) throws(APNSError) {
        switch source {
        case .file(let path):
            guard let data = FileManager.default.contents(atPath: path) else {
                throw APNSError(
                    .invalidCredentials,
                    "cannot read the signing key file \(path): it does not exist or is not readable"
                )
            }
            try self.init(keyID: keyID, pemBytes: Array(data), label: path)
        case .data(let bytes, let label):
            try self.init(keyID: keyID, pemBytes: bytes, label: label)
        }
    }

    /// Loads a `.p8` key file; same as `init(keyID:source: .file(path))`.
    public init(keyID: String, file path: String) throws(APNSError) {
        try self.init(keyID: keyID, source: .file(path))
    }

    private init(keyID: String, pemBytes: [UInt8], label: String) throws(APNSError) {
        guard let text = String(validating: pemBytes, as: UTF8.self) else {
            throw APNSError(
                .invalidCredentials,
                "the signing key \(label) is not text; expected the PEM contents of an AuthKey_<KEYID>.p8 file"
            )
        }
        try self.init(keyID: keyID, pem: text, label: label)
    }

    private init(keyID: String, pem: String, label: String) throws(APNSError) {
        try APNSAccountIdentifier.validate(keyID, what: "key ID")
        let text = pem.replacingOccurrences(of: "\r\n", with: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else {
            throw APNSError(
                .invalidCredentials,
                "the signing key \(label) is empty; expected the PEM contents of an AuthKey_<KEYID>.p8 file"
            )
        }
        guard text.contains("-----BEGIN ") else {
            throw APNSError(
                .invalidCredentials,
                "the signing key \(label) has no PEM block; expected text starting with -----BEGIN PRIVATE KEY----- as in an AuthKey_<KEYID>.p8 file"
            )
        }
        if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
            throw APNSError(
                .invalidCredentials,
                "the signing key \(label) is encrypted; APNs .p8 keys are stored without a passphrase, so use the file as downloaded"
            )
        }
        do {
            self.privateKey = try P256.Signing.PrivateKey(pemRepresentation: text)
            self.keyID = keyID
        } catch {
            // §4: APNs signs with ES256 only, so name the curve when the key is on another one.
            if (try? P384.Signing.PrivateKey(pemRepresentation: text)) != nil {
                throw APNSError(
                    .invalidCredentials,
                    "the signing key \(label) is a P-384 key; APNs provider tokens use ES256, which needs a P-256 key"
                )
            }
            if (try? P521.Signing.PrivateKey(pemRepresentation: text)) != nil {
                throw APNSError(
                    .invalidCredentials,
                    "the signing key \(label) is a P-521 key; APNs provider tokens use ES256, which needs a P-256 key"
                )
            }
            throw APNSError(
                .invalidCredentials,
                "the signing key \(label) is not a PKCS#8 P-256 private key; use the AuthKey_<KEYID>.p8 file from the developer account",
                underlying: error
            )
        }
    }
}

/// Team IDs and key IDs of a developer account: 10 characters (§4).
enum APNSAccountIdentifier {
    static let length = 10

    /// Accepts exactly 10 ASCII letters or digits; Apple issues upper-case IDs such as
    /// `ABCDE12345`.
    static func validate(_ value: String, what: String) throws(APNSError) {
        let ok =
            value.utf8.count == length
            && value.utf8.allSatisfy { byte in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            }
        guard ok else {
            let shown = value.count <= 20 ? "\"\(value)\"" : "\"\(value.prefix(20))…\""
            throw APNSError(
                .invalidCredentials,
                "the \(what) \(shown) is not valid; it must be the 10 letters and digits shown in the developer account, such as ABCDE12345"
            )
        }
    }
}
