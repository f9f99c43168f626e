import APNSBinary
import APNSCore
import APNSHTTP2
import APNSHTTP2Core
import PushKafka
import PushRedis
import PushWorker

extension WorkerConfiguration {
    /// Resolves the configuration into what a ``Worker`` runs with: loads and checks every
    /// app's credentials. Fails with a sentence naming the setting.
    public func makeOptions() throws(ConfigurationError) -> WorkerOptions {
        var properties = kafka.properties
        properties["bootstrap.servers"] = kafka.bootstrapServers
        properties["client.id"] = properties["client.id"] ?? "apn-worker-\(worker.id)"

        var apps: [String: AppOptions] = [:]
        for (name, app) in self.apps.sorted(by: { $0.key < $1.key }) {
            var environments: [APNSEnvironment: EnvironmentOptions] = [:]
            for (envName, env) in app.environments {
                let environment: APNSEnvironment = envName == .production ? .production : .sandbox
                let path = "apps.\(name).environments.\(envName.rawValue)"
                let ca = env.ca.map { [CredentialSource.file($0)] }
                func certificate() throws(ConfigurationError) -> APNSCredentials {
                    do throws(APNSError) {
                        switch env.credentials {
                        case .pem(let certificate, let key):
                            return try APNSCredentials(
                                certificate: .file(certificate), key: .file(key),
                                passphrase: env.passphrase, ca: ca, environment: environment)
                        case .pkcs12(let pfx):
                            return try APNSCredentials(pkcs12: .file(pfx), passphrase: env.passphrase, ca: ca, environment: environment)
                        case .token:
                            throw APNSError(.invalidConfiguration, "token authentication needs transport http2")
                        }
                    } catch {
                        throw ConfigurationError("\(path): \(error.message).")
                    }
                }
                var options: EnvironmentOptions
                switch app.transport {
                case .binary:
                    let credentials = try certificate()
                    var gateway = APNSBinaryConfiguration(host: env.gateway.host, port: env.gateway.port, credentials: credentials)
                    gateway.verifyServer = env.verifyServer
                    gateway.maxConnections = app.poolSize
                    gateway.cacheMaxCount = app.cacheMaxCount
                    gateway.cacheMaxBytes = app.cacheMaxBytes
                    gateway.confirmationWindow = app.confirmationWindow
                    gateway.resendOnUnknown = app.resendOnUnknown
                    gateway.connectionRetryLimit = app.connectRetryLimit == 0 ? nil : app.connectRetryLimit
                    gateway.maxPending = max(1, min(gateway.maxPending, worker.maxInFlight))
                    do {
                        try gateway.validate()
                    } catch {
                        throw ConfigurationError("apps.\(name): \(error.message).")
                    }
                    options = EnvironmentOptions(transport: .binary(gateway))
                    if app.feedbackInterval > .zero {
                        var feedback = APNSFeedbackClient.Configuration(
                            host: env.feedback.host, port: env.feedback.port, credentials: credentials)
                        feedback.verifyServer = env.verifyServer
                        options.feedback = feedback
                        options.feedbackInterval = app.feedbackInterval
                    }
                case .http2:
                    let authentication: APNSHTTP2Configuration.Authentication
                    if case .token(let signingKey, let keyId, let teamId) = env.credentials {
                        do {
                            let key = try APNSSigningKey(keyID: keyId, file: signingKey)
                            authentication = .token(try APNSTokenProvider(signingKey: key, teamID: teamId))
                        } catch {
                            throw ConfigurationError("\(path): \(error.message).")
                        }
                    } else {
                        authentication = .certificate(try certificate())
                    }
                    var gateway = APNSHTTP2Configuration(
                        host: env.gateway.host, port: env.gateway.port, authentication: authentication, topic: app.bundleId)
                    if case .token = authentication, let ca {
                        do {
                            try gateway.trust(ca)
                        } catch {
                            throw ConfigurationError("\(path).ca: \(error.message).")
                        }
                    }
                    gateway.verifyServer = env.verifyServer
                    gateway.maxConnections = app.poolSize
                    gateway.maxPending = max(1, min(gateway.maxPending, worker.maxInFlight))
                    gateway.connectionRetryLimit = app.connectRetryLimit == 0 ? nil : app.connectRetryLimit
                    do {
                        try gateway.validate()
                    } catch {
                        throw ConfigurationError("apps.\(name): \(error.message).")
                    }
                    // HTTP/2 has no feedback service: 410 answers carry the same news (§3.4).
                    options = EnvironmentOptions(transport: .http2(gateway))
                }
                environments[environment] = options
            }
            var appOptions = AppOptions(
                defaultEnvironment: app.defaultEnvironment == .production ? .production : .sandbox,
                environments: environments)
            appOptions.appPerSecond = app.appPerSecond
            appOptions.devicePerHour = app.devicePerHour
            apps[name] = appOptions
        }

        var options = WorkerOptions(
            workerId: worker.id, kafka: KafkaConfiguration(properties), groupId: kafka.groupId,
            requestsTopic: kafka.requestsTopic, resultsTopic: kafka.resultsTopic, redis: redis, apps: apps)
        options.groupInstanceId = kafka.groupInstanceId
        options.batchSize = worker.batchSize
        options.batchWindow = worker.batchWindow
        options.maxInFlight = worker.maxInFlight
        options.resultFlushInterval = worker.resultFlushInterval
        options.resultBatchSize = worker.resultBatchSize
        options.shutdownTimeout = worker.shutdownTimeout
        options.dedupeTTLSeconds = Int(worker.dedupeTTL.components.seconds)
        return options
    }
}
