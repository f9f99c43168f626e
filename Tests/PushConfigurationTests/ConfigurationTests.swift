import Foundation
import PushConfiguration
import PushRedis
import Testing

/// A temporary directory holding credential files and config files; removed on deinit.
private final class Fixture {
    let directory: String

    init() throws {
        directory =
            FileManager.default.temporaryDirectory
            .appendingPathComponent("apn-worker-config-tests-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for name in ["cert.pem", "key.pem", "app.p12", "ca.pem", "sandbox-cert.pem", "sandbox-key.pem"] {
            write(name, "-----BEGIN PLACEHOLDER-----\n")
        }
        write("passphrase.txt", "s3cret pass\n")
    }

    deinit {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Writes `contents` to `name` in the directory, readable by its owner only (as files
    /// holding secrets should be), and returns its absolute path.
    @discardableResult
    func write(_ name: String, _ contents: String) -> String {
        let path = self.path(name)
        _ = FileManager.default.createFile(
            atPath: path,
            contents: Data(contents.utf8),
            attributes: [.posixPermissions: 0o600]
        )
        return path
    }

    func path(_ name: String) -> String { "\(directory)/\(name)" }

    /// A minimal valid YAML config with one production app, plus `extra` lines appended.
    func minimalYAML(app: String = "", extra: String = "") -> String {
        """
        kafka:
          bootstrapServers: "127.0.0.1:9092"
        redis:
          url: "redis://127.0.0.1:6379/0"
        apps:
          com.example.app:
            environments:
              production:
                certificate: \(path("cert.pem"))
                key: \(path("key.pem"))
        \(app)
        \(extra)
        """
    }
}

/// The message of the error `body` throws, or `nil` when it succeeds.
private func errorMessage(_ body: () throws(ConfigurationError) -> WorkerConfiguration) -> String? {
    do {
        _ = try body()
        return nil
    } catch {
        return error.message
    }
}

private func parse(
    _ text: String,
    path: String = "/tmp/config.yaml",
    overrides: ConfigurationOverrides = .init(),
    environment: [String: String] = [:]
) throws(ConfigurationError) -> WorkerConfiguration {
    try WorkerConfiguration.parse(
        fileContents: text,
        path: path,
        overrides: overrides,
        environment: environment,
        hostname: "host",
        pid: 42
    )
}

private func parseError(
    _ text: String,
    path: String = "/tmp/config.yaml",
    overrides: ConfigurationOverrides = .init(),
    environment: [String: String] = [:]
) -> String? {
    errorMessage { () throws(ConfigurationError) in
        try parse(text, path: path, overrides: overrides, environment: environment)
    }
}

// MARK: - Whole files

@Test func fullYAMLFile() throws {
    let fixture = try Fixture()
    let yaml = """
        worker:
          id: worker-a
          batchSize: 250
          batchWindowMs: 0
          maxInFlight: 10000
          resultFlushMs: 15
          resultBatchSize: 1000
          shutdownTimeoutSeconds: 45
          logLevel: debug
          logFormat: text
          dedupeTTLSeconds: 3600
          dedupeBuckets: 1048576
          statusAddress: null
        kafka:
          bootstrapServers: "k1:9092,k2:9092"
          groupId: my-group
          requestsTopic: push.requests
          resultsTopic: push.results
          properties:
            security.protocol: SSL
            linger.ms: 5
            enable.idempotence: true
        redis:
          url: "redis://user:pa%40ss@redis.local:6380/2"
          password: null
          tls: false
          connectTimeoutMs: 1500
          commandTimeoutMs: 4000
        limits:
          appPerSecond: 100
          devicePerHour: 20
        apps:
          com.example.app:
            bundleId: com.example.bundle
            defaultEnvironment: sandbox
            transport: http2
            poolSize: 8
            cacheMaxCount: 1000
            cacheMaxBytes: 8192
            confirmationWindowMs: 500
            resendOnUnknown: false
            appPerSecond: 7
            devicePerHour: null
            feedbackIntervalSeconds: 0
            environments:
              production:
                certificate: cert.pem
                key: key.pem
                pfx: null
                passphrase: hunter2
                passphraseFile: null
                ca: ca.pem
                verifyServer: false
                gateway: gw.example.com:3000
                feedback: fb.example.com:3001
              sandbox:
                pfx: app.p12
                passphraseFile: passphrase.txt
          other:
            environments:
              sandbox:
                certificate: sandbox-cert.pem
                key: sandbox-key.pem
        """
    let path = fixture.write("apn-worker.yaml", yaml)
    let config = try WorkerConfiguration.load(
        overrides: ConfigurationOverrides(configPath: path),
        environment: [:],
        hostname: "host",
        pid: 1
    )

    #expect(config.configFile == path)
    // The file's verifyServer: false is the one warning.
    #expect(
        config.warnings == [WorkerConfiguration.insecureTLSWarning(app: "com.example.app", environment: .production)]
    )
    #expect(
        config.worker
            == WorkerConfiguration.Worker(
                id: "worker-a",
                batchSize: 250,
                batchWindow: .zero,
                maxInFlight: 10000,
                resultFlushInterval: .milliseconds(15),
                resultBatchSize: 1000,
                shutdownTimeout: .seconds(45),
                logLevel: .debug,
                logFormat: .text,
                dedupeTTL: .seconds(3600),
                statusAddress: nil
            ).with(dedupeBuckets: 1_048_576)
    )
    #expect(config.kafka.bootstrapServers == "k1:9092,k2:9092")
    #expect(config.kafka.groupId == "my-group")
    #expect(config.kafka.requestsTopic == "push.requests")
    #expect(config.kafka.resultsTopic == "push.results")
    #expect(config.kafka.properties == ["security.protocol": "SSL", "linger.ms": "5", "enable.idempotence": "true"])

    #expect(config.redis.host == "redis.local")
    #expect(config.redis.port == 6380)
    #expect(config.redis.database == 2)
    #expect(config.redis.username == "user")
    #expect(config.redis.password == "pa@ss")
    #expect(config.redis.connectTimeout == .milliseconds(1500))
    #expect(config.redis.commandTimeout == .milliseconds(4000))
    #expect(config.redis.description == "redis://user:***@redis.local:6380/2")

    #expect(config.limits == WorkerConfiguration.Limits(appPerSecond: 100, devicePerHour: 20))

    let app = try #require(config.apps["com.example.app"])
    #expect(app.name == "com.example.app")
    #expect(app.bundleId == "com.example.bundle")
    #expect(app.defaultEnvironment == .sandbox)
    #expect(app.transport == .http2)
    #expect(app.poolSize == 8)
    #expect(app.cacheMaxCount == 1000)
    #expect(app.cacheMaxBytes == 8192)
    #expect(app.confirmationWindow == .milliseconds(500))
    #expect(app.resendOnUnknown == false)
    #expect(app.appPerSecond == 7)
    #expect(app.devicePerHour == 20)  // null: falls back to limits.devicePerHour
    #expect(app.feedbackInterval == .zero)

    let production = try #require(app.environments[.production])
    #expect(
        production.credentials
            == .pem(certificate: .file(fixture.path("cert.pem")), key: .file(fixture.path("key.pem")))
    )
    #expect(production.certificate == fixture.path("cert.pem"))
    #expect(production.pfx == nil)
    #expect(production.passphrase == "hunter2")
    #expect(production.ca == fixture.path("ca.pem"))
    #expect(production.verifyServer == false)
    #expect(production.gateway == .init(host: "gw.example.com", port: 3000))
    #expect(production.feedback == .init(host: "fb.example.com", port: 3001))

    let sandbox = try #require(app.environments[.sandbox])
    #expect(sandbox.credentials == .pkcs12(.file(fixture.path("app.p12"))))
    #expect(sandbox.passphrase == "s3cret pass")
    #expect(sandbox.verifyServer)
    #expect(sandbox.ca == nil)
    #expect(app.defaultEnvironmentSettings == sandbox)

    let other = try #require(config.apps["other"])
    #expect(other.bundleId == "other")
    #expect(other.defaultEnvironment == .sandbox)
    #expect(other.appPerSecond == 100)
    #expect(Array(other.environments.keys) == [.sandbox])
}

