import Foundation
import PushConfiguration
import PushRedis
import Testing

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
