import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509
import _CryptoExtras

/// Which of Apple's environments a connection talks to.
public enum APNSEnvironment: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case sandbox
    case production

    /// The certificate extension that marks a push certificate as valid for this environment
    /// (node-apn checks the same OIDs): `1.2.840.113635.100.6.3.1` for sandbox
    /// ("Apple Push Notification service SSL Development") and `…6.3.2` for production.
    public var certificateExtensionOID: ASN1ObjectIdentifier {
        switch self {
        case .sandbox: [1, 2, 840, 113635, 100, 6, 3, 1]
        case .production: [1, 2, 840, 113635, 100, 6, 3, 2]
        }
    }

    public var description: String { rawValue }
}

/// Where a PEM or PKCS#12 document comes from.
///
/// Printing a source (`description`, `debugDescription`, `dump`) shows its ``label`` only,
/// never the bytes: a credential given as data stays out of logs and messages.
public enum CredentialSource: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    case file(String)
    /// The document itself; `label` says where it came from in messages (for example the
    /// setting or environment variable that held it).
    case data([UInt8], label: String = "(inline data)")

    func load(what: String) throws(APNSError) -> [UInt8] {
        switch self {
        case .data(let bytes, _):
            return bytes
        case .file(let path):
            guard let data = FileManager.default.contents(atPath: path) else {
                throw APNSError(
                    .invalidCredentials,
                    "cannot read the \(what) file \(path): it does not exist or is not readable"
                )
            }
            return Array(data)
        }
    }

    /// The file's path, or the data's label: what messages name.
    public var label: String {
        switch self {
        case .file(let path): path
        case .data(_, let label): label
        }
    }

    public var description: String { label }
    public var debugDescription: String { label }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .enum) }
}

/// A client certificate chain and its private key, checked when loaded, plus the CA list used
/// to verify the server.
///
/// Loading fails with an ``APNSError`` naming the problem when the key does not belong to the
/// certificate, the certificate is outside its validity period, or it does not carry Apple's
/// extension for the environment it is meant for.
public struct APNSCredentials: Sendable {
    /// The client certificate first, then any intermediates.
    public let certificateChain: [NIOSSLCertificate]
    public let privateKey: NIOSSLPrivateKey
    /// Certificates trusted to sign the server's certificate; `nil` means the system's roots.
    public let trustRoots: [NIOSSLCertificate]?
    /// The certificate's subject, for messages and logs.
    public let subject: String
    public let notValidBefore: Date
    public let notValidAfter: Date
    /// The environments the certificate's APNs extensions allow.
    public let environments: Set<APNSEnvironment>