@Test func jsonFile() throws {
    let fixture = try Fixture()
    let json = """
        {
          "worker": {"id": "json-worker", "batchSize": 10, "logLevel": "warning"},
          "kafka": {
            "bootstrapServers": "k:9092",
            "properties": {"linger.ms": 5, "enable.idempotence": false, "ratio": 0.5, "client.id": "x"}
          },
          "redis": {"url": "redis://[::1]:6379", "password": "p\\u00e4ss"},
          "limits": {"appPerSecond": 3},
          "apps": {
            "app": {
              "poolSize": 2,
              "environments": {
                "production": {"certificate": "cert.pem", "key": "key.pem"},
                "sandbox": {"pfx": "\(fixture.path("app.p12"))", "passphrase": "1234"}
              }
            }
          }
        }
        """
    let path = fixture.write("config.json", json)
    let config = try WorkerConfiguration.load(
        overrides: ConfigurationOverrides(configPath: path),
        environment: [:],
        hostname: "h",
        pid: 2
    )
    #expect(config.worker.id == "json-worker")
    #expect(config.worker.batchSize == 10)
    #expect(config.worker.logLevel == .warning)
    #expect(
        config.kafka.properties == [
            "linger.ms": "5", "enable.idempotence": "false", "ratio": "0.5", "client.id": "x",
        ]
    )
    #expect(config.redis.host == "::1")
    #expect(config.redis.endpoint == "[::1]:6379")
    #expect(config.redis.password == "päss")
    let app = try #require(config.apps["app"])
    #expect(app.poolSize == 2)
    #expect(app.appPerSecond == 3)
    #expect(app.defaultEnvironment == .production)
    #expect(app.environments[.production]?.key == fixture.path("key.pem"))
    #expect(app.environments[.sandbox]?.pfx == fixture.path("app.p12"))
    #expect(app.environments[.sandbox]?.passphrase == "1234")
}

@Test func fileWithoutKnownExtensionIsTriedAsJSONThenYAML() throws {
    let fixture = try Fixture()
    let yamlPath = fixture.write("worker.conf", fixture.minimalYAML())
    let fromYAML = try WorkerConfiguration.load(
        overrides: ConfigurationOverrides(configPath: yamlPath),
        environment: [:],
        hostname: "h",
        pid: 1
    )
    #expect(fromYAML.apps.keys.sorted() == ["com.example.app"])

    let json = """
        {"kafka": {"bootstrapServers": "k:9092"}, "redis": {"url": "redis://r"},
         "apps": {"a": {"environments": {"sandbox": {"pfx": "app.p12"}}}}}
        """
    let jsonPath = fixture.write("worker.cfg", json)
    let fromJSON = try WorkerConfiguration.load(
        overrides: ConfigurationOverrides(configPath: jsonPath),
        environment: [:],
        hostname: "h",
        pid: 1
    )
    #expect(fromJSON.apps["a"]?.defaultEnvironment == .sandbox)

    // Text that starts like JSON reports the JSON error.
    let broken = fixture.write("broken.cfg", "{\n  \"kafka\": {\n    \"bootstrapServers\" \"k\"\n  }\n}\n")
    let message = errorMessage { () throws(ConfigurationError) in
        try WorkerConfiguration.load(overrides: ConfigurationOverrides(configPath: broken), environment: [:])
    }
    #expect(message == "config file \(broken): line 3, column 24: expected ':' after an object member name.")
}

@Test func defaultsAreFilledIn() throws {
    let fixture = try Fixture()
    let config = try parse(fixture.minimalYAML())
    #expect(config.worker == WorkerConfiguration.Worker(id: "host-42"))
    #expect(config.worker.batchSize == 500)
    #expect(config.worker.batchWindow == .milliseconds(10))
    #expect(config.worker.maxInFlight == 20000)
    #expect(config.worker.resultFlushInterval == .milliseconds(20))
    #expect(config.worker.resultBatchSize == 2000)
    #expect(config.worker.shutdownTimeout == .seconds(30))
    #expect(config.worker.logLevel == .info)
    #expect(config.worker.logFormat == .json)
    #expect(config.worker.dedupeTTL == .seconds(86400))
    #expect(config.worker.dedupeBuckets == 65_536)
    #expect(config.worker.statusAddress == .init(host: "0.0.0.0", port: 9400))
    #expect(config.kafka.groupId == "apn-worker")
    #expect(config.kafka.requestsTopic == "apn.requests")
    #expect(config.kafka.resultsTopic == "apn.results")
    #expect(config.kafka.properties.isEmpty)
    #expect(config.redis.port == 6379)
    #expect(config.redis.database == 0)
    #expect(config.redis.password == nil)
    #expect(config.redis.connectTimeout == .milliseconds(2000))
    #expect(config.redis.commandTimeout == .milliseconds(5000))
    #expect(config.limits == WorkerConfiguration.Limits(appPerSecond: 0, devicePerHour: 0))

    let app = try #require(config.apps["com.example.app"])
    #expect(app.bundleId == "com.example.app")
    #expect(app.defaultEnvironment == .production)
    #expect(app.transport == .binary)
    #expect(app.poolSize == 4)
    #expect(app.cacheMaxCount == 50000)
    #expect(app.cacheMaxBytes == 33_554_432)
    #expect(app.confirmationWindow == .milliseconds(1000))
    #expect(app.resendOnUnknown)
    #expect(app.appPerSecond == 0)
    #expect(app.devicePerHour == 0)
    #expect(app.feedbackInterval == .seconds(300))
    let production = try #require(app.environments[.production])
    #expect(production.passphrase == nil)
    #expect(production.ca == nil)
    #expect(production.verifyServer)
}

@Test func defaultWorkerIdIsSanitisedAndBounded() throws {
    #expect(WorkerConfiguration.Worker.defaultId(hostname: "web-1.example.com", pid: 7) == "web-1.example.com-7")
    #expect(WorkerConfiguration.Worker.defaultId(hostname: "bad host!", pid: 7) == "bad-host--7")
    #expect(WorkerConfiguration.Worker.defaultId(hostname: "", pid: 7) == "apn-worker-7")
    let long = WorkerConfiguration.Worker.defaultId(hostname: String(repeating: "h", count: 100), pid: 123456)
    #expect(long.count == 64)
    #expect(long.hasSuffix("-123456"))
    #expect(WorkerConfiguration.Worker.isValidId(long))
}

// MARK: - Precedence

@Test func environmentOverridesFile() throws {
    let fixture = try Fixture()
    let yaml = fixture.minimalYAML(
        extra: """
            worker:
              id: from-file
              batchSize: 100
              logLevel: error
            limits:
              appPerSecond: 5
            """
    )
    let environment = [
        "APN_WORKER_ID": "from-env",
        "APN_WORKER_BATCH_SIZE": "200",
        "APN_WORKER_MAX_IN_FLIGHT": "300",
        "APN_WORKER_LOG_LEVEL": "TRACE",
        "APN_WORKER_LOG_FORMAT": "text",
        "APN_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "60",
        "APN_WORKER_DEDUPE_TTL_SECONDS": "600",
        "APN_WORKER_KAFKA_BOOTSTRAP_SERVERS": "env:9092",
        "APN_WORKER_KAFKA_GROUP_ID": "env-group",
        "APN_WORKER_KAFKA_REQUESTS_TOPIC": "env.requests",
        "APN_WORKER_KAFKA_RESULTS_TOPIC": "env.results",
        "APN_WORKER_REDIS_URL": "redis://:urlpass@env-redis:7000/3",
        "APN_WORKER_REDIS_PASSWORD": "env-pass",
        "APN_WORKER_LIMITS_APP_PER_SECOND": "50",
        "APN_WORKER_LIMITS_DEVICE_PER_HOUR": "9",
        "APN_WORKER_BATCHSIZE": "1",  // misspelt: a warning, not a setting
        "APN_WORKER_EMPTY_IS_UNSET": "",
        "PATH": "/usr/bin",
    ]
    let config = try parse(yaml, environment: environment)
    #expect(
        config.worker
            == WorkerConfiguration.Worker(
                id: "from-env",
                batchSize: 200,
                maxInFlight: 300,
                shutdownTimeout: .seconds(60),
                logLevel: .trace,
                logFormat: .text,
                dedupeTTL: .seconds(600)
            )
    )
    #expect(config.kafka.bootstrapServers == "env:9092")
    #expect(config.kafka.groupId == "env-group")
    #expect(config.kafka.requestsTopic == "env.requests")
    #expect(config.kafka.resultsTopic == "env.results")
    #expect(config.redis.host == "env-redis")
    #expect(config.redis.port == 7000)
    #expect(config.redis.database == 3)
    #expect(config.redis.password == "env-pass")
    #expect(config.limits == WorkerConfiguration.Limits(appPerSecond: 50, devicePerHour: 9))
    #expect(config.apps["com.example.app"]?.appPerSecond == 50)
    #expect(config.apps["com.example.app"]?.devicePerHour == 9)
    #expect(
        config.warnings == [
            "APN_WORKER_BATCHSIZE is not a setting of apn-worker run; it was ignored.",
            "APN_WORKER_EMPTY_IS_UNSET is not a setting of apn-worker run; it was ignored.",
        ]
    )

    // An empty variable counts as unset.
    let unset = try parse(yaml, environment: ["APN_WORKER_BATCH_SIZE": ""])
    #expect(unset.worker.batchSize == 100)
}

