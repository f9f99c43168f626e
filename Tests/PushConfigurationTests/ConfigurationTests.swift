import Foundation
import PushConfiguration
import PushRedis
import Testing

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
