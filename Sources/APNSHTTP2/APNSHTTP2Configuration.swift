import APNSCore
import APNSHTTP2Core
import NIOCore
import NIOSSL

/// How an ``APNSHTTP2Client`` reaches and uses the HTTP/2 provider API (§3).
public struct APNSHTTP2Configuration: Sendable, APNSGatewaySettings {
    /// How the client proves who it is (§3.1).
    public enum Authentication: Sendable {
        /// A client certificate in the TLS handshake (PEM or PKCS#12, as the binary transport).
        case certificate(APNSCredentials)
        /// A provider token (ES256 JWT, §4) in every request, shared by all connections of the
        /// app and refreshed by the provider on its timer.
        case token(APNSTokenProvider)
    }

    public var host: String
    public var port: Int
    public var authentication: Authentication
    /// The app's bundle ID. Each request's `apns-topic` is this plus the push type's suffix
    /// (§3.3), e.g. `com.example.app.voip`.
    public var topic: String
    /// The `apns-topic` of `mdm` notifications: the topic in the MDM push certificate (§3.3).
    public var mdmTopic: String?
    /// CA certificates the server must chain to, for token authentication (with a certificate,
    /// the credentials' trust roots apply). `nil` uses the system's.
    public var trustRoots: [NIOSSLCertificate]?
    /// Verify the server's certificate.
    public var verifyServer = true
    /// Name used for SNI and certificate verification; defaults to `host` unless it is an IP address.
    public var serverHostname: String?
    /// An HTTP proxy to reach the server through, with a `CONNECT` tunnel (``APNSConnector``).
    public var proxy: APNSProxy?

    /// Most connections to the server at once.
    public var maxConnections = 2
    /// Connections kept open even with nothing to send: ``APNSHTTP2Client/start()`` opens them
    /// (and at least one), the idle timeout leaves them open, and a closed one is replaced.
    public var minConnections = 0
    /// Most concurrent streams per connection, whatever the server allows; the server's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` is followed below it, including drops to 1 (§3.2, §6.8).
    public var maxStreamsPerConnection = 1000
    /// Notifications accepted by ``APNSHTTP2Client/send(_:)`` whose outcome has not been read
    /// yet. When it is reached, `send` waits (backpressure).
    public var maxPending = 50_000
    /// TCP connect, TLS handshake and the server's first SETTINGS.
    public var connectTimeout: Duration = .seconds(10)
    /// Send a PING when nothing was read on a connection for this long (§3.5, §6.11).
    public var pingInterval: Duration = .seconds(60)
    /// Close a connection whose PING is not answered within this long; its unanswered streams
    /// are resent elsewhere as `possibleDuplicate`.
    public var pingTimeout: Duration = .seconds(10)
    /// Close a connection that had no stream for this long (`nil` keeps it open).
    public var idleTimeout: Duration? = .seconds(300)

    /// Retries per notification after `429 TooManyRequests` or a 5xx other than `Shutdown`, when
    /// the notification sets no `retryLimit` (§3.4). Resends on a new connection after an answer
    /// about the connection or the provider token (`ExpiredProviderToken`, `IdleTimeout`,
    /// `Shutdown`, …) do not count: at most 3 of them per notification.
    public var defaultRetryLimit = 3
    /// First delay before a retry after 429 or 5xx; doubled for each further retry.
    public var retryBaseDelay: Duration = .seconds(1)
    /// Longest delay between retries.
    public var retryMaxDelay: Duration = .seconds(60)
    /// Writes per notification after which a notification whose connections keep failing
    /// without an answer is given up as ``APNSStatus/indeterminate``.
    public var maxAttempts = 5
    /// Connection failures in a row after which queued notifications fail with
    /// ``APNSStatus/connectionFailed`` instead of waiting; `nil`: they wait, and the client keeps
    /// reconnecting with back-off (``APNSReconnectBackoff``).
    public var connectionRetryLimit: Int? = 10
    /// First delay before reconnecting after a failed connection; doubled per failure.
    public var reconnectBaseDelay: Duration = .milliseconds(100)
    /// Longest delay before reconnecting.
    public var reconnectMaxDelay: Duration = .seconds(5)

    public init(host: String, port: Int, authentication: Authentication, topic: String) {
        self.host = host
        self.port = port
        self.authentication = authentication
        self.topic = topic
    }

    /// Trusts the CA certificates in these PEM documents (for token authentication).
    public mutating func trust(_ sources: [CredentialSource]) throws(APNSError) {
        trustRoots = try APNSCredentials.loadTrustRoots(sources)
    }

    /// Checks the settings, with a sentence naming the first bad one.
    public func validate() throws(APNSError) {
        try validatePort()
        func bad(_ message: String) -> APNSError { APNSError(.invalidConfiguration, message) }
        do {
            try APNSHTTP2Request.validate(topic: topic)
        } catch {
            throw bad("topic: \(error.message)")
        }
        if let mdmTopic {
            do {
                try APNSHTTP2Request.validate(topic: mdmTopic)
            } catch {
                throw bad("mdmTopic: \(error.message)")
            }
        }
        guard maxConnections >= 1 else { throw bad("maxConnections must be at least 1, not \(maxConnections)") }
        guard (0...maxConnections).contains(minConnections) else {
            throw bad("minConnections must be between 0 and maxConnections (\(maxConnections)), not \(minConnections)")
        }
        guard maxStreamsPerConnection >= 1 else {
            throw bad("maxStreamsPerConnection must be at least 1, not \(maxStreamsPerConnection)")
        }
        guard maxPending >= 1 else { throw bad("maxPending must be at least 1, not \(maxPending)") }
        guard connectTimeout > .zero else { throw bad("connectTimeout must be positive") }
        guard pingInterval > .zero, pingTimeout > .zero else {
            throw bad("pingInterval and pingTimeout must be positive")
        }
        if let idleTimeout, idleTimeout <= .zero { throw bad("idleTimeout must be positive or unset") }
        guard defaultRetryLimit >= 0 else {
            throw bad("defaultRetryLimit must be zero or more, not \(defaultRetryLimit)")
        }
        guard maxAttempts >= 1 else { throw bad("maxAttempts must be at least 1, not \(maxAttempts)") }
        if let connectionRetryLimit, connectionRetryLimit < 1 {
            throw bad("connectionRetryLimit must be at least 1 (or unset to keep waiting), not \(connectionRetryLimit)")
        }
        guard retryBaseDelay >= .zero, retryMaxDelay >= retryBaseDelay else {
            throw bad("retryBaseDelay must be zero or more and at most retryMaxDelay")
        }
        guard reconnectBaseDelay >= .zero, reconnectMaxDelay >= reconnectBaseDelay else {
            throw bad("reconnectBaseDelay must be zero or more and at most reconnectMaxDelay")
        }
    }

    /// The TLS configuration: the client certificate or the trust roots, and ALPN `h2` (§3.1).
    func tlsConfiguration() -> TLSConfiguration {
        var tls: TLSConfiguration
        switch authentication {
        case .certificate(let credentials):
            tls = credentials.tlsClientConfiguration(verifyServer: verifyServer)
        case .token:
            tls = TLSConfiguration.makeClientConfiguration()
            if let trustRoots { tls.trustRoots = .certificates(trustRoots) }
            tls.certificateVerification = verifyServer ? .fullVerification : .none
        }
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        return tls
    }
}

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = self.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