@Test func flagsOverrideEnvironment() throws {
    let fixture = try Fixture()
    let environment = [
        "APN_WORKER_ID": "from-env",
        "APN_WORKER_BATCH_SIZE": "200",
        "APN_WORKER_MAX_IN_FLIGHT": "300",
        "APN_WORKER_LOG_LEVEL": "error",
        "APN_WORKER_LOG_FORMAT": "json",
        "APN_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "60",
        "APN_WORKER_KAFKA_BOOTSTRAP_SERVERS": "env:9092",
        "APN_WORKER_KAFKA_GROUP_ID": "env-group",
        "APN_WORKER_KAFKA_REQUESTS_TOPIC": "env.requests",
        "APN_WORKER_KAFKA_RESULTS_TOPIC": "env.results",
        "APN_WORKER_REDIS_URL": "redis://env-redis",
        "APN_WORKER_REDIS_PASSWORD": "env-pass",
    ]
    let overrides = ConfigurationOverrides([
        .workerId: "from-flag",
        .kafkaBootstrapServers: "flag:9092",
        .kafkaGroupId: "flag-group",
        .kafkaRequestsTopic: "flag.requests",
        .kafkaResultsTopic: "flag.results",
        .redisURL: "redis://flag-redis:6390",
        .redisPassword: "flag-pass",
        .batchSize: "7",
        .maxInFlight: "8",
        .logLevel: "notice",
        .logFormat: "text",
        .shutdownTimeoutSeconds: "9",
    ])
    let config = try parse(fixture.minimalYAML(), overrides: overrides, environment: environment)
    #expect(config.worker.id == "from-flag")
    #expect(config.worker.batchSize == 7)
    #expect(config.worker.maxInFlight == 8)
    #expect(config.worker.logLevel == .notice)
    #expect(config.worker.logFormat == .text)
    #expect(config.worker.shutdownTimeout == .seconds(9))
    #expect(config.kafka.bootstrapServers == "flag:9092")
    #expect(config.kafka.groupId == "flag-group")
    #expect(config.kafka.requestsTopic == "flag.requests")
    #expect(config.kafka.resultsTopic == "flag.results")
    #expect(config.redis.host == "flag-redis")
    #expect(config.redis.port == 6390)
    #expect(config.redis.password == "flag-pass")
}

@Test func configPathFlagWinsOverEnvironment() throws {
    let fixture = try Fixture()
    let fromFlag = fixture.write("flag.yaml", fixture.minimalYAML(extra: "worker:\n  id: flag-file"))
    let fromEnv = fixture.write("env.yaml", fixture.minimalYAML(extra: "worker:\n  id: env-file"))
    let environment = ["APN_WORKER_CONFIG": fromEnv]
    let viaEnv = try WorkerConfiguration.load(environment: environment)
    #expect(viaEnv.worker.id == "env-file")
    #expect(viaEnv.configFile == fromEnv)
    let viaFlag = try WorkerConfiguration.load(
        overrides: ConfigurationOverrides(configPath: fromFlag),
        environment: environment
    )
    #expect(viaFlag.worker.id == "flag-file")

    let missing = fixture.path("missing.yaml")
    #expect(
        errorMessage { () throws(ConfigurationError) in
            try WorkerConfiguration.load(environment: ["APN_WORKER_CONFIG": missing])
        } == "APN_WORKER_CONFIG: cannot read \(missing); check that the file exists and is readable."
    )
    #expect(
        errorMessage { () throws(ConfigurationError) in
            try WorkerConfiguration.load(
                overrides: ConfigurationOverrides(configPath: fixture.directory),
                environment: [:]
            )
        } == "--config: \(fixture.directory) is a directory; name the config file in it."
    )
}

@Test func kafkaPropertiesMergeFileEnvironmentAndFlags() throws {
    let fixture = try Fixture()
    let yaml = fixture.minimalYAML(
        extra: """
            kafka:
              bootstrapServers: "127.0.0.1:9092"
              properties:
                security.protocol: PLAINTEXT
                linger.ms: 10
                compression.type: lz4
                enable.auto.commit: no
            """
    ).replacingOccurrences(of: "kafka:\n  bootstrapServers: \"127.0.0.1:9092\"\nredis:", with: "redis:")
    let environment = [
        "APN_WORKER_KAFKA_PROPERTY_SECURITY_PROTOCOL": "SSL",
        "APN_WORKER_KAFKA_PROPERTY_SSL_CA_LOCATION": "/etc/ca.pem",
        "APN_WORKER_KAFKA_PROPERTY_LINGER_MS": "20",
    ]
    let overrides = ConfigurationOverrides(kafkaProperties: ["linger.ms=30", "client.id=a=b", "acks="])
    let config = try parse(yaml, overrides: overrides, environment: environment)
    #expect(
        config.kafka.properties == [
            "security.protocol": "SSL",
            "ssl.ca.location": "/etc/ca.pem",
            "linger.ms": "30",
            "compression.type": "lz4",
            "enable.auto.commit": "false",
            "client.id": "a=b",
            "acks": "",
        ]
    )
    #expect(config.warnings.isEmpty)

    #expect(
        parseError(fixture.minimalYAML(), overrides: ConfigurationOverrides(kafkaProperties: ["novalue"]))
            == "--kafka-property must be written name=value (for example security.protocol=SSL); what was given has "
            + "no name before an = and is not shown, in case it is a secret."
    )
    #expect(
        parseError(fixture.minimalYAML(), environment: ["APN_WORKER_KAFKA_PROPERTY_": "x"])
            == "APN_WORKER_KAFKA_PROPERTY_ needs a librdkafka property name after the prefix, for example "
            + "APN_WORKER_KAFKA_PROPERTY_SECURITY_PROTOCOL=SSL."
    )
    #expect(
        parseError(fixture.minimalYAML(), overrides: ConfigurationOverrides(kafkaProperties: ["group.id=x"]))
            == "--kafka-property group.id: set kafka.groupId (APN_WORKER_KAFKA_GROUP_ID, --group) instead of the "
            + "librdkafka property group.id."
    )
    let nested = fixture.minimalYAML(extra: "worker: {}").replacingOccurrences(
        of: "  bootstrapServers: \"127.0.0.1:9092\"",
        with: "  bootstrapServers: \"127.0.0.1:9092\"\n  properties:\n    security:\n      protocol: SSL"
    )
    #expect(
        parseError(nested) == "kafka.properties.security must be a string, number or boolean (librdkafka "
            + "properties are name: value pairs with dotted names), not a mapping."
    )
}

// MARK: - Errors

