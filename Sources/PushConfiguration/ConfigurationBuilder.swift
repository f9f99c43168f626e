import APNSCore
import Foundation
import PushRedis

/// Reads one tree, the config file with the environment and the flags laid over it
/// (``ConfigurationOverlay``), validates each value once and assembles the ``WorkerConfiguration``.
struct ConfigurationBuilder {
    /// The config file's tree with the environment and the flags laid over it.
    let root: ConfigSection
    private let filePath: String?
    let fileDirectory: String?
    let overrides: ConfigurationOverrides
    let environment: [String: String]
    var warnings: [String] = []
    /// The files holding secrets that the settings name, for ``checkSecretFiles(strict:)``.
    let secretFiles = SecretFileList()

    private static let environmentPrefix = "APN_WORKER_"
    static let kafkaPropertyPrefix = WorkerConfiguration.kafkaPropertyVariablePrefix

    /// Every `APN_WORKER_*` variable read, apart from the Kafka property prefix.
    private static let knownVariables = Set(ConfigurationSetting.allCases.map(\.variable))
        .union([WorkerConfiguration.configPathVariable])

    /// librdkafka properties that have settings of their own.
    static let reservedKafkaProperties: [String: String] = [
        "bootstrap.servers": ConfigurationSetting.kafkaBootstrapServers.withSources,
        "metadata.broker.list": ConfigurationSetting.kafkaBootstrapServers.withSources,
        "group.id": ConfigurationSetting.kafkaGroupId.withSources,
        "group.instance.id": ConfigurationSetting.kafkaGroupInstanceId.withSources,
    ]

    init(
        file: ConfigNode?,
        filePath: String?,
        overrides: ConfigurationOverrides,
        environment: [String: String]
    ) throws(ConfigurationError) {
        var entries: [ConfigEntry] = []
        if let filePath { entries = try ConfigSection.rootEntries(of: file, filePath: filePath) }
        root = ConfigSection(
            root: ConfigurationOverlay.apply(to: entries, overrides: overrides, environment: environment)
        )
        fileDirectory = filePath.map { URL(fileURLWithPath: $0).deletingLastPathComponent().path }
        self.filePath = filePath
        self.overrides = overrides
        self.environment = environment
    }

    mutating func build(hostname: String, pid: Int32) throws(ConfigurationError) -> WorkerConfiguration {
        try root.checkKnown(["worker", "kafka", "redis", "limits", "apps"])
        let worker = try buildWorker(hostname: hostname, pid: pid)
        let kafka = try buildKafka()
        let (redis, cluster, moreSeeds) = try buildRedis()
        if redis.tls?.verify == false {
            warnings.append(
                "redis.tlsVerify is false: the worker accepts any certificate from Redis, so an impostor on the "
                    + "network could read and change its data; use it only in tests."
            )
        }
        let limits = try buildLimits()
        let apps = try buildApps(limits: limits)
        try checkSecretFiles(strict: worker.strictFilePermissions)
        collectUnknownVariables()
        var configuration = WorkerConfiguration(
            worker: worker,
            kafka: kafka,
            redis: redis,
            limits: limits,
            apps: apps,
            configFile: filePath,
            warnings: warnings
        )
        configuration.redisCluster = cluster
        configuration.redisMoreSeeds = moreSeeds
        for (app, environment) in configuration.insecureEnvironments {
            configuration.warnings.append(WorkerConfiguration.insecureTLSWarning(app: app, environment: environment))
        }
        return configuration
    }

    // MARK: - worker

