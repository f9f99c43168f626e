import Foundation
import PushConfiguration
import PushRedis
import Testing

// MARK: - Errors

@Test func unknownKeysNameTheirPath() throws {
    let fixture = try Fixture()
    let typoInEnvironment = fixture.minimalYAML().replacingOccurrences(of: "certificate:", with: "certfile:")
    #expect(
        parseError(typoInEnvironment) == "apps.com.example.app.environments.production.certfile: unknown "
            + "setting; known settings here are certificate, certificatePem, certificatePemEnv, key, keyPem, keyPemEnv, "
            + "pfx, pkcs12Base64, pkcs12Base64Env, signingKey, signingKeyPem, signingKeyPemEnv, passphrase, passphraseFile, "
            + "passphraseEnv, ca, verifyServer, gateway, feedback, channelManagement, broadcastGateway, keyId, teamId, proxy."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "wroker:\n  id: x")) == "wroker: unknown setting; known "
            + "settings here are worker, kafka, redis, limits, apps."
    )
    #expect(
        parseError(fixture.minimalYAML(extra: "worker:\n  batchsize: 5")) == "worker.batchsize: unknown "
            + "setting; known settings here are id, batchSize, batchWindowMs, maxInFlight, resultFlushMs, resultBatchSize, "
            + "shutdownTimeoutSeconds, logLevel, logFormat, dedupeTTLSeconds, dedupeBuckets, statusAddress, invalidTokenTTLDays, "
            + "proxy, maxStopsPerMessage, strictFilePermissions, moveAsideAfter."
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
            + "liveActivityHighPriorityPerHour, minConnections, connectTimeoutMs, "
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