@Test func unknownKeysNameTheirPath() throws {
    let fixture = try Fixture()
    let typoInEnvironment = fixture.minimalYAML().replacingOccurrences(of: "certificate:", with: "certfile:")
    #expect(
        parseError(typoInEnvironment) == "apps.com.example.app.environments.production.certfile: unknown "
            + "setting; known settings here are certificate, certificatePem, certificatePemEnv, key, keyPem, keyPemEnv, "
            + "pfx, pkcs12Base64, pkcs12Base64Env, signingKey, signingKeyPem, signingKeyPemEnv, passphrase, passphraseFile, "
            + "passphraseEnv, ca, verifyServer, gateway, feedback, channelManagement, keyId, teamId, proxy."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "wroker:\n  id: x")) == "wroker: unknown setting; known "
            + "settings here are worker, kafka, redis, limits, apps."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  batchsize: 5")) == "worker.batchsize: unknown "
            + "setting; known settings here are id, batchSize, batchWindowMs, maxInFlight, resultFlushMs, resultBatchSize, "
            + "shutdownTimeoutSeconds, logLevel, logFormat, dedupeTTLSeconds, dedupeBuckets, statusAddress, invalidTokenTTLDays, "
            + "proxy, maxStopsPerMessage, strictFilePermissions."
    )
    let badEnvironment = fixture.minimalYAML().replacingOccurrences(of: "production:", with: "prod:")
    #expect(
        parseError(badEnvironment) == "apps.com.example.app.environments.prod: unknown setting; known "
            + "settings here are production, sandbox."
    )
    #expect(
        parseError(fixture.minimalYAML(app: "    pool: 3")) == "apps.com.example.app.pool: unknown "
            + "setting; known settings here are bundleId, defaultEnvironment, transport, poolSize, cacheMaxCount, "
            + "cacheMaxBytes, confirmationWindowMs, resendOnUnknown, connectRetryLimit, appPerSecond, devicePerHour, "
            + "feedbackIntervalSeconds, mdmTopic, defaultExpiry, staleAfter, topics, dryRun, environmentFallback, "
            + "minConnections, connectTimeoutMs, "
            + "writeTimeoutMs, "
            + "idleTimeoutMs, reconnectBaseDelayMs, reconnectMaxDelayMs, retryLimit, retryBaseDelayMs, retryMaxDelayMs, "
            + "environments."
    )
    #expect(parseError(fixture.minimalYAML(extra: "redis:\n  host: x")) != nil)  // redis set twice
}

@Test func duplicateKeysAreRejected() throws {
    let fixture = try Fixture()
    #expect(
        parseError(fixture.minimalYAML(extra: "limits:\n  appPerSecond: 1\n  appPerSecond: 2"))
            == "config file /tmp/config.yaml: line 14, column 3: limits.appPerSecond is set twice; keep one."
    )
    #expect(
        parseError("{\"limits\": {\"a\": 1, \"a\": 2}}", path: "/tmp/c.json")
            == "config file /tmp/c.json: line 1, column 21: duplicate member name \"a\" in an object."
    )
}

@Test func missingRequiredSettingsSayWhereToSetThem() throws {
    let fixture = try Fixture()
    let noKafka = fixture.minimalYAML().replacingOccurrences(of: "  bootstrapServers: \"127.0.0.1:9092\"", with: "")
    #expect(
        parseError(noKafka) == "kafka.bootstrapServers is required: set it in the config file, "
            + "APN_WORKER_KAFKA_BOOTSTRAP_SERVERS or --brokers."
    )
    // An explicit null is the same as leaving the setting out.
    let nullKafka = fixture.minimalYAML().replacingOccurrences(of: "\"127.0.0.1:9092\"", with: "null")
    #expect(parseError(nullKafka)?.hasPrefix("kafka.bootstrapServers is required") == true)

    let noRedis = fixture.minimalYAML().replacingOccurrences(of: "  url: \"redis://127.0.0.1:6379/0\"", with: "")
    #expect(parseError(noRedis) == "redis.url is required: set it in the config file, APN_WORKER_REDIS_URL or --redis.")

    // No file at all: everything else from the environment, but apps needs a file.
    let environment = [
        "APN_WORKER_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "APN_WORKER_REDIS_URL": "redis://r",
    ]
    #expect(
        errorMessage { () throws(ConfigurationError) in
            try WorkerConfiguration.load(environment: environment)
        } == "apps is required: give a config file that lists at least one app under apps with --config or "
            + "APN_WORKER_CONFIG (apps cannot be set through environment variables or flags)."
    )
    #expect(
        errorMessage { () throws(ConfigurationError) in
            try WorkerConfiguration.load(environment: [:])
        }
            == "kafka.bootstrapServers is required: set it in the config file, APN_WORKER_KAFKA_BOOTSTRAP_SERVERS or --brokers."
    )

    let noApps = "kafka:\n  bootstrapServers: k\nredis:\n  url: redis://r\n"
    #expect(
        parseError(noApps) == "apps is required: list at least one app under apps in the config file "
            + "/tmp/config.yaml (apps cannot be set through environment variables or flags)."
    )
    #expect(
        parseError(noApps + "apps: {}\n") == "apps must list at least one app, keyed by the app name that jobs use."
    )
    #expect(
        parseError(noApps + "apps:\n  a:\n    poolSize: 2\n")
            == "apps.a.environments must configure at least one of production and sandbox in the config file."
    )
    #expect(
        parseError(noApps + "apps:\n  a:\n    environments:\n      sandbox:\n")
            == "apps.a.environments.sandbox needs credentials: set certificate and key (PEM files) or pfx "
            + "(a PKCS#12 file) in the config file (each can also be given inline or from an environment variable; "
            + "see docs/configuration.md)."
    )
    let noKey = fixture.minimalYAML().replacingOccurrences(of: "key: \(fixture.path("key.pem"))", with: "")
    #expect(
        parseError(noKey) == "apps.com.example.app.environments.production.key is required with "
            + "certificate: set it in the config file to the PEM private key file (or give the key with keyPem or keyPemEnv)."
    )
}

@Test func numbersOutOfRangeOrMalformed() throws {
    let fixture = try Fixture()
    let yaml = fixture.minimalYAML()
    #expect(
        parseError(yaml, environment: ["APN_WORKER_BATCH_SIZE": "abc"])
            == "APN_WORKER_BATCH_SIZE must be a whole number from 1 to 100000, not \"abc\"."
    )
    #expect(
        parseError(yaml, environment: ["APN_WORKER_BATCH_SIZE": "100001"])
            == "APN_WORKER_BATCH_SIZE must be a whole number from 1 to 100000, not \"100001\"."
    )
    #expect(
        parseError(yaml, overrides: ConfigurationOverrides([.maxInFlight: "0"]))
            == "--max-in-flight must be a whole number from 1 to 1000000, not 0."
    )
    #expect(
        parseError(yaml, overrides: ConfigurationOverrides([.shutdownTimeoutSeconds: "3601"]))
            == "--shutdown-timeout must be a whole number from 1 to 3600, not 3601."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  resultFlushMs: 0"))
            == "worker.resultFlushMs must be a whole number from 1 to 10000, not 0."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  batchWindowMs: -1"))
            == "worker.batchWindowMs must be a whole number from 0 to 10000, not -1."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  dedupeBuckets: 0"))
            == "worker.dedupeBuckets must be a whole number from 1 to 4294967296, not 0."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  dedupeTTLSeconds: 59"))
            == "worker.dedupeTTLSeconds must be a whole number from 60 to 31536000, not 59."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  batchSize: 2.5"))
            == "worker.batchSize must be a whole number from 1 to 100000, not 2.5."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  batchSize: [1]"))
            == "worker.batchSize must be a whole number from 1 to 100000, not a list."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  batchSize: 99999999999999999999999"))
            == "worker.batchSize must be a whole number from 1 to 100000, not 99999999999999999999999."
    )
    #expect(
        parseError(fixture.minimalYAML(app: "    poolSize: 65"))
            == "apps.com.example.app.poolSize must be a whole number from 1 to 64, not 65."
    )
    #expect(
        parseError(fixture.minimalYAML(app: "    cacheMaxBytes: 4095"))
            == "apps.com.example.app.cacheMaxBytes must be a whole number of at least 4096, not 4095."
    )
    #expect(
        parseError(fixture.minimalYAML(app: "    feedbackIntervalSeconds: 86401"))
            == "apps.com.example.app.feedbackIntervalSeconds must be 0 (no feedback polling) or a whole number "
            + "from 1 to 86400, not 86401."
    )
    #expect(
        parseError(fixture.minimalYAML(app: "    appPerSecond: -1"))
            == "apps.com.example.app.appPerSecond must be 0 (unlimited) or a larger whole number, not -1."
    )
    #expect(
        parseError(yaml, environment: ["APN_WORKER_LIMITS_DEVICE_PER_HOUR": "1e3"])
            == "APN_WORKER_LIMITS_DEVICE_PER_HOUR must be 0 (unlimited) or a larger whole number, not \"1e3\"."
    )

    // Written the YAML ways, and quoted, whole numbers are accepted.
    let forms = try parse(
        fixture.minimalYAML(extra: "worker:\n  batchSize: 1_000\n  maxInFlight: 0x10\n  resultBatchSize: \"30\"")
    )
    #expect(forms.worker.batchSize == 1000)
    #expect(forms.worker.maxInFlight == 16)
    #expect(forms.worker.resultBatchSize == 30)
}