    private func buildWorker(hostname: String, pid: Int32) throws(ConfigurationError) -> WorkerConfiguration.Worker {
        typealias Worker = WorkerConfiguration.Worker
        let file = try root.section("worker")
        try file.checkKnown([
            "id", "batchSize", "batchWindowMs", "maxInFlight", "resultFlushMs", "resultBatchSize",
            "shutdownTimeoutSeconds",
            "logLevel", "logFormat", "dedupeTTLSeconds", "dedupeBuckets", "statusAddress", "invalidTokenTTLDays",
            "proxy", "maxStopsPerMessage", "strictFilePermissions", "moveAsideAfter",
        ])

        var worker = Worker(id: Worker.defaultId(hostname: hostname, pid: pid))
        if let value = file.value("id") {
            let id = try SettingParsing.string(value, allowEmpty: true)
            guard Worker.isValidId(id) else {
                throw ConfigurationError(
                    "\(value.label) must be 1 to 64 characters of letters, digits, '.', '_' and '-', "
                        + "not \(value.shown)."
                )
            }
            worker.id = id
        }
        try file.read("batchSize", .from(1, to: 100_000), into: &worker.batchSize)
        try file.read("batchWindowMs", .from(0, to: 10_000), .milliseconds(1), into: &worker.batchWindow)
        try file.read("maxInFlight", .from(1, to: 1_000_000), into: &worker.maxInFlight)
        try file.read("resultFlushMs", .from(1, to: 10_000), .milliseconds(1), into: &worker.resultFlushInterval)
        try file.read("resultBatchSize", .from(1, to: 100_000), into: &worker.resultBatchSize)
        try file.read("shutdownTimeoutSeconds", .from(1, to: 3_600), .seconds(1), into: &worker.shutdownTimeout)
        try file.read("logLevel", into: &worker.logLevel)
        try file.read("logFormat", into: &worker.logFormat)
        try file.read("dedupeTTLSeconds", .from(60, to: 31_536_000), .seconds(1), into: &worker.dedupeTTL)
        try file.read("dedupeBuckets", .from(1, to: 1 << 32), into: &worker.dedupeBuckets)
        try file.read("invalidTokenTTLDays", .from(1, to: 3_650), .seconds(86_400), into: &worker.invalidTokenTTL)
        try file.read("maxStopsPerMessage", .from(0, to: 100), into: &worker.maxStopsPerMessage)
        if worker.maxStopsPerMessage == 1, let value = file.value("maxStopsPerMessage") {
            throw ConfigurationError(
                "\(value.label) must be 0 (off) or 2 to 100, not 1: a single stop is what a worker killed for any "
                    + "reason looks like, so a message is skipped only after it stopped workers again while processed alone."
            )
        }
        try file.read("strictFilePermissions", into: &worker.strictFilePermissions)
        try file.read("moveAsideAfter", .from(1, to: 1_000_000), into: &worker.moveAsideAfter)
        if file.isNull("statusAddress") {
            worker.statusAddress = nil
        } else if let value = file.value("statusAddress") {
            let off = try SettingParsing.string(value).trimmingCharacters(in: .whitespaces).lowercased() == "off"
            worker.statusAddress =
                off ? nil : try SettingParsing.hostPort(value, defaultPort: 9400, allowPortZero: true)
        }
        return worker
    }

    // MARK: - kafka

    private func buildKafka() throws(ConfigurationError) -> WorkerConfiguration.Kafka {
        let file = try root.section("kafka")
        try file.checkKnown([
            "bootstrapServers", "groupId", "groupInstanceId", "requestsTopic", "requestsTopics", "resultsTopic",
            "parkedTopic", "properties", "propertyFiles",
        ])

        guard let serversValue = file.value("bootstrapServers") else {
            throw required(.kafkaBootstrapServers)
        }
        let servers = try SettingParsing.string(serversValue).trimmingCharacters(in: .whitespacesAndNewlines)

        var kafka = WorkerConfiguration.Kafka(bootstrapServers: servers)
        if let value = file.value("groupId") {
            kafka.groupId = try SettingParsing.string(value)
        }
        if let value = file.value("requestsTopic") {
            kafka.requestsTopic = try Self.topic(value)
        }
        if let value = file.value("resultsTopic") {
            kafka.resultsTopic = try Self.topic(value)
        }
        if let lanes = try requestsTopics(file, resultsTopic: kafka.resultsTopic) { kafka.requestsTopics = lanes }
        if let value = file.value("parkedTopic") {
            let topic = try Self.topic(value)
            guard topic != kafka.resultsTopic, !kafka.requestsTopics.contains(topic) else {
                throw ConfigurationError(
                    "\(value.label) is \"\(topic)\", a topic the worker already reads jobs from or writes results to: "
                        + "give the parked notifications a topic of their own, for example \"apn.requests.parked\"."
                )
            }
            kafka.parkedTopic = topic
        }
        if let value = file.value("groupInstanceId") {
            let id = try SettingParsing.string(value, allowEmpty: true)
            guard (1...249).contains(id.unicodeScalars.count),
                id.unicodeScalars.allSatisfy(WorkerConfiguration.Worker.isIdCharacter)
            else {
                throw ConfigurationError(
                    "\(value.label) must be 1 to 249 letters, digits, '.', '_' and '-' that name this replica "
                        + "for good (for example a StatefulSet pod name), not \(value.shown)."
                )
            }
            kafka.groupInstanceId = id
        }
        kafka.properties = try kafkaProperties(file: file)
        return kafka
    }

