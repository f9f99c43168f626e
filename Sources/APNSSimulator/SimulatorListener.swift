import APNSCore
import NIOCore
import NIOSSL
import Synchronization

/// What the simulators' listeners share: the server side of TLS, and the box through which
/// accepted connections reach a simulator that is created after its ports are bound.
enum SimulatorListener {
    /// A server TLS context from PEM texts. With `clientCAPEM`, clients are asked for a
    /// certificate that chains to it, checked as `clientVerification` says (host names are
    /// never checked: clients have none to match).
    static func tlsContext(
        certificateChainPEM: String,
        privateKeyPEM: String,
        clientCAPEM: String?,
        clientVerification: CertificateVerification,
        minimumTLSVersion: TLSVersion? = nil,
        applicationProtocols: [String] = []
    ) throws -> NIOSSLContext {
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

/// The server side of a simulator's TLS, whose trusted client CA can change while it runs
/// (Apple trusting a renewed push certificate, and no longer the old one): a connection accepted
/// afterwards is checked against the new CA; the connections already open stay as they are.
final class SimulatorTLS: Sendable {
    private let certificateChainPEM: String
    private let privateKeyPEM: String
    private let clientVerification: CertificateVerification
    private let minimumTLSVersion: TLSVersion?
    private let applicationProtocols: [String]
    private let current: Mutex<NIOSSLContext>

    init(
        certificateChainPEM: String,
        privateKeyPEM: String,
        clientCAPEM: String?,
        clientVerification: CertificateVerification,
        minimumTLSVersion: TLSVersion? = nil,
        applicationProtocols: [String] = []
    ) throws {
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
        self.clientVerification = clientVerification
        self.minimumTLSVersion = minimumTLSVersion
        self.applicationProtocols = applicationProtocols
        current = Mutex(
            try SimulatorListener.tlsContext(
                certificateChainPEM: certificateChainPEM,
                privateKeyPEM: privateKeyPEM,
                clientCAPEM: clientCAPEM,
                clientVerification: clientVerification,
                minimumTLSVersion: minimumTLSVersion,
                applicationProtocols: applicationProtocols
            )
        )
    }

    /// The context of the next connection accepted.
    var context: NIOSSLContext { current.withLock { $0 } }

    /// Trusts client certificates chaining to `clientCAPEM` (one or more PEM certificates) from
    /// the next connection on; `nil` asks for none.
    func trust(clientCAPEM: String?) throws {
        let context = try SimulatorListener.tlsContext(
            certificateChainPEM: certificateChainPEM,
            privateKeyPEM: privateKeyPEM,
            clientCAPEM: clientCAPEM,
            clientVerification: clientVerification,
            minimumTLSVersion: minimumTLSVersion,
            applicationProtocols: applicationProtocols
        )
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