@Test func otherValueErrors() throws {
    let fixture = try Fixture()
    let yaml = fixture.minimalYAML()
    #expect(
        parseError(yaml, environment: ["APN_WORKER_LOG_LEVEL": "verbose"])
            == "APN_WORKER_LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical, not \"verbose\"."
    )
    #expect(
        parseError(yaml, overrides: ConfigurationOverrides([.logFormat: "xml"]))
            == "--log-format must be json or text, not \"xml\"."
    )
    #expect(
        parseError(fixture.minimalYAML(app: "    transport: spdy"))
            == "apps.com.example.app.transport must be binary or http2, not \"spdy\"."
    )
    #expect(
        parseError(fixture.minimalYAML(app: "    resendOnUnknown: maybe"))
            == "apps.com.example.app.resendOnUnknown must be true or false, not \"maybe\"."
    )
    #expect(
        parseError(yaml, overrides: ConfigurationOverrides([.workerId: "has space"]))
            == "--worker-id must be 1 to 64 characters of letters, digits, '.', '_' and '-', not \"has space\"."
    )
    #expect(
        parseError(yaml, environment: ["APN_WORKER_KAFKA_RESULTS_TOPIC": "bad/topic"])
            == "APN_WORKER_KAFKA_RESULTS_TOPIC must be a Kafka topic name of 1 to 249 letters, digits, '.', '_' "
            + "and '-', not \"bad/topic\"."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker: [1, 2]"))
            == "worker must be a mapping of settings, not a list."
    )
    // A variable for a setting in that section does not hide the file's mistake.
    #expect(
        parseError(fixture.minimalYAML(extra: "worker: [1, 2]"), environment: ["APN_WORKER_ID": "w"])
            == "worker must be a mapping of settings, not a list."
    )
    // Variables and flags fill in a section the file leaves out, and say where a bad value came from.
    #expect(
        try parse(fixture.minimalYAML(), environment: ["APN_WORKER_LIMITS_APP_PER_SECOND": " 4 "]).limits.appPerSecond
            == 4
    )
    #expect(
        parseError(
            fixture.minimalYAML(extra: "worker:\n  batchSize: 5"),
            overrides: ConfigurationOverrides([.batchSize: "-2"])
        )
            == "--batch-size must be a whole number from 1 to 100000, not -2."
    )
    #expect(
        parseError("- a\n- b\n")
            == "config file /tmp/config.yaml: the top level must be a mapping of settings (worker, kafka, redis, "
            + "limits, apps), not a list."
    )
    let badGateway = fixture.minimalYAML().replacingOccurrences(
        of: "key: \(fixture.path("key.pem"))",
        with: "key: \(fixture.path("key.pem"))\n        gateway: host:99999"
    )
    #expect(
        parseError(badGateway) == "apps.com.example.app.environments.production.gateway must be host:port "
            + "with a port from 1 to 65535 (an IPv6 address in brackets), not \"host:99999\"."
    )
}

@Test func redisURLs() throws {
    let fixture = try Fixture()
    let yaml = fixture.minimalYAML()
    func redis(_ url: String, password: String? = nil) throws -> WorkerConfiguration.Redis {
        try parse(yaml, overrides: ConfigurationOverrides([.redisURL: url, .redisPassword: password])).redis
    }
    #expect(try redis("redis://h").endpoint == "h:6379")
    #expect(try redis("redis://:pw@h:1/15").password == "pw")
    #expect(try redis("redis://:pw@h:1/15").database == 15)
    #expect(try redis("redis://:url@h", password: "flag").password == "flag")
    #expect(try redis("redis://u@h", password: "p").username == "u")
    #expect(try redis("rediss://h").tls == RedisTLS())
    #expect(try redis("redis://h").tls == nil)
    #expect(
        parseError(yaml, overrides: ConfigurationOverrides([.redisURL: "redis://:secret@h:0"]))
            == "--redis must be a Redis URL of the form redis[s]://[[user]:password@]host[:port][/db], not "
            + "\"redis://:***@h:0\" (the port must be from 1 to 65535)."
    )
    #expect(
        parseError(yaml, environment: ["APN_WORKER_REDIS_URL": "http://h"])
            == "APN_WORKER_REDIS_URL must be a Redis URL of the form redis[s]://[[user]:password@]host[:port][/db], "
            + "not \"http://h\" (the scheme must be redis:// or rediss://)."
    )
    #expect(
        parseError(yaml, overrides: ConfigurationOverrides([.redisURL: "redis://u@h"]))
            == "--redis names the user \"u\" but no password is set: add it to the URL or set redis.password, "
            + "APN_WORKER_REDIS_PASSWORD or --redis-password."
    )
}

@Test func redisTLSSettings() throws {
    let fixture = try Fixture()
    let ca = fixture.write("redis-ca.pem", "ca")
    let cert = fixture.write("redis-client.pem", "cert")
    let key = fixture.write("redis-client-key.pem", "key")
    func yaml(_ url: String, _ lines: String) -> String {
        fixture.minimalYAML().replacingOccurrences(
            of: "  url: \"redis://127.0.0.1:6379/0\"",
            with: "  url: \"\(url)\"\n" + lines
        )
    }

    let full = try parse(
        yaml(
            "redis://127.0.0.1:6379/0",
            "  tls: true\n  caFile: \(ca)\n  certFile: \(cert)\n  keyFile: \(key)\n  serverName: redis.internal"
        )
    )
    #expect(full.redis.tls == RedisTLS(caFile: ca, certFile: cert, keyFile: key, serverName: "redis.internal"))
    #expect(full.warnings.isEmpty)

    let rediss = try parse(yaml("rediss://127.0.0.1:6380/0", "  caFile: \(ca)"))
    #expect(rediss.redis.tls == RedisTLS(caFile: ca))

    let unverified = try parse(yaml("rediss://127.0.0.1:6380/0", "  tlsVerify: false"))
    #expect(unverified.redis.tls?.verify == false)
    #expect(
        unverified.warnings == [
            "redis.tlsVerify is false: the worker accepts any certificate from Redis, so an impostor on the "
                + "network could read and change its data; use it only in tests."
        ]
    )

    #expect(
        parseError(yaml("redis://127.0.0.1:6379/0", "  caFile: \(ca)"))
            == "redis.caFile only applies with TLS: use a rediss:// URL or set redis.tls to true."
    )
    #expect(
        parseError(yaml("rediss://127.0.0.1:6380/0", "  tls: false"))
            == "redis.tls is false but redis.url is a rediss:// (TLS) URL; remove one of them."
    )
    #expect(
        parseError(yaml("rediss://127.0.0.1:6380/0", "  certFile: \(cert)"))
            == "redis.certFile and redis.keyFile go together: set both for a client certificate, or neither."
    )
    #expect(
        parseError(yaml("rediss://127.0.0.1:6380/0", "  caFile: \(fixture.path("missing.pem"))"))
            == "redis.caFile: cannot read \(fixture.path("missing.pem")); check that the file exists and is readable."
    )
    let off = yaml("redis://127.0.0.1:6379/0", "  tls: false")
    #expect(try parse(off).redis.tls == nil)
}

// MARK: - Credentials

