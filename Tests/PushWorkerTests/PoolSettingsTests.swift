import APNSCore
import APNSSimulator
import Foundation
import PushConfiguration
import Testing

@testable import PushWorker

/// What an app's settings become in its delivery pools: the MDM topic, the connection settings,
/// and credentials from the config file's text or the environment, whose failures name the
/// setting and never show the credential.
@Suite struct PoolSettingsTests {
    static let certificates = try! TestCertificates()
    static let signingKey = TestCertificates.unrelatedKeyPEM()

    static func configuration(
        transport: String,
        app: String = "",
        credentials: String,
        environment: [String: String] = [:]
    ) throws
        -> WorkerConfiguration
    {
        let yaml = """
            kafka: {bootstrapServers: "127.0.0.1:9092"}
            redis: {url: "redis://127.0.0.1:6379/0"}
            apps:
              a:
                transport: \(transport)
            \(app.split(separator: "\n").map { "    \($0)" }.joined(separator: "\n"))
                environments:
                  production:
            \(credentials.split(separator: "\n").map { "        \($0)" }.joined(separator: "\n"))
            """
        return try WorkerConfiguration.parse(
            fileContents: yaml,
            path: "/tmp/c.yaml",
            environment: environment,
            hostname: "h",
            pid: 1
        )
    }

    static let connectionLines = """
        poolSize: 3
        minConnections: 2
        connectTimeoutMs: 1500
        writeTimeoutMs: 2500
        idleTimeoutMs: 60000
        reconnectBaseDelayMs: 50
        reconnectMaxDelayMs: 800
        retryLimit: 7
        retryBaseDelayMs: 200
        retryMaxDelayMs: 400
        """

    @Test("A binary app's connection settings and its credentials from the environment reach its pool")
    func binaryPool() throws {
        let configuration = try Self.configuration(
            transport: "binary",
            app: Self.connectionLines,
            credentials: "certificatePemEnv: CERT\nkeyPemEnv: KEY",
            environment: ["CERT": Self.certificates.client.certificatePEM, "KEY": Self.certificates.client.keyPEM]
        )
        let pools = try PoolSettings.all(for: configuration)
        guard case .binary(let gateway)? = pools.first?.value.transport else {
            Issue.record("not a binary pool")
            return
        }
        #expect(gateway.credentials.subject.contains("com.example.app"))
        #expect(gateway.maxConnections == 3 && gateway.minConnections == 2)
        #expect(gateway.connectTimeout == .milliseconds(1500) && gateway.writeTimeout == .milliseconds(2500))
        #expect(gateway.idleTimeout == .seconds(60))
        #expect(gateway.reconnectBaseDelay == .milliseconds(50) && gateway.reconnectMaxDelay == .milliseconds(800))
    }

    @Test("An HTTP/2 app's mdmTopic, connection and retry settings and its inline signing key reach its pool")
    func http2Pool() throws {
        let key = Self.signingKey.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n")
        let configuration = try Self.configuration(
            transport: "http2",
            app: Self.connectionLines + "\nmdmTopic: com.apple.mgmt.External.abc",
            credentials: "signingKeyPem: |\n\(key)\nkeyId: ABCDE12345\nteamId: TEAM123456"
        )
        let pools = try PoolSettings.all(for: configuration)
        guard case .http2(let gateway)? = pools.first?.value.transport else {
            Issue.record("not an HTTP/2 pool")
            return
        }
        #expect(gateway.mdmTopic == "com.apple.mgmt.External.abc")
        #expect(gateway.maxConnections == 3 && gateway.minConnections == 2)
        #expect(gateway.connectTimeout == .milliseconds(1500) && gateway.idleTimeout == .seconds(60))
        #expect(gateway.reconnectBaseDelay == .milliseconds(50) && gateway.reconnectMaxDelay == .milliseconds(800))
        #expect(gateway.defaultRetryLimit == 7)
        #expect(gateway.retryBaseDelay == .milliseconds(200) && gateway.retryMaxDelay == .milliseconds(400))
    }

