import APNSBinary
import APNSCore
import PushKafka
import PushRedis

extension WorkerConfiguration {
    /// Resolves the configuration into what a ``Worker`` runs with: loads and checks every
    /// app's credentials. Fails with a sentence naming the setting.
    public func makeOptions() throws(ConfigurationError) -> WorkerOptions {
        var properties = kafka.properties
        properties["bootstrap.servers"] = kafka.bootstrapServers
        properties["client.id"] = properties["client.id"] ?? "apn-worker-\(worker.id)"
        let redisConfiguration = RedisConfiguration(
            host: redis.host, port: redis.port, username: redis.username, password: redis.password,
            database: redis.database, connectTimeout: .milliseconds(redis.connectTimeoutMs),
            commandTimeout: .milliseconds(redis.commandTimeoutMs))

        var apps: [String: AppOptions] = [:]
        for (name, app) in apps_sorted() {
            guard app.transport == .binary else {
                throw ConfigurationError("apps.\(name).transport: the worker delivers over the binary protocol only; set transport to binary")
            }
            var environments: [APNSEnvironment: EnvironmentOptions] = [:]
            for (envName, env) in app.environments {
                let environment: APNSEnvironment = envName == .production ? .production : .sandbox
                let path = "apps.\(name).environments.\(envName.rawValue)"
                let credentials: APNSCredentials
                do {
                    let ca = env.ca.map { [CredentialSource.file($0)] }
                    switch env.credentials {
                    case .pem(let certificate, let key):
                        credentials = try APNSCredentials(certificate: .file(certificate), key: .file(key),
                                                          passphrase: env.passphrase, ca: ca, environment: environment)
                    case .pkcs12(let pfx):
                        credentials = try APNSCredentials(pkcs12: .file(pfx), passphrase: env.passphrase, ca: ca, environment: environment)
                    }
                } catch {
                    throw ConfigurationError("\(path): \(error.message).")
                }
                var gateway = APNSBinaryConfiguration(host: env.gateway.host, port: env.gateway.port, credentials: credentials)
                gateway.verifyServer = env.verifyServer
                gateway.maxConnections = app.poolSize
                gateway.cacheMaxCount = app.cacheMaxCount
                gateway.cacheMaxBytes = app.cacheMaxBytes
                gateway.confirmationWindow = .milliseconds(app.confirmationWindowMs)
                gateway.resendOnUnknown = app.resendOnUnknown
                gateway.maxPending = max(1, min(gateway.maxPending, worker.maxInFlight))
                do {
                    try gateway.validate()
                } catch {
                    throw ConfigurationError("apps.\(name): \(error.message).")
                }
                var options = EnvironmentOptions(gateway: gateway)
                if app.feedbackIntervalSeconds > 0 {
                    var feedback = APNSFeedbackClient.Configuration(host: env.feedback.host, port: env.feedback.port, credentials: credentials)
                    feedback.verifyServer = env.verifyServer
                    options.feedback = feedback
                    options.feedbackInterval = .seconds(app.feedbackIntervalSeconds)
                }
                environments[environment] = options
            }
            var appOptions = AppOptions(defaultEnvironment: app.defaultEnvironment == .production ? .production : .sandbox,
                                        environments: environments)
            appOptions.appPerSecond = app.appPerSecond
            appOptions.devicePerHour = app.devicePerHour
            apps[name] = appOptions
        }

        var options = WorkerOptions(
            workerId: worker.id, kafka: KafkaConfiguration(properties), groupId: kafka.groupId,
            requestsTopic: kafka.requestsTopic, resultsTopic: kafka.resultsTopic, redis: redisConfiguration, apps: apps)
        options.batchSize = worker.batchSize
        options.maxInFlight = worker.maxInFlight
        options.resultFlushInterval = .milliseconds(worker.resultFlushMs)
        options.resultBatchSize = worker.resultBatchSize
        options.shutdownTimeout = .seconds(worker.shutdownTimeoutSeconds)
        options.dedupeTTLSeconds = worker.dedupeTTLSeconds
        return options
    }

    private func apps_sorted() -> [(String, App)] {
        apps.sorted { $0.key < $1.key }
    }
}