@Test func credentialFilesMustExist() throws {
    let fixture = try Fixture()
    let missing = fixture.minimalYAML().replacingOccurrences(of: fixture.path("cert.pem"), with: "/x/cert.pem")
    #expect(
        parseError(missing) == "apps.com.example.app.environments.production.certificate: cannot read "
            + "/x/cert.pem; check that the file exists and is readable."
    )
    let relative = fixture.minimalYAML().replacingOccurrences(of: fixture.path("key.pem"), with: "nope.pem")
    #expect(
        parseError(relative, path: fixture.path("c.yaml")) == "apps.com.example.app.environments.production.key: "
            + "cannot read \(fixture.path("nope.pem")); check that the file exists and is readable."
    )
    let directory = fixture.minimalYAML().replacingOccurrences(of: fixture.path("key.pem"), with: fixture.directory)
    #expect(
        parseError(directory) == "apps.com.example.app.environments.production.key: \(fixture.directory) "
            + "is a directory; name a file."
    )
    let ca = fixture.minimalYAML().replacingOccurrences(
        of: "key: \(fixture.path("key.pem"))",
        with: "key: \(fixture.path("key.pem"))\n        ca: ../missing-ca.pem"
    )
    let expectedCA = URL(fileURLWithPath: fixture.directory).deletingLastPathComponent()
        .appendingPathComponent("missing-ca.pem").path
    #expect(
        parseError(ca, path: fixture.path("c.yaml")) == "apps.com.example.app.environments.production.ca: "
            + "cannot read \(expectedCA); check that the file exists and is readable."
    )
}

@Test func pfxCannotBeCombinedWithCertificate() throws {
    let fixture = try Fixture()
    let yaml = fixture.minimalYAML().replacingOccurrences(
        of: "key: \(fixture.path("key.pem"))",
        with: "key: \(fixture.path("key.pem"))\n        pfx: app.p12"
    )
    #expect(
        parseError(yaml, path: fixture.path("c.yaml")) == "apps.com.example.app.environments.production.pfx "
            + "cannot be used together with certificate and key; set either pfx or certificate and key."
    )
}

@Test func passphraseFileIsReadAndTrimmed() throws {
    let fixture = try Fixture()
    fixture.write("crlf.txt", "with crlf\r\n\r\n")
    fixture.write("empty.txt", "\n")
    func environment(_ extra: String) -> String {
        fixture.minimalYAML().replacingOccurrences(
            of: "key: \(fixture.path("key.pem"))",
            with: "key: \(fixture.path("key.pem"))\n        \(extra)"
        )
    }
    let path = fixture.path("c.yaml")
    let plain = try parse(environment("passphraseFile: passphrase.txt"), path: path)
    #expect(plain.apps["com.example.app"]?.environments[.production]?.passphrase == "s3cret pass")
    let crlf = try parse(environment("passphraseFile: crlf.txt"), path: path)
    #expect(crlf.apps["com.example.app"]?.environments[.production]?.passphrase == "with crlf")
    let literal = try parse(environment("passphrase: 0123"), path: path)
    #expect(literal.apps["com.example.app"]?.environments[.production]?.passphrase == "0123")

    #expect(
        parseError(environment("passphraseFile: empty.txt"), path: path)
            == "apps.com.example.app.environments.production.passphraseFile: \(fixture.path("empty.txt")) is empty; "
            + "it must hold the passphrase."
    )
    #expect(
        parseError(environment("passphraseFile: gone.txt"), path: path)
            == "apps.com.example.app.environments.production.passphraseFile: cannot read \(fixture.path("gone.txt")); "
            + "check that the file exists and is readable."
    )
    #expect(
        parseError(environment("passphrase: a\n        passphraseFile: passphrase.txt"), path: path)
            == "apps.com.example.app.environments.production.passphrase and passphraseFile cannot both be set; "
            + "give the passphrase one way only: passphrase, passphraseFile or passphraseEnv."
    )
}

// MARK: - Environments

@Test func defaultGatewaysDependOnEnvironment() throws {
    let fixture = try Fixture()
    let yaml = """
        kafka: {bootstrapServers: k}
        redis: {url: "redis://r"}
        apps:
          a:
            environments:
              production: {pfx: app.p12}
              sandbox: {pfx: app.p12, gateway: "127.0.0.1", feedback: "[::1]:9000"}
          b:
            environments:
              sandbox: {pfx: app.p12}
        """
    let config = try parse(yaml, path: fixture.path("c.yaml"))
    let production = try #require(config.apps["a"]?.environments[.production])
    #expect(production.gateway == .init(host: "gateway.push.apple.com", port: 2195))
    #expect(production.feedback == .init(host: "feedback.push.apple.com", port: 2196))
    let customSandbox = try #require(config.apps["a"]?.environments[.sandbox])
    #expect(customSandbox.gateway == .init(host: "127.0.0.1", port: 2195))
    #expect(customSandbox.feedback == .init(host: "::1", port: 9000))
    #expect(customSandbox.feedback.description == "[::1]:9000")
    let sandbox = try #require(config.apps["b"]?.environments[.sandbox])
    #expect(sandbox.gateway == .init(host: "gateway.sandbox.push.apple.com", port: 2195))
    #expect(sandbox.feedback == .init(host: "feedback.sandbox.push.apple.com", port: 2196))
}

@Test func defaultEnvironmentRule() throws {
    let fixture = try Fixture()
    func app(_ environments: String, _ extra: String = "") throws(ConfigurationError) -> WorkerConfiguration.App? {
        let yaml = """
            kafka: {bootstrapServers: k}
            redis: {url: "redis://r"}
            apps:
              a:
                \(extra)
                environments: {\(environments)}
            """
        return try parse(yaml, path: fixture.path("c.yaml")).apps["a"]
    }
    #expect(try app("sandbox: {pfx: app.p12}")?.defaultEnvironment == .sandbox)
    #expect(try app("production: {pfx: app.p12}")?.defaultEnvironment == .production)
    #expect(try app("sandbox: {pfx: app.p12}, production: {pfx: app.p12}")?.defaultEnvironment == .production)
    #expect(
        try app("sandbox: {pfx: app.p12}, production: {pfx: app.p12}", "defaultEnvironment: sandbox")?
            .defaultEnvironment == .sandbox
    )
    var message: String?
    do {
        _ = try app("sandbox: {pfx: app.p12}", "defaultEnvironment: production")
    } catch {
        message = error.message
    }
    #expect(
        message == "apps.a.defaultEnvironment is production, but apps.a.environments has no production "
            + "entry; configure it or choose sandbox."
    )
    #expect(throws: ConfigurationError.self) { try app("sandbox: {pfx: app.p12}", "defaultEnvironment: staging") }
}

// MARK: - Syntax

@Test func syntaxErrorsGiveLineAndColumn() throws {
    let yaml = "kafka:\n  bootstrapServers: k\n   redis: x\n"
    let message = try #require(parseError(yaml, path: "/etc/apn-worker.yaml"))
    #expect(message.hasPrefix("config file /etc/apn-worker.yaml: line 3, column "))
    #expect(message.hasSuffix("."))

    let json = "{\n  \"kafka\": {\"bootstrapServers\": \"k\",}\n}"
    #expect(
        parseError(json, path: "/etc/apn-worker.json")
            == "config file /etc/apn-worker.json: line 2, column 37: expected a string member name after ','."
    )
    #expect(
        parseError("{\"a\": tru}", path: "/c.json")
            == "config file /c.json: line 1, column 7: invalid literal; expected 'true'."
    )
    #expect(
        parseError("", path: "/c.json")
            == "config file /c.json: line 1, column 1: unexpected end of input; expected a value."
    )

    // An empty YAML file is an empty configuration.
    #expect(parseError("")?.hasPrefix("kafka.bootstrapServers is required") == true)
}

@Test func yamlMergeKeysAndAliases() throws {
    let fixture = try Fixture()
    let yaml = """
        kafka: {bootstrapServers: k}
        redis: {url: "redis://r"}
        apps:
          base: &base
            poolSize: 9
            environments:
              sandbox: {pfx: app.p12}
          derived:
            <<: *base
            poolSize: 3
        """
    let config = try parse(yaml, path: fixture.path("c.yaml"))
    #expect(config.apps["base"]?.poolSize == 9)
    #expect(config.apps["derived"]?.poolSize == 3)
    #expect(config.apps["derived"]?.environments[.sandbox]?.pfx == fixture.path("app.p12"))
}