    @Test("An HTTP/2 app's default settings are the client's own (APNSHTTP2Configuration's defaults)")
    func http2Defaults() throws {
        let key = Self.signingKey.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n")
        let configuration = try Self.configuration(
            transport: "http2",
            credentials: "signingKeyPem: |\n\(key)\nkeyId: ABCDE12345\nteamId: TEAM123456"
        )
        guard case .http2(let gateway)? = try PoolSettings.all(for: configuration).first?.value.transport else {
            Issue.record("not an HTTP/2 pool")
            return
        }
        #expect(gateway.mdmTopic == nil && gateway.minConnections == 0)
        #expect(gateway.connectTimeout == .seconds(10) && gateway.idleTimeout == .seconds(300))
        #expect(gateway.reconnectBaseDelay == .milliseconds(100) && gateway.reconnectMaxDelay == .seconds(5))
        #expect(gateway.defaultRetryLimit == 3)
        #expect(gateway.retryBaseDelay == .seconds(1) && gateway.retryMaxDelay == .seconds(60))
    }

    @Test("A PKCS#12 bundle in base64 from the environment loads")
    func pkcs12FromTheEnvironment() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "pool-settings-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Self.certificates.client.certificatePEM.write(
            toFile: directory + "/c.pem",
            atomically: false,
            encoding: .utf8
        )
        try Self.certificates.client.keyPEM.write(toFile: directory + "/k.pem", atomically: false, encoding: .utf8)
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        openssl.arguments = [
            "pkcs12", "-export", "-in", directory + "/c.pem", "-inkey", directory + "/k.pem", "-out",
            directory + "/c.p12", "-passout",
            "pass:s3cret",
        ]
        try openssl.run()
        openssl.waitUntilExit()
        let bundle = try Data(contentsOf: URL(fileURLWithPath: directory + "/c.p12")).base64EncodedString()
        let configuration = try Self.configuration(
            transport: "binary",
            credentials: "pkcs12Base64Env: P12\npassphraseEnv: P12_PASS",
            environment: ["P12": bundle, "P12_PASS": "s3cret"]
        )
        guard case .binary(let gateway)? = try PoolSettings.all(for: configuration).first?.value.transport else {
            Issue.record("not a binary pool")
            return
        }
        #expect(gateway.credentials.subject.contains("com.example.app"))
    }

    @Test("A credential from the environment or the text that cannot be loaded is named by its setting and not shown")
    func unloadableCredentialsAreNamedNotShown() throws {
        let secret = "-----BEGIN PRIVATE KEY-----\nU0VDUkVUU0VDUkVUU0VDUkVU\n-----END PRIVATE KEY-----\n"
        func message(transport: String, _ credentials: String, _ environment: [String: String]) throws -> String? {
            let configuration = try Self.configuration(
                transport: transport,
                credentials: credentials,
                environment: environment
            )
            do {
                _ = try PoolSettings.all(for: configuration)
                return nil
            } catch {
                return error.message
            }
        }
        let key = try message(
            transport: "binary",
            "certificatePemEnv: CERT\nkeyPemEnv: KEY",
            ["CERT": Self.certificates.client.certificatePEM, "KEY": secret]
        )
        #expect(
            key?.hasPrefix(
                "apps.a.environments.production: the private key from KEY (apps.a.environments.production.keyPemEnv) is not a readable "
                    + "PEM private key"
            ) == true,
            "\(key ?? "")"
        )
        let signingKey = try message(
            transport: "http2",
            "signingKeyPem: \"\(secret.replacingOccurrences(of: "\n", with: "\\n"))\"\nkeyId: ABCDE12345\nteamId: TEAM123456",
            [:]
        )
        #expect(
            signingKey?.contains("the signing key given in apps.a.environments.production.signingKeyPem") == true,
            "\(signingKey ?? "")"
        )
        for text in [key, signingKey] { #expect(text?.contains("U0VDUkVU") == false) }
    }
}
