import APNSCore
import Foundation
import PushConfiguration
import Testing

/// The per-app settings beside credentials: `mdmTopic`, `defaultExpiry` and the connection
/// settings; and credentials given inline or from environment variables, which are never shown.
@Suite struct AppSettingsTests {
    static let path = "apps.a"
    static let environmentPath = "apps.a.environments.production"

    /// A config with app `a` (`transport`), `appLines` under the app and `credentials` under
    /// its production environment (a certificate and key from `files` when not given).
    static func yaml(
        transport: String = "binary",
        appLines: String = "",
        credentials: String? = nil,
        files: Files
    ) -> String {
        """
        kafka:
          bootstrapServers: "127.0.0.1:9092"
        redis:
          url: "redis://127.0.0.1:6379/0"
        apps:
          a:
            transport: \(transport)
        \(appLines.split(separator: "\n").map { "    \($0)" }.joined(separator: "\n"))
            environments:
              production:
        \((credentials ?? "certificate: \(files.path("cert.pem"))\nkey: \(files.path("key.pem"))").split(separator: "\n").map { "        \($0)" }.joined(separator: "\n"))

        """
    }

    /// A directory of placeholder credential files readable by their owner only, removed on deinit.
    final class Files {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "apn-worker-app-settings-\(UUID().uuidString)"
        ).path

        init() throws {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            for name in ["cert.pem", "key.pem", "app.p12", "AuthKey.p8"] {
                _ = FileManager.default.createFile(
                    atPath: path(name),
                    contents: Data("placeholder\n".utf8),
                    attributes: [.posixPermissions: 0o600]
                )
            }
        }

        deinit { try? FileManager.default.removeItem(atPath: directory) }