@Test func hostileInputIsRejectedWithoutCrashing() throws {
    let deepFlow = String(repeating: "[", count: 10_000)
    #expect(parseError(deepFlow)?.contains("nested more than 64 levels deep") == true)
    #expect(parseError(deepFlow, path: "/c.json")?.contains("nested more than 64 levels deep") == true)

    var laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in 1...7 {
        let previous = level == 1 ? "a" : "l\(level - 1)"
        laughs +=
            "l\(level): &l\(level) [" + Array(repeating: "*\(previous)", count: 10).joined(separator: ", ") + "]\n"
    }
    #expect(parseError(laughs)?.contains("more than 1000000 values") == true)
}

@Test func everyPrefixOfAValidFileFailsCleanlyOrParses() throws {
    let fixture = try Fixture()
    let yaml = fixture.minimalYAML(extra: "worker: {id: w, batchSize: 5}\nlimits:\n  appPerSecond: 3\n")
    let json = """
        {"kafka": {"bootstrapServers": "k", "properties": {"a.b": 1.5}}, "redis": {"url": "redis://:p@r:1/2"},
         "apps": {"x": {"environments": {"sandbox": {"pfx": "\(fixture.path("app.p12"))", "passphrase": "\\ud83d\\ude00"}}}}}
        """
    #expect(try parse(json, path: "/c.json").apps["x"]?.environments[.sandbox]?.passphrase == "😀")
    for (text, path) in [(yaml, "/c.yaml"), (json, "/c.json"), (json, "/c.conf"), (yaml, "/c.conf")] {
        let scalars = Array(text.unicodeScalars)
        for end in stride(from: 0, to: scalars.count, by: 3) {
            var prefix = String.UnicodeScalarView()
            prefix.append(contentsOf: scalars[..<end])
            _ = try? parse(String(prefix), path: path)
        }
    }
}

@Test func unreadableTextIsReported() throws {
    let fixture = try Fixture()
    let path = fixture.path("latin1.yaml")
    _ = FileManager.default.createFile(atPath: path, contents: Data([0x61, 0x3A, 0x20, 0xE9, 0x0A]))
    #expect(
        errorMessage { () throws(ConfigurationError) in
            try WorkerConfiguration.load(overrides: ConfigurationOverrides(configPath: path), environment: [:])
        } == "config file \(path) is not UTF-8 text; save it as UTF-8."
    )
    #expect(
        parseError("a: 1\n---\nb: 2\n") == "config file /tmp/config.yaml: line 2, column 1: a second YAML "
            + "document starts here, but a config file holds only one."
    )
    #expect(parseError("\tkafka: 1\n")?.hasSuffix("; YAML cannot be indented with tabs.") == true)
}

// MARK: - HTTP/2

private func http2YAML(_ fixture: Fixture, transport: String = "http2", environment: String) -> String {
    """
    kafka:
      bootstrapServers: "127.0.0.1:9092"
    redis:
      url: "redis://127.0.0.1:6379/0"
    apps:
      com.example.app:
        transport: \(transport)
        environments:
          production:
    \(environment)
    """
}

@Test func http2AppsTakeATokenAndDefaultToTheProviderAPI() throws {
    let fixture = try Fixture()
    fixture.write("AuthKey.p8", "-----BEGIN PRIVATE KEY-----\n")
    let yaml = http2YAML(
        fixture,
        environment: """
                      signingKey: \(fixture.path("AuthKey.p8"))
                      keyId: ABCDE12345
                      teamId: TEAM123456
            """
    )
    let config = try parse(yaml)
    let app = try #require(config.apps["com.example.app"])
    #expect(app.transport == .http2)
    let production = try #require(app.environments[.production])
    #expect(
        production.credentials
            == .token(signingKey: .file(fixture.path("AuthKey.p8")), keyId: "ABCDE12345", teamId: "TEAM123456")
    )
    #expect(production.gateway == WorkerConfiguration.HostPort(host: "api.push.apple.com", port: 443))
}

@Test func tokenSettingsErrorsNameTheSetting() throws {
    let fixture = try Fixture()
    fixture.write("AuthKey.p8", "-----BEGIN PRIVATE KEY-----\n")
    let key = fixture.path("AuthKey.p8")
    let path = "apps.com.example.app.environments.production"
    #expect(
        parseError(
            http2YAML(
                fixture,
                transport: "binary",
                environment: """
                              signingKey: \(key)
                              keyId: ABCDE12345
                              teamId: TEAM123456
                    """
            )
        )
            == "\(path).signingKey needs transport http2: the binary protocol authenticates with a certificate only; set the app's transport to http2 or use certificate and key."
    )
    #expect(
        parseError(
            http2YAML(
                fixture,
                environment: """
                              signingKey: \(key)
                              teamId: TEAM123456
                    """
            )
        ) == "\(path).keyId is required with signingKey: set it to the key's 10-character key ID."
    )
    #expect(
        parseError(
            http2YAML(
                fixture,
                environment: """
                              signingKey: \(key)
                              keyId: ABCDE12345
                              teamId: TEAM
                    """
            )
        ) == "\(path).teamId must be 10 letters or digits, not \"TEAM\"."
    )
    #expect(
        parseError(
            http2YAML(
                fixture,
                environment: """
                              signingKey: \(key)
                              keyId: ABCDE12345
                              teamId: TEAM123456
                              certificate: \(fixture.path("cert.pem"))
                              key: \(fixture.path("key.pem"))
                    """
            )
        )
            == "\(path).signingKey cannot be used together with certificate, key or pfx; choose token or certificate authentication."
    )
    #expect(
        parseError(
            http2YAML(
                fixture,
                environment: """
                              verifyServer: false
                    """
            )
        )
            == "\(path) needs credentials: set certificate and key (PEM files) or pfx (a PKCS#12 file), or signingKey, keyId and teamId, in the config file (each can also be given inline or from an environment variable; see docs/configuration.md)."
    )
}

// MARK: - Healing settings

@Test func groupInstanceIdComesFromTheFileOrTheInstanceVariable() throws {
    let fixture = try Fixture()
    let base = fixture.minimalYAML()
    #expect(try parse(base).kafka.groupInstanceId == nil)
    let fromFile = base.replacingOccurrences(
        of: "  bootstrapServers:",
        with: "  groupInstanceId: apn-worker-1\n  bootstrapServers:"
    )
    #expect(try parse(fromFile).kafka.groupInstanceId == "apn-worker-1")
    let fromEnvironment = try parse(fromFile, environment: ["APN_WORKER_INSTANCE_ID": "apn-worker-2"])
    #expect(fromEnvironment.kafka.groupInstanceId == "apn-worker-2")
    #expect(fromEnvironment.warnings.isEmpty)  // a setting, not a misspelt variable
    let bad = parseError(base, environment: ["APN_WORKER_INSTANCE_ID": "pod name/with spaces"])
    #expect(bad?.contains("APN_WORKER_INSTANCE_ID must be 1 to 249 letters") == true)
    let property = base.replacingOccurrences(
        of: "  bootstrapServers:",
        with: "  properties:\n    group.instance.id: x\n  bootstrapServers:"
    )
    #expect(parseError(property)?.contains("set kafka.groupInstanceId (APN_WORKER_INSTANCE_ID) instead") == true)
}

@Test func connectRetryLimitDefaultsToWaitingForTheGateway() throws {
    let fixture = try Fixture()
    let base = fixture.minimalYAML()
    #expect(try parse(base).apps["com.example.app"]?.connectRetryLimit == 0)
    let limited = base.replacingOccurrences(
        of: "    environments:",
        with: "    connectRetryLimit: 20\n    environments:"
    )
    #expect(try parse(limited).apps["com.example.app"]?.connectRetryLimit == 20)
    let negative = base.replacingOccurrences(
        of: "    environments:",
        with: "    connectRetryLimit: -1\n    environments:"
    )
    #expect(parseError(negative)?.contains("connectRetryLimit must be 0 (keep waiting for the gateway)") == true)
}

// MARK: - JSON through APNSCore's parser