    /// A legal Kafka topic name: 1 to 249 characters of `A-Z a-z 0-9 . _ -`, not `.` or `..`.
    static func topic(_ value: SettingValue) throws(ConfigurationError) -> String {
        let name = try SettingParsing.string(value, allowEmpty: true)
        let legal =
            (1...249).contains(name.unicodeScalars.count) && name != "." && name != ".."
            && name.unicodeScalars.allSatisfy(WorkerConfiguration.Worker.isIdCharacter)
        guard legal else {
            throw ConfigurationError(
                "\(value.label) must be a Kafka topic name of 1 to 249 letters, digits, '.', '_' and '-', "
                    + "not \(value.shown)."
            )
        }
        return name
    }

    // MARK: - limits

    private func buildLimits() throws(ConfigurationError) -> WorkerConfiguration.Limits {
        let file = try root.section("limits")
        try file.checkKnown(["appPerSecond", "devicePerHour"])
        var limits = WorkerConfiguration.Limits()
        try file.read("appPerSecond", .unlimitedOrMore, into: &limits.appPerSecond)
        try file.read("devicePerHour", .unlimitedOrMore, into: &limits.devicePerHour)
        return limits
    }

    // MARK: - apps

    private func buildApps(
        limits: WorkerConfiguration.Limits
    ) throws(ConfigurationError) -> [String: WorkerConfiguration.App] {
        guard root.node("apps") != nil else {
            let rest = "apps cannot be set through environment variables or flags"
            if let filePath {
                throw ConfigurationError(
                    "apps is required: list at least one app under apps in the config file \(filePath) (\(rest))."
                )
            }
            throw ConfigurationError(
                "apps is required: give a config file that lists at least one app under apps with --config "
                    + "or \(WorkerConfiguration.configPathVariable) (\(rest))."
            )
        }
        let section = try root.section("apps")
        if section.entries.isEmpty {
            throw ConfigurationError("apps must list at least one app, keyed by the app name that jobs use.")
        }
        var apps: [String: WorkerConfiguration.App] = [:]
        for entry in section.entries {
            if entry.key.trimmingCharacters(in: .whitespaces).isEmpty {
                throw ConfigurationError("apps: an app name must not be empty.")
            }
            apps[entry.key] = try buildApp(name: entry.key, section: section.section(entry.key), limits: limits)
        }
        return apps
    }