    /// Loads a PEM certificate (chain) and a PEM private key, optionally encrypted with `passphrase`.
    public init(
        certificate: CredentialSource,
        key: CredentialSource,
        passphrase: String? = nil,
        ca: [CredentialSource]? = nil,
        environment: APNSEnvironment,
        now: Date = Date()
    ) throws(APNSError) {
        let certBytes = try certificate.load(what: "certificate")
        let keyBytes = try key.load(what: "private key")
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(certBytes)
        } catch {
            throw APNSError(
                .invalidCredentials,
                "the certificate \(certificate.label) is not a PEM certificate",
                underlying: error
            )
        }
        guard !chain.isEmpty else {
            throw APNSError(.invalidCredentials, "the certificate \(certificate.label) contains no PEM certificate")
        }
        let privateKey: NIOSSLPrivateKey
        do {
            if let passphrase {
                privateKey = try NIOSSLPrivateKey(bytes: keyBytes, format: .pem) { setter in
                    setter(Array(passphrase.utf8))
                }
            } else {
                privateKey = try NIOSSLPrivateKey(bytes: keyBytes, format: .pem)
            }
        } catch {
            let hint = passphrase == nil ? " (if it is encrypted, give its passphrase)" : " or the passphrase is wrong"
            throw APNSError(
                .invalidCredentials,
                "the private key \(key.label) is not a readable PEM private key\(hint)",
                underlying: error
            )
        }
        try self.init(chain: chain, key: privateKey, ca: ca, environment: environment, now: now)
    }

    /// Loads a PKCS#12 (`.p12`/`.pfx`) bundle holding the certificate and key.
    public init(
        pkcs12: CredentialSource,
        passphrase: String? = nil,
        ca: [CredentialSource]? = nil,
        environment: APNSEnvironment,
        now: Date = Date()
    ) throws(APNSError) {
        let bytes = try pkcs12.load(what: "PKCS#12")
        let bundle: NIOSSLPKCS12Bundle
        do {
            bundle = try NIOSSLPKCS12Bundle(buffer: bytes, passphrase: passphrase.map { Array($0.utf8) })
        } catch {
            throw APNSError(
                .invalidCredentials,
                "the PKCS#12 file \(pkcs12.label) cannot be opened: it is not PKCS#12 or the passphrase is wrong",
                underlying: error
            )
        }
        guard !bundle.certificateChain.isEmpty else {
            throw APNSError(.invalidCredentials, "the PKCS#12 file \(pkcs12.label) contains no certificate")
        }
        try self.init(
            chain: bundle.certificateChain,
            key: bundle.privateKey,
            ca: ca,
            environment: environment,
            now: now
        )
    }

    init(
        chain: [NIOSSLCertificate],
        key: NIOSSLPrivateKey,
        ca: [CredentialSource]?,
        environment: APNSEnvironment,
        now: Date
    ) throws(APNSError) {
        let leaf: Certificate
        do {
            leaf = try Certificate(derEncoded: chain[0].toDERBytes())
        } catch {
            throw APNSError(.invalidCredentials, "the client certificate cannot be parsed", underlying: error)
        }
        let subject = String(describing: leaf.subject)

        // The key must belong to the certificate.
        guard let keyPublic = Self.publicKey(of: key) else {
            throw APNSError(
                .invalidCredentials,
                "the private key type is not supported (use RSA or ECDSA P-256/384/521)"
            )
        }
        guard keyPublic == leaf.publicKey else {
            throw APNSError(
                .keyDoesNotMatchCertificate,
                "the private key does not match the certificate \(subject); use the key the certificate was issued for"
            )
        }

        // Validity period.
        if leaf.notValidAfter < now {
            throw APNSError(
                .certificateExpired,
                "the certificate \(subject) expired on \(Self.format(leaf.notValidAfter)); renew it in the Apple developer account"
            )
        }
        if leaf.notValidBefore > now {
            throw APNSError(
                .certificateNotYetValid,
                "the certificate \(subject) is not valid before \(Self.format(leaf.notValidBefore)); check the system clock"
            )
        }

        // APNs environment extension.
        var environments = Set<APNSEnvironment>()
        for ext in leaf.extensions {
            for env in APNSEnvironment.allCases where ext.oid == env.certificateExtensionOID {
                environments.insert(env)
            }
        }
        guard environments.contains(environment) else {
            let has =
                environments.isEmpty
                ? "it carries no APNs environment extension"
                : "it is for \(environments.map(\.rawValue).sorted().joined(separator: " and ")) only"
            throw APNSError(
                .wrongEnvironment,
                "the certificate \(subject) cannot be used for the \(environment) environment: \(has) (extension \(environment.certificateExtensionOID) is missing); use a \(environment) push certificate or change the environment"
            )
        }

        let trust = try ca.map { sources throws(APNSError) in try Self.loadTrustRoots(sources) }

        self.certificateChain = chain
        self.privateKey = key
        self.trustRoots = trust
        self.subject = subject
        self.notValidBefore = leaf.notValidBefore
        self.notValidAfter = leaf.notValidAfter
        self.environments = environments
    }

    /// CA certificates from PEM documents, for verifying a server.
    public static func loadTrustRoots(_ sources: [CredentialSource]) throws(APNSError) -> [NIOSSLCertificate] {
        var roots: [NIOSSLCertificate] = []
        for source in sources {
            let bytes = try source.load(what: "CA")
            do {
                roots += try NIOSSLCertificate.fromPEMBytes(bytes)
            } catch {
                throw APNSError(
                    .invalidCredentials,
                    "the CA file \(source.label) is not a PEM certificate list",
                    underlying: error
                )
            }
        }
        return roots
    }

    /// A TLS client configuration presenting this certificate. With `verifyServer` off the
    /// server's certificate is not checked (node-apn's `rejectUnauthorized: false`).
    public func tlsClientConfiguration(verifyServer: Bool = true) -> TLSConfiguration {
        var config = TLSConfiguration.makeClientConfiguration()
        config.certificateChain = certificateChain.map { .certificate($0) }
        config.privateKey = .privateKey(privateKey)
        if let trustRoots {
            config.trustRoots = .certificates(trustRoots)
        }
        config.certificateVerification = verifyServer ? .fullVerification : .none
        return config
    }

    static func publicKey(of key: NIOSSLPrivateKey) -> Certificate.PublicKey? {
        guard let der = try? key.derBytes else { return nil }
        if let rsa = try? _RSA.Signing.PrivateKey(derRepresentation: der) {
            return Certificate.PrivateKey(rsa).publicKey
        }
        if let p256 = try? P256.Signing.PrivateKey(derRepresentation: der) {
            return Certificate.PrivateKey(p256).publicKey
        }
        if let p384 = try? P384.Signing.PrivateKey(derRepresentation: der) {
            return Certificate.PrivateKey(p384).publicKey
        }
        if let p521 = try? P521.Signing.PrivateKey(derRepresentation: der) {
            return Certificate.PrivateKey(p521).publicKey
        }
        return nil
    }

    private static func format(_ date: Date) -> String {
        date.formatted(.iso8601)
    }
}