@Test func jsonUnknownKeysAreNamedInNameOrderAndAByteOrderMarkIsAllowed() throws {
    let fixture = try Fixture()
    let json = """
        \u{FEFF}{"kafka": {"bootstrapServers": "k"}, "redis": {"url": "redis://r"}, "zeta": 1, "alpha": 2,
         "apps": {"a": {"environments": {"sandbox": {"pfx": "\(fixture.path("app.p12"))"}}}}}
        """
    #expect(
        parseError(json, path: "/c.json")
            == "alpha: unknown setting; known settings here are worker, kafka, redis, limits, apps."
    )
    let valid = json.replacingOccurrences(of: "\"zeta\": 1, \"alpha\": 2,", with: "")
    #expect(try parse(valid, path: "/c.json").apps["a"]?.defaultEnvironment == .sandbox)
    #expect(try parse(valid, path: "/c.conf").apps["a"]?.defaultEnvironment == .sandbox)
    // Columns count characters, not bytes.
    #expect(
        parseError("{\"é\": x}", path: "/c.json")
            == "config file /c.json: line 1, column 7: unexpected character 'x'; expected a value."
    )
}

@Test func statusAddressIsOnByDefaultAndTurnedOffByNullOrOff() throws {
    let fixture = try Fixture()
    func address(
        _ extra: String,
        environment: [String: String] = [:],
        flag: String? = nil
    ) throws -> WorkerConfiguration.HostPort? {
        try parse(
            fixture.minimalYAML(extra: extra),
            overrides: ConfigurationOverrides([.statusAddress: flag]),
            environment: environment
        ).worker.statusAddress
    }
    #expect(try address("") == .init(host: "0.0.0.0", port: 9400))
    #expect(try address("worker:\n  statusAddress: null") == nil)
    #expect(try address("worker:\n  statusAddress: \"127.0.0.1:0\"") == .init(host: "127.0.0.1", port: 0))
    #expect(try address("worker:\n  statusAddress: \"[::1]\"") == .init(host: "::1", port: 9400))
    #expect(try address("", environment: ["APN_WORKER_STATUS_ADDRESS": "off"]) == nil)
    #expect(try address("worker:\n  statusAddress: null", flag: "10.0.0.1:9500") == .init(host: "10.0.0.1", port: 9500))
    let error = parseError(fixture.minimalYAML(), overrides: ConfigurationOverrides([.statusAddress: "host:99999"]))
    #expect(
        error
            == "--status-address must be host:port with a port from 0 to 65535 (an IPv6 address in brackets), not \"host:99999\"."
    )
}

// MARK: - Job settings (topics, dryRun)

@Test func topicsAndDryRunPerApp() throws {
    let fixture = try Fixture()
    let key = fixture.write("AuthKey.p8", "-----BEGIN PRIVATE KEY-----\n")
    let yaml = """
        kafka:
          bootstrapServers: "127.0.0.1:9092"
        redis:
          url: "redis://127.0.0.1:6379/0"
        apps:
          team:
            bundleId: com.example.a
            transport: http2
            dryRun: true
            topics: [com.example.a, com.example.b, com.example.b]
            environments:
              production:
                signingKey: \(key)
                keyId: ABCDE12345
                teamId: TEAM123456
          plain:
            environments:
              production:
                certificate: \(fixture.path("cert.pem"))
                key: \(fixture.path("key.pem"))
        """
    let configuration = try parse(yaml)
    #expect(configuration.apps["team"]?.topics == ["com.example.a", "com.example.b"])
    #expect(configuration.apps["team"]?.dryRun == true)
    #expect(configuration.apps["plain"]?.topics == ["plain"])
    #expect(configuration.apps["plain"]?.dryRun == false)
    #expect(configuration.apps["team"]?.allowsTopic("com.example.b") == true)
    #expect(configuration.apps["team"]?.allowsTopic("com.example.c") == false)
}

@Test func topicsOnABinaryAppOrNotAListAreRefused() throws {
    let fixture = try Fixture()
    #expect(
        parseError(fixture.minimalYAML(app: "    topics: [com.example.app, com.example.other]"))
            == "apps.com.example.app.topics needs transport http2 with signingKey: the binary protocol sends to the certificate's one "
            + "topic (bundleId com.example.app); remove topics or set the app's transport to http2."
    )
    #expect(
        parseError(fixture.minimalYAML(app: "    topics: com.example.app"))
            == "apps.com.example.app.topics must be a list of bundle IDs, not \"com.example.app\"."
    )
    #expect(parseError(fixture.minimalYAML(app: "    topics: [com.example.app]")) == nil)
}

@Test("environmentFallback is off by default and needs both environments")
func environmentFallbackNeedsBothEnvironments() throws {
    let fixture = try Fixture()
    #expect(try parse(fixture.minimalYAML()).apps["com.example.app"]?.environmentFallback == false)
    #expect(
        parseError(fixture.minimalYAML(app: "    environmentFallback: true"))
            == "apps.com.example.app.environmentFallback needs both environments: configure "
            + "environments.production and environments.sandbox, or remove environmentFallback."
    )
    let both = """
        kafka:
          bootstrapServers: "127.0.0.1:9092"
        redis:
          url: "redis://127.0.0.1:6379/0"
        apps:
          both:
            environmentFallback: true
            environments:
              production:
                certificate: \(fixture.path("cert.pem"))
                key: \(fixture.path("key.pem"))
              sandbox:
                certificate: \(fixture.path("cert.pem"))
                key: \(fixture.path("key.pem"))
        """
    #expect(try parse(both).apps["both"]?.environmentFallback == true)
}

@Test(
    "redis.urls and redis.cluster: several seed nodes make a Redis Cluster, each reached with the first one's settings"
)
func redisClusterSettings() throws {
    let fixture = try Fixture()
    func yaml(_ lines: String) -> String {
        fixture.minimalYAML().replacingOccurrences(of: "  url: \"redis://127.0.0.1:6379/0\"\n", with: lines)
    }
    let seeds = try parse(
        yaml("  urls: [\"redis://:pw@r1:7000\", \"redis://r2:7001\", \"redis://r3\"]\n  commandTimeoutMs: 900\n")
    )
    #expect(seeds.redisCluster)
    #expect(seeds.redisSeeds.map(\.endpoint) == ["r1:7000", "r2:7001", "r3:6379"])
    #expect(seeds.redisSeeds.allSatisfy { $0.password == "pw" && $0.commandTimeout == .milliseconds(900) })

    let one = try parse(yaml("  url: \"redis://r1:7000\"\n  cluster: true\n"))
    #expect(one.redisCluster && one.redisSeeds.map(\.endpoint) == ["r1:7000"])
    let single = try parse(yaml("  urls: [\"redis://r1:7000/3\"]\n"))
    #expect(!single.redisCluster && single.redis.database == 3)
    #expect(try !parse(fixture.minimalYAML()).redisCluster)

    #expect(
        parseError(yaml("  urls: [\"redis://r1\", \"redis://r2\"]\n  cluster: false\n"))
            == "redis.cluster is false but redis.urls names 2 servers; several URLs are the seed nodes of a Redis Cluster: "
            + "set redis.cluster to true, or give one URL."
    )
    #expect(
        parseError(yaml("  url: \"redis://r1\"\n  urls: [\"redis://r2\"]\n"))
            == "redis.url and redis.urls are both set: give one server in redis.url, or the seed nodes of a Redis Cluster "
            + "in redis.urls."
    )
    #expect(
        parseError(yaml("  url: \"redis://r1/2\"\n  cluster: true\n"))
            == "redis.url selects database 2, but a Redis Cluster has only database 0: remove /2 from the URL."
    )
    #expect(
        parseError(yaml("  urls: [\"rediss://r1\", \"redis://r2\"]\n"))
            == "redis.urls[1] and redis.urls[0] differ in TLS (rediss:// against redis://); use one scheme for every seed."
    )
    #expect(
        parseError(yaml("  urls: \"redis://r1\"\n"))
            == "redis.urls must be a list of redis:// or rediss:// URLs, at least one, not \"redis://r1\"."
    )
    #expect(
        parseError(yaml("  urls: [\"redis://r1\", \"http://r2\"]\n"))
            == "redis.urls[1] must be a Redis URL of the form redis[s]://[[user]:password@]host[:port][/db], not \"http://r2\" "
            + "(the scheme must be redis:// or rediss://)."
    )
}

extension WorkerConfiguration.Worker {
    fileprivate func with(dedupeBuckets: Int) -> Self {
        var copy = self
        copy.dedupeBuckets = dedupeBuckets
        return copy
    }
}
