import APNSBinary
import APNSCore
import APNSHTTP2
import APNSHTTP2Core
import PushConfiguration

/// Which API a pool speaks, with its settings.
enum DeliveryTransport: Sendable {
    /// The legacy binary protocol (§1).
    case binary(APNSBinaryConfiguration)
    /// The HTTP/2 provider API (§3).
    case http2(APNSHTTP2Configuration)

    /// `host:port` of the gateway, for logs.
    var endpoint: String {
        switch self {
        case .binary(let c): "\(c.host):\(c.port)"
        case .http2(let c): "\(c.host):\(c.port)"
        }
    }

    /// The proxy of the gateway's connections, for logs: its password masked; `direct` without.
    var proxyDescription: String {
        let proxy: APNSProxy? =
            switch self {
            case .binary(let c): c.proxy
            case .http2(let c): c.proxy
            }
        return proxy.map { "\($0)" } ?? "direct"
    }

    var name: String {
        switch self {
        case .binary: "binary"
        case .http2: "http2"
        }
    }

    /// Whether the gateway's certificate is verified (`verifyServer`).
    var verifiesServer: Bool {
        switch self {
        case .binary(let c): c.verifyServer
        case .http2(let c): c.verifyServer
        }
    }

    /// The most connections the pool opens.
    var maxConnections: Int {
        switch self {
        case .binary(let c): c.maxConnections
        case .http2(let c): c.maxConnections
        }
    }

    /// Connections opened when the worker starts and kept open while idle.
    var minConnections: Int {
        switch self {
        case .binary(let c): c.minConnections
        case .http2(let c): c.minConnections
        }
    }
}

/// How the worker reaches Apple for one app in one environment: the settings of its delivery
/// pool and of its feedback polling, made from the app's configuration when the worker is made,
/// with the credentials loaded.
struct PoolSettings: Sendable {
    var transport: DeliveryTransport
    /// The feedback service; `nil` when polling is off or the transport has none (HTTP/2
    /// answers 410 instead, §3.4).
    var feedback: APNSFeedbackClient.Configuration?
    var feedbackInterval: Duration
    /// HTTP/2: the environment's channel management API (§7.1), for channel jobs.
    var channelManager: APNSChannelManager? = nil

    /// The client certificate the pool presents to Apple; `nil` with a provider token.
    var certificate: APNSCredentials? {
        switch transport {
        case .binary(let configuration):
            return configuration.credentials
        case .http2(let configuration):
            guard case .certificate(let credentials) = configuration.authentication else { return nil }
            return credentials
        }
    }

