import APNSCore
import NIOCore
import NIOSSL
import Synchronization

/// The server side of a simulator's TLS, whose trusted client CA can change while it runs
/// (Apple trusting a renewed push certificate, and no longer the old one): a connection accepted
/// afterwards is checked against the new CA; the connections already open stay as they are.
final class SimulatorTLS: Sendable {
    /// Everything of the context but the client CA.
    private struct Settings: Sendable {
        var certificateChainPEM: String
        var privateKeyPEM: String
        var clientVerification: CertificateVerification
        var minimumTLSVersion: TLSVersion?
        var applicationProtocols: [String]

        /// A server TLS context from PEM texts. With `clientCAPEM`, clients are asked for a
        /// certificate that chains to it, checked as `clientVerification` says (host names are
        /// never checked: clients have none to match).
        func context(clientCAPEM: String?) throws -> NIOSSLContext {
            var tls = TLSConfiguration.makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(certificateChainPEM.utf8)).map {
                    .certificate($0)
                },
                privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(privateKeyPEM.utf8), format: .pem))
            )
            if let minimumTLSVersion { tls.minimumTLSVersion = minimumTLSVersion }
            tls.applicationProtocols = applicationProtocols
            if let ca = clientCAPEM {
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(ca.utf8)))
                tls.certificateVerification = clientVerification
            }
            return try NIOSSLContext(configuration: tls)
        }
    }

    private let settings: Settings
    private let current: Mutex<NIOSSLContext>

    /// The server's certificate chain and key; with `clientCAPEM`, clients are asked for a
    /// certificate that chains to it, checked as `clientVerification` says.
    init(
        certificateChainPEM: String,
        privateKeyPEM: String,
        clientCAPEM: String?,
        clientVerification: CertificateVerification,
        minimumTLSVersion: TLSVersion? = nil,
        applicationProtocols: [String] = []
    ) throws {
        settings = Settings(
            certificateChainPEM: certificateChainPEM,
            privateKeyPEM: privateKeyPEM,
            clientVerification: clientVerification,
            minimumTLSVersion: minimumTLSVersion,
            applicationProtocols: applicationProtocols
        )
        current = Mutex(try settings.context(clientCAPEM: clientCAPEM))
    }

    /// The context of the next connection accepted.
    var context: NIOSSLContext { current.withLock { $0 } }

    /// Trusts client certificates chaining to `clientCAPEM` (one or more PEM certificates) from
    /// the next connection on; `nil` asks for none.
    func trust(clientCAPEM: String?) throws {
        let context = try settings.context(clientCAPEM: clientCAPEM)
        current.withLock { $0 = context }
    }
}

/// Lets channel initializers reach the simulator created after binding.
final class SimulatorBox<Simulator: Sendable>: Sendable {
    private let value = Mutex<Simulator?>(nil)

    /// Set once, right after binding; read by accepted connections (on event-loop threads).
    var simulator: Simulator? {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }

    /// The simulator, for a connection's handlers. A connection that arrives between bind and
    /// the line that fills the box (a client still retrying this port from an earlier run) is
    /// turned away.
    func started() throws(APNSError) -> Simulator {
        guard let simulator else { throw APNSError(.shutDown, "the simulator is still starting") }
        return simulator
    }
}