        func path(_ name: String) -> String { "\(directory)/\(name)" }
    }

    static func parse(
        _ text: String,
        environment: [String: String] = [:]
    ) throws(ConfigurationError) -> WorkerConfiguration {
        try WorkerConfiguration.parse(
            fileContents: text,
            path: "/tmp/config.yaml",
            environment: environment,
            hostname: "h",
            pid: 1
        )
    }

    static func error(_ text: String, environment: [String: String] = [:]) -> String? {
        do {
            _ = try parse(text, environment: environment)
            return nil
        } catch {
            return error.message
        }
    }

    // MARK: mdmTopic and defaultExpiry

    @Test("mdmTopic is read; without it an app has none")
    func mdmTopic() throws {
        let files = try Files()
        #expect(try Self.parse(Self.yaml(transport: "http2", files: files)).apps["a"]?.mdmTopic == nil)
        let yaml = Self.yaml(transport: "http2", appLines: "mdmTopic: com.apple.mgmt.External.0a1b2c3d", files: files)
        #expect(try Self.parse(yaml).apps["a"]?.mdmTopic == "com.apple.mgmt.External.0a1b2c3d")
        #expect(
            Self.error(Self.yaml(transport: "http2", appLines: "mdmTopic: \"com.apple mgmt\"", files: files))
                == "apps.a.mdmTopic must be the topic of the MDM push certificate (com.apple.mgmt.External.<UUID>), "
                + "without white space, not \"com.apple mgmt\"."
        )
    }

    @Test("defaultExpiry: 0 (do not store, the default) or a time from sending; a UNIX time or nonsense is refused")
    func defaultExpiry() throws {
        let files = try Files()
        #expect(try Self.parse(Self.yaml(files: files)).apps["a"]?.defaultExpiry == .immediately)
        #expect(
            try Self.parse(Self.yaml(appLines: "defaultExpiry: 1d", files: files)).apps["a"]?.defaultExpiry
                == .after(.seconds(86_400))
        )
        #expect(
            try Self.parse(Self.yaml(appLines: "defaultExpiry: 90m", files: files)).apps["a"]?.defaultExpiry
                == .after(.seconds(5_400))
        )
        #expect(
            try Self.parse(Self.yaml(appLines: "defaultExpiry: 0", files: files)).apps["a"]?.defaultExpiry
                == .immediately
        )
        let sentence =
            "apps.a.defaultExpiry must be 0 (do not store) or a time counted from sending: a whole number followed by s, m, h, d or w such as \"1h\" or \"1d\", not "
        #expect(Self.error(Self.yaml(appLines: "defaultExpiry: 1700000000", files: files)) == sentence + "1700000000.")
        #expect(Self.error(Self.yaml(appLines: "defaultExpiry: one day", files: files)) == sentence + "\"one day\".")
        #expect(Self.error(Self.yaml(appLines: "defaultExpiry: 0s", files: files)) == sentence + "\"0s\".")
    }

    @Test("staleAfter: none by default, seconds or a time from production up to a year; nonsense is refused")
    func staleAfter() throws {
        let files = try Files()
        #expect(try Self.parse(Self.yaml(files: files)).apps["a"]?.staleAfter == nil)
        #expect(
            try Self.parse(Self.yaml(appLines: "staleAfter: 10m", files: files)).apps["a"]?.staleAfter == .seconds(600)
        )
        #expect(
            try Self.parse(Self.yaml(appLines: "staleAfter: 90", files: files)).apps["a"]?.staleAfter == .seconds(90)
        )
        let sentence =
            "apps.a.staleAfter must be a time counted from when a job was produced: a whole number of seconds, or a whole number followed by s, m, h, d or w such as \"10m\" or \"1h\", not "
        #expect(Self.error(Self.yaml(appLines: "staleAfter: 0", files: files)) == sentence + "0.")
        #expect(Self.error(Self.yaml(appLines: "staleAfter: soon", files: files)) == sentence + "\"soon\".")
        #expect(Self.error(Self.yaml(appLines: "staleAfter: 2w0d", files: files)) == sentence + "\"2w0d\".")
    }

    // MARK: Connection settings

    @Test("Connection settings default to the delivery clients' own, per transport, and are read in their units")
    func connectionSettings() throws {
        let files = try Files()
        let binary = try #require(try Self.parse(Self.yaml(files: files)).apps["a"]?.connection)
        #expect(binary == WorkerConfiguration.App.Connection())
        #expect(binary.idleTimeout == nil)
        #expect(binary.connectTimeout == .seconds(10) && binary.writeTimeout == .seconds(30))
        #expect(binary.reconnectBaseDelay == .milliseconds(100) && binary.reconnectMaxDelay == .seconds(5))
        #expect(binary.retryLimit == 3 && binary.retryBaseDelay == .seconds(1) && binary.retryMaxDelay == .seconds(60))
        let http2 = try #require(try Self.parse(Self.yaml(transport: "http2", files: files)).apps["a"]?.connection)
        #expect(http2.idleTimeout == .seconds(300))

        let lines = """
            poolSize: 3
            minConnections: 3
            connectTimeoutMs: 1500
            writeTimeoutMs: 2500
            idleTimeoutMs: 60000
            reconnectBaseDelayMs: 50
            reconnectMaxDelayMs: 800
            retryLimit: 0
            retryBaseDelayMs: 200
            retryMaxDelayMs: 400
            """
        let set = try #require(
            try Self.parse(Self.yaml(transport: "http2", appLines: lines, files: files)).apps["a"]?.connection
        )
        #expect(set.minConnections == 3)
        #expect(set.connectTimeout == .milliseconds(1500) && set.writeTimeout == .milliseconds(2500))
        #expect(set.idleTimeout == .seconds(60))
        #expect(set.reconnectBaseDelay == .milliseconds(50) && set.reconnectMaxDelay == .milliseconds(800))
        #expect(
            set.retryLimit == 0 && set.retryBaseDelay == .milliseconds(200) && set.retryMaxDelay == .milliseconds(400)
        )
        let never = try Self.parse(Self.yaml(transport: "http2", appLines: "idleTimeoutMs: 0", files: files))
        #expect(never.apps["a"]?.connection.idleTimeout == nil)
    }

    @Test("Connection settings out of range, or a lower bound above its upper bound, stop loading with a sentence")
    func connectionSettingErrors() throws {
        let files = try Files()
        func error(_ lines: String) -> String? { Self.error(Self.yaml(appLines: lines, files: files)) }
        #expect(
            error("connectTimeoutMs: 0") == "apps.a.connectTimeoutMs must be a whole number from 1 to 3600000, not 0."
        )
        #expect(
            error("writeTimeoutMs: -5") == "apps.a.writeTimeoutMs must be a whole number from 1 to 3600000, not -5."
        )
        #expect(
            error("reconnectBaseDelayMs: 0")
                == "apps.a.reconnectBaseDelayMs must be a whole number from 1 to 3600000, not 0."
        )
        #expect(
            error("retryMaxDelayMs: 1.5") == "apps.a.retryMaxDelayMs must be a whole number from 1 to 3600000, not 1.5."
        )
        #expect(
            error("idleTimeoutMs: -1")
                == "apps.a.idleTimeoutMs must be 0 (never close an idle connection) or a whole number from 1 to 86400000, not -1."
        )
        #expect(error("minConnections: -1") == "apps.a.minConnections must be a whole number from 0 to 64, not -1.")
        #expect(error("retryLimit: -1") == "apps.a.retryLimit must be a whole number from 0 to 1000, not -1.")
        #expect(
            error("poolSize: 2\nminConnections: 3")
                == "apps.a.minConnections (3) must not be more than poolSize (2); lower minConnections or raise poolSize."
        )
        #expect(
            error("reconnectBaseDelayMs: 6000")
                == "apps.a.reconnectBaseDelayMs (6000) must not be more than reconnectMaxDelayMs (5000); "
                + "lower reconnectBaseDelayMs or raise reconnectMaxDelayMs."
        )
        #expect(
            error("retryBaseDelayMs: 500\nretryMaxDelayMs: 100")
                == "apps.a.retryBaseDelayMs (500) must not be more than retryMaxDelayMs (100); "
                + "lower retryBaseDelayMs or raise retryMaxDelayMs."
        )
    }

    // MARK: Credentials without files

    static let secretKey = "-----BEGIN PRIVATE KEY-----\nTOPSECRETKEYMATERIAL\n-----END PRIVATE KEY-----\n"
    static let certificate = "-----BEGIN CERTIFICATE-----\nPUBLICCERTIFICATE\n-----END CERTIFICATE-----\n"

    /// `text` as a YAML block scalar under `key`.
    static func block(_ key: String, _ text: String) -> String {
        "\(key): |\n" + text.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n")
    }

    @Test("Each credential can be given inline or from an environment variable, as data labelled with the setting")
    func inlineAndEnvironmentCredentials() throws {
        let files = try Files()
        let inline = try Self.parse(
            Self.yaml(
                credentials: Self.block("certificatePem", Self.certificate) + "\n"
                    + Self.block("keyPem", Self.secretKey),
                files: files
            )
        )
        #expect(
            inline.apps["a"]?.environments[.production]?.credentials
                == .pem(
                    certificate: .data(
                        Array(Self.certificate.utf8),
                        label: "given in \(Self.environmentPath).certificatePem"
                    ),
                    key: .data(Array(Self.secretKey.utf8), label: "given in \(Self.environmentPath).keyPem")
                )
        )

        let fromEnvironment = try Self.parse(
            Self.yaml(
                credentials: "certificate: \(files.path("cert.pem"))\nkeyPemEnv: APNS_KEY\npassphraseEnv: APNS_PASS",
                files: files
            ),
            environment: ["APNS_KEY": Self.secretKey, "APNS_PASS": "pass phrase"]
        )
        let production = try #require(fromEnvironment.apps["a"]?.environments[.production])
        #expect(
            production.credentials
                == .pem(
                    certificate: .file(files.path("cert.pem")),
                    key: .data(Array(Self.secretKey.utf8), label: "from APNS_KEY (\(Self.environmentPath).keyPemEnv)")
                )
        )
        #expect(production.passphrase == "pass phrase")

        let p12 = Data([0x30, 0x82, 0x01, 0x02, 0xFF])
        let base64 = try Self.parse(Self.yaml(credentials: "pkcs12Base64: \(p12.base64EncodedString())", files: files))
        #expect(
            base64.apps["a"]?.environments[.production]?.credentials
                == .pkcs12(.data(Array(p12), label: "given in \(Self.environmentPath).pkcs12Base64"))
        )
        // Line breaks, as `base64` writes them by default, are allowed.
        let wrapped = try Self.parse(
            Self.yaml(credentials: "pkcs12Base64Env: APNS_P12", files: files),
            environment: ["APNS_P12": "MIIB\nAv8=\n"]
        )
        #expect(
            wrapped.apps["a"]?.environments[.production]?.credentials
                == .pkcs12(.data(Array(p12), label: "from APNS_P12 (\(Self.environmentPath).pkcs12Base64Env)"))
        )

        let token = try Self.parse(
            Self.yaml(
                transport: "http2",
                credentials: "signingKeyPemEnv: APNS_P8\nkeyId: ABCDE12345\nteamId: TEAM123456",
                files: files
            ),
            environment: ["APNS_P8": Self.secretKey]
        )
        #expect(
            token.apps["a"]?.environments[.production]?.credentials
                == .token(
                    signingKey: .data(
                        Array(Self.secretKey.utf8),
                        label: "from APNS_P8 (\(Self.environmentPath).signingKeyPemEnv)"
                    ),
                    keyId: "ABCDE12345",
                    teamId: "TEAM123456"
                )
        )
    }

    @Test("A variable named by a credential setting is not warned about, even with the APN_WORKER_ prefix")
    func namedVariablesAreNotUnknownSettings() throws {
        let files = try Files()
        let config = try Self.parse(
            Self.yaml(
                credentials: "certificate: \(files.path("cert.pem"))\nkeyPemEnv: APN_WORKER_APNS_KEY",
                files: files
            ),
            environment: ["APN_WORKER_APNS_KEY": Self.secretKey, "APN_WORKER_TYPO": "1"]
        )
        #expect(config.warnings == ["APN_WORKER_TYPO is not a setting of apn-worker run; it was ignored."])
    }

    @Test(
        "Two sources for one credential, an unset variable, a value that is not a variable name or not base64: one sentence each"
    )
    func credentialSourceErrors() throws {
        let files = try Files()
        let path = Self.environmentPath
        #expect(
            Self.error(
                Self.yaml(
                    credentials:
                        "certificate: \(files.path("cert.pem"))\ncertificatePemEnv: C\nkey: \(files.path("key.pem"))",
                    files: files
                )
            )
                == "\(path).certificate and certificatePemEnv cannot both be set; give the PEM certificate one way only: "
                + "certificate, certificatePem or certificatePemEnv."
        )
        #expect(
            Self.error(
                Self.yaml(credentials: "certificate: \(files.path("cert.pem"))\nkeyPemEnv: APNS_KEY", files: files)
            )
                == "\(path).keyPemEnv names the environment variable APNS_KEY, which is not set or is empty; set it to the credential, "
                + "or give the credential another way."
        )
        // The secret itself pasted where a variable's name belongs is not repeated.
        let pasted = Self.error(
            Self.yaml(
                credentials: "certificate: \(files.path("cert.pem"))\n" + Self.block("keyPemEnv", Self.secretKey),
                files: files
            )
        )
        #expect(
            pasted
                == "\(path).keyPemEnv must name an environment variable (letters, digits and _, such as APNS_KEY); what is set there "
                + "is not a name, and is not shown in case it is the secret itself."
        )
        #expect(
            Self.error(
                Self.yaml(credentials: "pkcs12Base64Env: APNS_P12", files: files),
                environment: ["APNS_P12": "TOPSECRET***"]
            )
                == "\(path).pkcs12Base64Env must give the PKCS#12 bundle in base64 (for example the output of base64 -w0 app.p12); "
                + "the value of APNS_P12 is not base64 and is not shown."
        )
        #expect(
            Self.error(Self.yaml(credentials: "certificatePem: x\npkcs12Base64: AAAA", files: files))
                == "\(path).pfx cannot be used together with certificate and key; set either pfx or certificate and key."
        )
    }

    @Test(
        "A configuration printed, reflected or dumped shows where a credential came from, never the credential or passphrase"
    )
    func credentialsAreNeverPrinted() throws {
        let files = try Files()
        let config = try Self.parse(
            Self.yaml(
                credentials: Self.block("certificatePem", Self.certificate)
                    + "\nkeyPemEnv: APNS_KEY\npassphraseEnv: APNS_PASS",
                files: files
            ),
            environment: ["APNS_KEY": Self.secretKey, "APNS_PASS": "PASSPHRASESECRET"]
        )
        var dumped = ""
        dump(config, to: &dumped)
        for text in [String(describing: config), String(reflecting: config), dumped, "\(config.apps)"] {
            #expect(!text.contains("TOPSECRETKEYMATERIAL"))
            #expect(!text.contains("PUBLICCERTIFICATE"))
            #expect(!text.contains("PASSPHRASESECRET"))
        }
        #expect(String(describing: config).contains("from APNS_KEY (\(Self.environmentPath).keyPemEnv)"))
    }
}