    private func buildApp(
        name: String,
        section: ConfigSection,
        limits: WorkerConfiguration.Limits
    ) throws(ConfigurationError) -> WorkerConfiguration.App {
        typealias App = WorkerConfiguration.App
        try section.checkKnown(
            [
                "bundleId", "defaultEnvironment", "transport", "poolSize", "cacheMaxCount", "cacheMaxBytes",
                "confirmationWindowMs", "resendOnUnknown", "connectRetryLimit", "appPerSecond", "devicePerHour",
                "feedbackIntervalSeconds", "mdmTopic", "defaultExpiry", "staleAfter", "topics", "dryRun",
                "environmentFallback", "liveActivityHighPriorityPerHour",
            ] + Self.connectionKeys + ["environments"]
        )

        // The transport first: the environments' defaults depend on it.
        var transport = WorkerConfiguration.Transport.binary
        try section.read("transport", into: &transport)
        // Environments next: the default environment depends on them.
        let environmentsSection = try section.section("environments")
        let environmentNames = ["production", "sandbox"]
        try environmentsSection.checkKnown(environmentNames)
        var environments: [APNSEnvironment: WorkerConfiguration.AppEnvironment] = [:]
        for entry in environmentsSection.entries {
            guard let environmentName = APNSEnvironment(rawValue: entry.key) else { continue }
            environments[environmentName] = try buildEnvironment(
                environmentName,
                section: environmentsSection.section(entry.key),
                transport: transport
            )
        }
        if environments.isEmpty {
            throw ConfigurationError(
                "\(environmentsSection.path) must configure at least one of production and sandbox in the config file."
            )
        }

        let defaultEnvironment: APNSEnvironment
        if let value = section.value("defaultEnvironment") {
            defaultEnvironment = try SettingParsing.choice(value)
            if environments[defaultEnvironment] == nil {
                throw ConfigurationError(
                    "\(value.label) is \(defaultEnvironment.rawValue), but \(environmentsSection.path) "
                        + "has no \(defaultEnvironment.rawValue) entry; configure it or choose "
                        + "\(environments.keys.map(\.rawValue).sorted().joined(separator: " or "))."
                )
            }
        } else if environments.count == 1, let only = environments.keys.first {
            defaultEnvironment = only
        } else {
            defaultEnvironment = .production
        }

        var app = App(
            name: name,
            bundleId: name,
            defaultEnvironment: defaultEnvironment,
            transport: transport,
            environments: environments
        )
        if let value = section.value("bundleId") {
            app.bundleId = try SettingParsing.string(value).trimmingCharacters(in: .whitespaces)
        }
        if let value = section.value("mdmTopic") {
            let topic = try SettingParsing.string(value)
            guard !topic.contains(where: \.isWhitespace) else {
                throw ConfigurationError(
                    "\(value.label) must be the topic of the MDM push certificate (com.apple.mgmt.External.<UUID>), "
                        + "without white space, not \(value.shown)."
                )
            }
            app.mdmTopic = topic
        }
        if let value = section.value("defaultExpiry") { app.defaultExpiry = try Self.defaultExpiry(value) }
        if let value = section.value("staleAfter") { app.staleAfter = try Self.staleAfter(value) }
        try section.read("poolSize", .from(1, to: 64), into: &app.poolSize)
        try section.read("cacheMaxCount", .atLeast(1), into: &app.cacheMaxCount)
        try section.read("cacheMaxBytes", .atLeast(4096), into: &app.cacheMaxBytes)
        try section.read(
            "confirmationWindowMs",
            .from(1, to: 60_000),
            .milliseconds(1),
            into: &app.confirmationWindow
        )
        try section.read("resendOnUnknown", into: &app.resendOnUnknown)
        try section.read(
            "connectRetryLimit",
            IntegerRule(
                range: 0...1_000_000,
                wording: "0 (keep waiting for the gateway) or a whole number of failed connects from 1 to 1000000"
            ),
            into: &app.connectRetryLimit
        )
        app.appPerSecond = limits.appPerSecond
        try section.read("appPerSecond", .unlimitedOrMore, into: &app.appPerSecond)
        app.devicePerHour = limits.devicePerHour
        try section.read("devicePerHour", .unlimitedOrMore, into: &app.devicePerHour)
        try section.read(
            "liveActivityHighPriorityPerHour",
            IntegerRule(
                range: 0...100_000,
                wording: "0 (no budget: \"priority\": \"auto\" always sends 10) or a whole number from 1 to 100000"
            ),
            into: &app.liveActivityHighPriorityPerHour
        )
        try section.read(
            "feedbackIntervalSeconds",
            IntegerRule(
                range: 0...86_400,
                wording: "0 (no feedback polling) or a whole number from 1 to 86400"
            ),
            .seconds(1),
            into: &app.feedbackInterval
        )
        try readJobSettings(section, into: &app)
        try readConnection(section, into: &app)
        return app
    }

    // MARK: - Connection settings

    /// An app's connection settings (``WorkerConfiguration/App/Connection``).
    private static let connectionKeys = [
        "minConnections", "connectTimeoutMs", "writeTimeoutMs", "idleTimeoutMs", "reconnectBaseDelayMs",
        "reconnectMaxDelayMs",
        "retryLimit", "retryBaseDelayMs", "retryMaxDelayMs",
    ]

