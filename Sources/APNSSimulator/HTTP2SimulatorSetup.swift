import APNSCore
import APNSHTTP2Core
import NIOCore
import NIOHTTP2
import NIOSSL
import NIOTLS
import X509

/// How a connection authenticates (§3.2).
enum HTTP2SimulatorAuthentication {
    /// No client certificate: every request needs a provider token (§4).
    case token
    /// A client certificate; `refusal` is the reason every request gets when the certificate
    /// does not fit the simulator's environment.
    case certificate(refusal: APNSReason?)
}

/// Waits for the TLS handshake, then installs HTTP/2 when ALPN chose `h2` (§3.1) and closes
/// the connection otherwise.
///
/// It stays in front of the frame layer (``APNSHTTP2Simulator/Configuration/Framing``) to
/// tell the connection handler that a read burst has been parsed *before* the frame layer
/// flushes the answers, so the simulator's counters include every request a client has seen
/// answered.
final class HTTP2SimulatorSetupHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let simulator: APNSHTTP2Simulator
    private var connection: HTTP2SimulatorConnectionHandler?

    init(simulator: APNSHTTP2Simulator) {
        self.simulator = simulator
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case .handshakeCompleted(let negotiated) = event as? TLSUserEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        guard negotiated == "h2" else {
            context.close(promise: nil)
            return
        }
        do {
            let sync = context.pipeline.syncOperations
            let certificate = try sync.handler(type: NIOSSLServerHandler.self).peerCertificate
            let authentication = Self.authentication(
                certificate: certificate,
                environment: simulator.configuration.environment
            )
            let handler = HTTP2SimulatorConnectionHandler(
                simulator: simulator,
                authentication: authentication,
                channel: context.channel
            )
            let limit = handler.register()
            var connection = NIOHTTP2Handler.ConnectionConfiguration()
            // §6.8: the SETTINGS APNs was seen sending; MAX_CONCURRENT_STREAMS is 1 on a token
            // connection until a valid token arrived (§3.2).
            connection.initialSettings = [
                HTTP2Setting(parameter: .headerTableSize, value: 4096),
                HTTP2Setting(parameter: .maxConcurrentStreams, value: limit),
                HTTP2Setting(parameter: .initialWindowSize, value: 65535),
                HTTP2Setting(parameter: .maxFrameSize, value: 16384),
                HTTP2Setting(parameter: .maxHeaderListSize, value: 8000),
            ]
            // The simulator answers malformed header blocks with APNs reasons instead of
            // resetting the stream.
            connection.headerBlockValidation = .disabled
            // A benchmark client acknowledges many SETTINGS and may cancel many streams: keep
            // NIOHTTP2's denial-of-service limits out of its way.
            connection.controlFrameRateLimit.maximumCount = 1 << 30
            connection.maximumConnectionGlitches = 1 << 30
            var stream = NIOHTTP2Handler.StreamConfiguration()
            stream.streamResetFrameRateLimit.maximumCount = 1 << 30
            stream.streamErrorRateLimit.maximumCount = 1 << 30
            switch simulator.configuration.framing {
            case .native:
                try sync.addHandler(
                    HTTP2ServerFrameCodec(settings: connection.initialSettings, frameDelegate: handler.goAwayWatcher)
                )
            case .nioHTTP2:
                try sync.addHandler(
                    NIOHTTP2Handler(
                        mode: .server,
                        frameDelegate: handler.goAwayWatcher,
                        connectionConfiguration: connection,
                        streamConfiguration: stream
                    )
                )
            }
            try sync.addHandler(handler)
            self.connection = handler
        } catch {
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        connection?.readBurstEnded()
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Before HTTP/2 is installed (TLS errors) close; afterwards the connection handler decides.
        if connection == nil {
            context.close(promise: nil)
        } else {
            context.fireErrorCaught(error)
        }
    }

    /// §3.2, §3.4: a certificate must carry Apple's extension for the simulator's environment.
    static func authentication(
        certificate: NIOSSLCertificate?,
        environment: APNSEnvironment
    ) -> HTTP2SimulatorAuthentication {
        guard let certificate else { return .token }
        guard let der = try? certificate.toDERBytes(), let parsed = try? Certificate(derEncoded: der) else {
            return .certificate(refusal: .badCertificate)
        }
        var environments = Set<APNSEnvironment>()
        for ext in parsed.extensions {
            for env in APNSEnvironment.allCases where ext.oid == env.certificateExtensionOID {
                environments.insert(env)
            }
        }
        if environments.isEmpty { return .certificate(refusal: .badCertificate) }
        if !environments.contains(environment) { return .certificate(refusal: .badCertificateEnvironment) }
        return .certificate(refusal: nil)
    }
}