    /// The settings of every configured (app, environment). Fails with a sentence naming the
    /// setting when a credential cannot be loaded.
    static func all(for configuration: WorkerConfiguration) throws(ConfigurationError) -> [PoolKey: PoolSettings] {
        var pools: [PoolKey: PoolSettings] = [:]
        for (name, app) in configuration.apps.sorted(by: { $0.key < $1.key }) {
            for (environment, settings) in app.environments.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                let pool = try PoolSettings(
                    app: app,
                    environment: settings,
                    maxPending: configuration.worker.maxInFlight
                )
                pools[PoolKey(app: name, environment: environment)] = pool
                if let broadcasts = pool.broadcastPool(at: settings) {
                    pools[PoolKey(app: name, environment: environment, broadcasts: true)] = broadcasts
                }
            }
        }
        return pools
    }

    /// HTTP/2, with a `broadcastGateway`: the settings of the pool of the environment's
    /// broadcasts, these with that gateway; no feedback, no channel management.
    func broadcastPool(at env: WorkerConfiguration.AppEnvironment) -> PoolSettings? {
        guard case .http2(var gateway) = transport, let endpoint = env.broadcastGateway else { return nil }
        gateway.host = endpoint.host
        gateway.port = endpoint.port
        gateway.proxy = env.proxy?.proxy(for: endpoint.host)
        return PoolSettings(transport: .http2(gateway), feedback: nil, feedbackInterval: .zero)
    }

    init(transport: DeliveryTransport, feedback: APNSFeedbackClient.Configuration?, feedbackInterval: Duration) {
        self.transport = transport
        self.feedback = feedback
        self.feedbackInterval = feedbackInterval
    }

    init(
        app: WorkerConfiguration.App,
        environment env: WorkerConfiguration.AppEnvironment,
        maxPending: Int
    ) throws(ConfigurationError) {
        let path = "apps.\(app.name).environments.\(env.name.rawValue)"
        let ca = env.ca.map { [CredentialSource.file($0)] }
        func certificate() throws(ConfigurationError) -> APNSCredentials {
            do throws(APNSError) {
                switch env.credentials {
                case .pem(let certificate, let key):
                    return try APNSCredentials(
                        certificate: certificate,
                        key: key,
                        passphrase: env.passphrase,
                        ca: ca,
                        environment: env.name
                    )
                case .pkcs12(let pfx):
                    return try APNSCredentials(pkcs12: pfx, passphrase: env.passphrase, ca: ca, environment: env.name)
                case .token:
                    throw APNSError(.invalidConfiguration, "token authentication needs transport http2")
                }
            } catch {
                throw ConfigurationError("\(path): \(error.message).")
            }
        }
        func validated(_ validate: () throws(APNSError) -> Void) throws(ConfigurationError) {
            do throws(APNSError) { try validate() } catch {
                throw ConfigurationError("apps.\(app.name): \(error.message).")
            }
        }
        let retryLimit = app.connectRetryLimit == 0 ? nil : app.connectRetryLimit
        let connection = app.connection
        feedback = nil
        feedbackInterval = app.feedbackInterval
        switch app.transport {
        case .binary:
            let credentials = try certificate()
            var gateway = APNSBinaryConfiguration(
                host: env.gateway.host,
                port: env.gateway.port,
                credentials: credentials
            )
            gateway.verifyServer = env.verifyServer
            gateway.proxy = env.proxy?.proxy(for: env.gateway.host)
            gateway.maxConnections = app.poolSize
            gateway.cacheMaxCount = app.cacheMaxCount
            gateway.cacheMaxBytes = app.cacheMaxBytes
            gateway.confirmationWindow = app.confirmationWindow
            gateway.resendOnUnknown = app.resendOnUnknown
            gateway.connectionRetryLimit = retryLimit
            gateway.maxPending = max(1, min(gateway.maxPending, maxPending))
            gateway.minConnections = connection.minConnections
            gateway.connectTimeout = connection.connectTimeout
            gateway.writeTimeout = connection.writeTimeout
            gateway.idleTimeout = connection.idleTimeout
            gateway.reconnectBaseDelay = connection.reconnectBaseDelay
            gateway.reconnectMaxDelay = connection.reconnectMaxDelay
            try validated(gateway.validate)
            transport = .binary(gateway)
            if app.feedbackInterval > .zero {
                var feedback = APNSFeedbackClient.Configuration(
                    host: env.feedback.host,
                    port: env.feedback.port,
                    credentials: credentials
                )
                feedback.verifyServer = env.verifyServer
                feedback.proxy = env.proxy?.proxy(for: env.feedback.host)
                self.feedback = feedback
            }
        case .http2:
            let authentication: APNSHTTP2Configuration.Authentication
            if case .token(let signingKey, let keyId, let teamId) = env.credentials {
                do {
                    let key = try APNSSigningKey(keyID: keyId, source: signingKey)
                    authentication = .token(try APNSTokenProvider(signingKey: key, teamID: teamId))
                } catch {
                    throw ConfigurationError("\(path): \(error.message).")
                }
            } else {
                authentication = .certificate(try certificate())
            }
            var gateway = APNSHTTP2Configuration(
                host: env.gateway.host,
                port: env.gateway.port,
                authentication: authentication,
                topic: app.bundleId
            )
            if case .token = authentication, let ca {
                do { try gateway.trust(ca) } catch { throw ConfigurationError("\(path).ca: \(error.message).") }
            }
            gateway.verifyServer = env.verifyServer
            gateway.proxy = env.proxy?.proxy(for: env.gateway.host)
            gateway.maxConnections = app.poolSize
            gateway.maxPending = max(1, min(gateway.maxPending, maxPending))
            gateway.connectionRetryLimit = retryLimit
            gateway.mdmTopic = app.mdmTopic
            gateway.minConnections = connection.minConnections
            gateway.connectTimeout = connection.connectTimeout
            gateway.idleTimeout = connection.idleTimeout
            gateway.reconnectBaseDelay = connection.reconnectBaseDelay
            gateway.reconnectMaxDelay = connection.reconnectMaxDelay
            gateway.defaultRetryLimit = connection.retryLimit
            gateway.retryBaseDelay = connection.retryBaseDelay
            gateway.retryMaxDelay = connection.retryMaxDelay
            try validated(gateway.validate)
            transport = .http2(gateway)
            var management = gateway
            management.host = env.channelManagement.host
            management.port = env.channelManagement.port
            management.proxy = env.proxy?.proxy(for: env.channelManagement.host)
            channelManager = APNSChannelManager(configuration: management, environment: env.name)
        }
    }
}