    /// Reads the connection settings, then checks that each lower bound is at most its upper bound.
    private func readConnection(
        _ section: ConfigSection,
        into app: inout WorkerConfiguration.App
    ) throws(ConfigurationError) {
        // The times in milliseconds; idleTimeoutMs also takes 0 (never close), below.
        let times: [(String, WritableKeyPath<WorkerConfiguration.App.Connection, Duration>)] = [
            ("connectTimeoutMs", \.connectTimeout), ("writeTimeoutMs", \.writeTimeout),
            ("reconnectBaseDelayMs", \.reconnectBaseDelay), ("reconnectMaxDelayMs", \.reconnectMaxDelay),
            ("retryBaseDelayMs", \.retryBaseDelay), ("retryMaxDelayMs", \.retryMaxDelay),
        ]
        for (key, path) in times {
            try section.read(key, .from(1, to: 3_600_000), .milliseconds(1), into: &app.connection[keyPath: path])
        }
        if let value = section.value("idleTimeoutMs") {
            let milliseconds = try SettingParsing.integer(
                value,
                IntegerRule(
                    range: 0...86_400_000,
                    wording: "0 (never close an idle connection) or a whole number from 1 to 86400000"
                )
            )
            app.connection.idleTimeout = milliseconds == 0 ? nil : .milliseconds(milliseconds)
        }
        try section.read("minConnections", .from(0, to: 64), into: &app.connection.minConnections)
        try section.read("retryLimit", .from(0, to: 1_000), into: &app.connection.retryLimit)
        let pairs: [(low: String, high: String, lowValue: Int, highValue: Int)] = [
            ("minConnections", "poolSize", app.connection.minConnections, app.poolSize),
            (
                "reconnectBaseDelayMs", "reconnectMaxDelayMs", Self.ms(app.connection.reconnectBaseDelay),
                Self.ms(app.connection.reconnectMaxDelay)
            ),
            (
                "retryBaseDelayMs", "retryMaxDelayMs", Self.ms(app.connection.retryBaseDelay),
                Self.ms(app.connection.retryMaxDelay)
            ),
        ]
        for pair in pairs where pair.lowValue > pair.highValue {
            throw ConfigurationError(
                "\(section.label(pair.low)) (\(pair.lowValue)) must not be more than \(pair.high) (\(pair.highValue)); "
                    + "lower \(pair.low) or raise \(pair.high)."
            )
        }
    }

    private static func ms(_ duration: Duration) -> Int { Int(duration.wholeMilliseconds) }

    private func buildEnvironment(
        _ name: APNSEnvironment,
        section: ConfigSection,
        transport: WorkerConfiguration.Transport
    ) throws(ConfigurationError) -> WorkerConfiguration.AppEnvironment {
        try section.checkKnown(
            Self.credentialKeys.flatMap { [$0.file, $0.inline, $0.variable] } + [
                "passphrase", "passphraseFile", "passphraseEnv", "ca", "verifyServer", "gateway", "feedback",
                "channelManagement", "broadcastGateway", "keyId",
                "teamId", "proxy",
            ]
        )

        let certificate = try credential(Self.certificateKeys, in: section)
        let key = try credential(Self.keyKeys, in: section)
        let pfx = try credential(Self.pfxKeys, in: section)
        let credentials: WorkerConfiguration.Credentials
        if let signingKey = try credential(Self.signingKeyKeys, in: section) {
            // §4: token authentication, HTTP/2 only.
            guard transport == .http2 else {
                throw ConfigurationError(
                    "\(section.label("signingKey")) needs transport http2: the binary protocol authenticates with a "
                        + "certificate only; set the app's transport to http2 or use certificate and key."
                )
            }
            guard certificate == nil, key == nil, pfx == nil else {
                throw ConfigurationError(
                    "\(section.label("signingKey")) cannot be used together with certificate, key or pfx; "
                        + "choose token or certificate authentication."
                )
            }
            guard let keyId = section.value("keyId") else {
                throw ConfigurationError(
                    "\(section.label("keyId")) is required with signingKey: set it to the key's 10-character key ID."
                )
            }
            guard let teamId = section.value("teamId") else {
                throw ConfigurationError(
                    "\(section.label("teamId")) is required with signingKey: set it to your 10-character team ID."
                )
            }
            let keyIdText = try SettingParsing.string(keyId)
            let teamIdText = try SettingParsing.string(teamId)
            for (label, text) in [(keyId.label, keyIdText), (teamId.label, teamIdText)]
            where text.count != 10 || !text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) {
                throw ConfigurationError("\(label) must be 10 letters or digits, not \"\(text)\".")
            }
            credentials = .token(signingKey: signingKey, keyId: keyIdText, teamId: teamIdText)
        } else if let keyId = section.value("keyId") ?? section.value("teamId") {
            throw ConfigurationError(
                "\(keyId.label) is only used with signingKey; set signingKey to the .p8 key file (or signingKeyPem or "
                    + "signingKeyPemEnv)."
            )
        } else {
            switch (certificate, key, pfx) {
            case (let certificate?, let key?, nil):
                credentials = .pem(certificate: certificate, key: key)
            case (nil, nil, let pfx?):
                credentials = .pkcs12(pfx)
            case (_, _, .some):
                throw ConfigurationError(
                    "\(section.label("pfx")) cannot be used together with certificate and key; "
                        + "set either pfx or certificate and key."
                )
            case (.some, nil, nil):
                throw ConfigurationError(
                    "\(section.label("key")) is required with certificate: set it in the config file to the "
                        + "PEM private key file (or give the key with keyPem or keyPemEnv)."
                )
            case (nil, .some, nil):
                throw ConfigurationError(
                    "\(section.label("certificate")) is required with key: set it in the config file to the "
                        + "PEM certificate file (or give the certificate with certificatePem or certificatePemEnv)."
                )
            case (nil, nil, nil):
                throw ConfigurationError(
                    "\(section.path) needs credentials: set certificate and key (PEM files) or pfx "
                        + "(a PKCS#12 file)" + (transport == .http2 ? ", or signingKey, keyId and teamId," : "")
                        + " in the config file (each can also be given inline or from an environment variable; "
                        + "see docs/configuration.md)."
                )
            }
        }

