import APNSCore
import Crypto
import Foundation
import SwiftASN1
import X509

/// Certificates for running the simulator and its clients over real TLS: a CA, a server
/// certificate for 127.0.0.1 and `localhost`, and client certificates carrying Apple's push
/// environment extensions (OIDs `1.2.840.113635.100.6.3.1`/`.2`), all with P-256 keys.
public struct TestCertificates: Sendable {
    /// A certificate with its key, both PEM-encoded.
    public struct Pair: Sendable {
        public var certificatePEM: String
        public var keyPEM: String
        /// The certificate itself, for building further test material.
        public var certificate: Certificate
    }

    public var ca: Pair
    public var server: Pair
    public var client: Pair

    private let caKey: P256.Signing.PrivateKey

    /// Makes a CA, a server certificate and a client certificate valid for both environments.
    /// The server certificate names `serverDNSNames`, and 127.0.0.1 when `serverLoopbackIP`.
    public init(now: Date = Date(), serverDNSNames: [String] = ["localhost"], serverLoopbackIP: Bool = true) throws {
        caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName { CommonName("apn-worker test CA") }
        let caCert = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: .init(caKey.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 10 * 365 * 86400,
            issuer: caName,
            subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(caKey)
        )
        ca = Pair(
            certificatePEM: try caCert.serializeAsPEM().pemString,
            keyPEM: caKey.pemRepresentation,
            certificate: caCert
        )

        let serverKey = P256.Signing.PrivateKey()
        let serverCert = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: .init(serverKey.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 365 * 86400,
            issuer: caName,
            subject: try DistinguishedName {
                CommonName(serverLoopbackIP ? "127.0.0.1" : serverDNSNames.first ?? "server")
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames(
                    (serverLoopbackIP ? [.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))] : [])
                        + serverDNSNames.map { .dnsName($0) }
                )
            },
            issuerPrivateKey: .init(caKey)
        )
        server = Pair(
            certificatePEM: try serverCert.serializeAsPEM().pemString,
            keyPEM: serverKey.pemRepresentation,
            certificate: serverCert
        )
        client = Pair(certificatePEM: "", keyPEM: "", certificate: serverCert)
        client = try makeClient(now: now)
    }

    /// Issues another client certificate from the same CA.
    ///
    /// - Parameters:
    ///   - environments: the APNs environment extensions it carries.
    ///   - notValidBefore: start of validity (default: an hour ago).
    ///   - notValidAfter: end of validity (default: a year from now).
    public func makeClient(
        commonName: String = "Apple Push Services: com.example.app",
        environments: Set<APNSEnvironment> = [.sandbox, .production],
        notValidBefore: Date? = nil,
        notValidAfter: Date? = nil,
        now: Date = Date()
    ) throws -> Pair {
        let key = P256.Signing.PrivateKey()
        var extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            try ExtendedKeyUsage([.clientAuth])
        }
        for env in APNSEnvironment.allCases.sorted(by: { $0.rawValue > $1.rawValue }) where environments.contains(env) {
            // Apple's push certificates carry these extensions with a DER NULL value.
            try extensions.append(
                Certificate.Extension(oid: env.certificateExtensionOID, critical: false, value: [0x05, 0x00])
            )
        }
        let cert = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: .init(key.publicKey),
            notValidBefore: notValidBefore ?? now - 3600,
            notValidAfter: notValidAfter ?? now + 365 * 86400,
            issuer: try DistinguishedName { CommonName("apn-worker test CA") },
            subject: try DistinguishedName {
                CommonName(commonName)
                OrganizationName("apn-worker tests")
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: extensions,
            issuerPrivateKey: .init(caKey)
        )
        return Pair(
            certificatePEM: try cert.serializeAsPEM().pemString,
            keyPEM: key.pemRepresentation,
            certificate: cert
        )
    }

    /// A PEM private key that belongs to no certificate here.
    public static func unrelatedKeyPEM() -> String {
        P256.Signing.PrivateKey().pemRepresentation
    }

    /// Writes `ca.pem`, `server.pem`, `server-key.pem`, `client.pem` and `client-key.pem` to
    /// `directory`; the keys readable by their owner only, as `apn-worker run` wants its keys.
    public func write(to directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let files = [
            ("ca.pem", ca.certificatePEM),
            ("server.pem", server.certificatePEM),
            ("server-key.pem", server.keyPEM),
            ("client.pem", client.certificatePEM),
            ("client-key.pem", client.keyPEM),
        ]
        for (name, content) in files {
            let path = directory + "/" + name
            try (content + "\n").write(toFile: path, atomically: false, encoding: .utf8)
            if name.hasSuffix("-key.pem") {
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
            }
        }
    }
}
