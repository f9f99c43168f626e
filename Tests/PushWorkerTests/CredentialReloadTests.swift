import APNSCore
import APNSHTTP2
import APNSHTTP2Core
import APNSSimulator
import Crypto
import Foundation
import Logging
import Prometheus
import PushConfiguration
import PushTestSupport
import Testing

@testable import PushWorker

/// Credentials reloaded without a restart, one check at a time
/// (``Worker/checkCredentials(forced:delivery:)``): files swapped in a mounted secret are read
/// through its links, checked as at start, and put in force, or refused with the sentence of the
/// start while the credentials in use stay.
@Suite struct CredentialReloadTests {
    static let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
    static let day: TimeInterval = 86_400
    static let key = PoolKey(app: "a", environment: .production)

    /// A worker of app `a` whose config file and credentials are files of one mounted secret,
    /// with its metrics and its log.
    struct Setup {
        var secret: MountedSecret
        var worker: Worker
        var registry: PrometheusCollectorRegistry
        var records: RecordedLogs

        /// The configuration as `apn-worker run` would load it now, and the sentence a worker
        /// started with it refuses to start with (`nil`: it starts).
        func startSentence() -> String? {
            do throws(ConfigurationError) {
                _ = try Worker(configuration: try Setup.load(secret.path("worker.yaml")))
                return nil
            } catch {
                return error.message
            }
        }

        static func load(_ path: String) throws(ConfigurationError) -> WorkerConfiguration {
            try WorkerConfiguration.load(
                overrides: ConfigurationOverrides(configPath: path),
                environment: [:],
                hostname: "h",
                pid: 1
            )
        }

        /// The value of each series of `metric`, by its label text.
        func samples(_ metric: MetricDescription) -> [String: Double] {
            worker.updateMetrics()
            return CredentialExpiryTests.samples(metric.name, in: registry.emitToString())
        }

        var errors: [String] { records.all.filter { $0.level == .error }.map(\.message) }

        /// The signing key app `a`'s pool signs provider tokens with.
        var signingKey: APNSSigningKey? {
            guard case .http2(let gateway)? = worker.pools[CredentialReloadTests.key]?.transport,
                case .token(let provider) = gateway.authentication
            else { return nil }
            return provider.signingKey
        }

        func check(forced: Bool = false) -> [PoolKey: CredentialCheck] {
            worker.checkCredentials(forced: forced, delivery: nil)
        }
    }

    /// App `a` on `transport`, its production environment given by `credentials` (lines that
    /// name files of the secret as `SECRET/name`), the secret holding `files` and the config file.
    static func setUp(transport: String, credentials: String, files: [String: String]) throws -> Setup {
        let directory = try Paths.temporaryDirectory() + "/secret"
        let lines = credentials.replacingOccurrences(of: "SECRET", with: directory)
        let yaml = """
            kafka: {bootstrapServers: "127.0.0.1:9092"}
            redis: {url: "redis://127.0.0.1:6379/0"}
            apps:
              a:
                transport: \(transport)
                environments:
                  production:
            \(lines.split(separator: "\n").map { "        \($0)" }.joined(separator: "\n"))

            """
        let secret = try MountedSecret(directory: directory, files: files.merging(["worker.yaml": yaml]) { a, _ in a })
        let configPath = secret.path("worker.yaml")
        let registry = PrometheusCollectorRegistry()
        let records = RecordedLogs()
        let worker = try Worker(
            configuration: try Setup.load(configPath),
            metrics: WorkerMetrics(factory: PrometheusMetricsFactory(registry: registry)),
            logger: Logger(label: "test") { _ in RecordingLogHandler(records: records) }
        ) { () throws(ConfigurationError) -> WorkerConfiguration in try Setup.load(configPath) }
        return Setup(secret: secret, worker: worker, registry: registry, records: records)
    }

    static func binary(_ pair: TestCertificates.Pair) throws -> Setup {
        try setUp(
            transport: "binary",
            credentials: "certificate: SECRET/client.pem\nkey: SECRET/client-key.pem",
            files: ["client.pem": pair.certificatePEM, "client-key.pem": pair.keyPEM]
        )
    }

    /// An HTTP/2 app signing provider tokens with key `OLDKEY0001` of the secret.
    static func tokenApp() throws -> Setup {
        try setUp(
            transport: "http2",
            credentials: "signingKey: SECRET/AuthKey.p8\nkeyId: OLDKEY0001\nteamId: TEAM123456",
            files: ["AuthKey.p8": TestCertificates.unrelatedKeyPEM()]
        )
    }

    static func client(days: Double) throws -> TestCertificates.Pair {
        try PoolSettingsTests.certificates.makeClient(notValidAfter: now + days * day)
    }

    static let labels = #"{app="a",env="production"}"#