        var passphrase: String?
        switch try Self.oneOf(["passphrase", "passphraseFile", "passphraseEnv"], in: section, what: "the passphrase") {
        case ("passphrase", let value)?:
            passphrase = try SettingParsing.string(value, allowEmpty: true)
        case ("passphraseFile", let value)?:
            passphrase = try secretText(value, what: "the passphrase")
        case (_, let value)?:
            passphrase = String(decoding: try variable(value).value, as: UTF8.self)
        case nil:
            passphrase = nil
        }

        var environment = WorkerConfiguration.AppEnvironment(
            name: name,
            credentials: credentials,
            passphrase: passphrase
        )
        if let value = section.value("ca") {
            environment.ca = try readableFile(value)
        }
        try section.read("verifyServer", into: &environment.verifyServer)
        if transport == .http2 { environment.gateway = name.defaultHTTP2Gateway }
        if let value = section.value("gateway") {
            let defaultPort = transport == .http2 ? name.defaultHTTP2Gateway.port : name.defaultGateway.port
            environment.gateway = try SettingParsing.hostPort(value, defaultPort: defaultPort)
        }
        if let value = section.value("feedback") {
            environment.feedback = try SettingParsing.hostPort(value, defaultPort: name.defaultFeedback.port)
        }
        if let value = section.value("channelManagement") {
            let port = name.defaultChannelManagement.port
            environment.channelManagement = try SettingParsing.hostPort(value, defaultPort: port)
        }
        if let value = section.value("broadcastGateway") {
            // §7.3: broadcasts are HTTP/2 requests; the binary interface has none.
            guard transport == .http2 else {
                throw ConfigurationError(
                    "\(section.path).broadcastGateway: broadcasts need transport http2; remove broadcastGateway or set the app's transport to http2."
                )
            }
            let gateway = try SettingParsing.hostPort(value, defaultPort: name.defaultHTTP2Gateway.port)
            // The same endpoint as the gateway's is no gateway of its own.
            environment.broadcastGateway = gateway == environment.gateway ? nil : gateway
        }
        environment.proxy = try proxyRoute(environment: section)
        return environment
    }

    // MARK: - Messages

    func required(_ setting: ConfigurationSetting) -> ConfigurationError {
        ConfigurationError("\(setting.path) is required: set it in \(setting.sourcesInWords).")
    }

    /// Warns about `APN_WORKER_*` variables that are not settings (most likely misspelt) and
    /// that no credential setting (`…Env`) names.
    private mutating func collectUnknownVariables() {
        let named = credentialVariables()
        for name in environment.keys.sorted()
        where name.hasPrefix(Self.environmentPrefix) && !name.hasPrefix(Self.kafkaPropertyPrefix)
            && !Self.knownVariables.contains(name) && !named.contains(name)
        {
            warnings.append("\(name) is not a setting of apn-worker run; it was ignored.")
        }
    }
}