    @Test("A renewed certificate swapped into the mounted secret is put in force, and the expiry gauge follows it")
    func renewedCertificateIsApplied() throws {
        let old = try Self.client(days: 100)
        let renewed = try Self.client(days: 400)
        let setup = try Self.binary(old)
        #expect(setup.check() == [Self.key: .unchanged])
        try setup.secret.update(["client.pem": renewed.certificatePEM, "client-key.pem": renewed.keyPEM])

        #expect(setup.check() == [Self.key: .applied])
        #expect(setup.worker.pools[Self.key]?.certificate?.notValidAfter == renewed.certificate.notValidAfter)
        #expect(
            setup.samples(MetricCatalogue.credentialExpiry) == [
                #"{app="a",env="production",kind="certificate"}"#: renewed.certificate.notValidAfter
                    .timeIntervalSince1970
            ]
        )
        #expect(setup.samples(MetricCatalogue.credentialReloadFailed) == [Self.labels: 0])
        #expect(
            setup.samples(MetricCatalogue.credentialReloads) == [
                #"{app="a",env="production",result="applied"}"#: 1
            ]
        )
        #expect(setup.errors.isEmpty)
        #expect(setup.check() == [Self.key: .unchanged])
    }

    @Test(
        "An invalid certificate keeps the old one, logs the start's sentence at error level once, and sets the failed gauge until fixed"
    )
    func invalidCertificateKeepsTheOldOne() throws {
        let old = try Self.client(days: 100)
        let setup = try Self.binary(old)
        try setup.secret.update(["client.pem": "not a certificate\n"])
        let sentence = try #require(setup.startSentence())

        #expect(setup.check() == [Self.key: .failed(sentence)])
        #expect(setup.errors == [sentence])
        #expect(setup.worker.pools[Self.key]?.certificate?.notValidAfter == old.certificate.notValidAfter)
        #expect(setup.samples(MetricCatalogue.credentialReloadFailed) == [Self.labels: 1])
        #expect(
            setup.samples(MetricCatalogue.credentialReloads) == [
                #"{app="a",env="production",result="failed"}"#: 1
            ]
        )
        // Unchanged since: not checked (nor logged) again, until asked (SIGHUP).
        #expect(setup.check().isEmpty)
        #expect(setup.errors == [sentence])
        #expect(setup.check(forced: true) == [Self.key: .failed(sentence)])
        #expect(setup.errors == [sentence, sentence])
        #expect(setup.samples(MetricCatalogue.credentialReloadFailed) == [Self.labels: 1])

        // Back to the files in use: nothing to reload, nothing failing.
        try setup.secret.update(["client.pem": old.certificatePEM])
        #expect(setup.check() == [Self.key: .unchanged])
        #expect(setup.samples(MetricCatalogue.credentialReloadFailed) == [Self.labels: 0])
    }

    @Test("A new .p8 key with its new key ID in the config file of the same secret is put in force together")
    func signingKeyAndKeyIdAreApplied() throws {
        let setup = try Self.tokenApp()
        let config = try String(contentsOfFile: setup.secret.path("worker.yaml"), encoding: .utf8)
        let newKey = TestCertificates.unrelatedKeyPEM()
        try setup.secret.update([
            "AuthKey.p8": newKey,
            "worker.yaml": config.replacingOccurrences(of: "OLDKEY0001", with: "NEWKEY0002"),
        ])

        #expect(setup.check() == [Self.key: .applied])
        let signingKey = try #require(setup.signingKey)
        #expect(signingKey.keyID == "NEWKEY0002")
        #expect(signingKey.privateKey.pemRepresentation == newKey)
        // A .p8 key has no end of validity: no expiry series before or after.
        #expect(setup.samples(MetricCatalogue.credentialExpiry).isEmpty)
    }

    @Test("An invalid .p8 key or config file keeps the key in use, with the start's sentence and the failed gauge")
    func invalidSigningKeyOrConfigKeepsTheOldOne() throws {
        let setup = try Self.tokenApp()
        let config = try String(contentsOfFile: setup.secret.path("worker.yaml"), encoding: .utf8)
        try setup.secret.update(["AuthKey.p8": "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"])
        let keySentence = try #require(setup.startSentence())
        #expect(setup.check() == [Self.key: .failed(keySentence)])

        try setup.secret.update(["worker.yaml": config + "  b: [\n"])
        let configSentence = try #require(setup.startSentence())
        #expect(configSentence != keySentence)
        #expect(setup.check() == [Self.key: .failed(configSentence)])
        #expect(setup.errors == [keySentence, configSentence])
        #expect(setup.samples(MetricCatalogue.credentialReloadFailed) == [Self.labels: 1])
        #expect(setup.signingKey?.keyID == "OLDKEY0001")
    }

    /// Every `[UInt8]` and `Data` reachable from `value` through its mirror.
    static func byteBuffers(in value: Any, depth: Int = 0) -> [[UInt8]] {
        if let bytes = value as? [UInt8] { return [bytes] }
        if let data = value as? Data { return [Array(data)] }
        guard depth < 16 else { return [] }
        return Mirror(reflecting: value).children.flatMap { byteBuffers(in: $0.value, depth: depth + 1) }
    }

    @Test("The reload remembers a SHA-256 of each credential file and of the config file, never their bytes")
    func reloadKeepsDigestsNotBytes() throws {
        let old = try Self.client(days: 100)
        let renewed = try Self.client(days: 400)
        let setup = try Self.binary(old)
        for (round, pair) in [old, renewed].enumerated() {
            let state = setup.worker.reload.withLock { $0 }
            let fingerprint = try #require(state.inUse[Self.key])
            let files = [setup.secret.path("client.pem"), setup.secret.path("client-key.pem")]
            for path in files {
                let contents = try #require(FileManager.default.contents(atPath: path))
                #expect(fingerprint.files[path] == SHA256.hash(data: contents), "\(path)")
            }
            let config = try #require(FileManager.default.contents(atPath: setup.secret.path("worker.yaml")))
            #expect(state.configFile == SHA256.hash(data: config))
            let held = Self.byteBuffers(in: state)
            for secret in [pair.keyPEM, pair.certificatePEM] {
                #expect(!held.contains(Array(secret.utf8)), "the reload state holds a credential file's bytes")
            }
            #expect(!held.contains(Array(config)), "the reload state holds the config file's bytes")
            #expect(held.allSatisfy { $0.count <= 32 }, "bytes held: \(held.map(\.count))")
            if round == 0 {
                try setup.secret.update(["client.pem": renewed.certificatePEM, "client-key.pem": renewed.keyPEM])
                #expect(setup.check() == [Self.key: .applied])
            }
        }
    }
}
