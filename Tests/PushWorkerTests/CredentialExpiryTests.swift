import APNSCore
import APNSSimulator
import CoreMetrics
import Foundation
import Logging
import Prometheus
import PushConfiguration
import Synchronization
import Testing

@testable import PushWorker

/// The end of validity of the credentials a worker presents to Apple: the gauge it exports for
/// each client certificate, and the warning it logs when one ends within 30 days.
@Suite struct CredentialExpiryTests {
    /// Now, in whole seconds (certificates carry whole seconds).
    static let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
    static let day: TimeInterval = 86_400

    /// A binary app `a` whose production certificate ends at `notValidAfter`, given through the
    /// environment, and the certificate.
    static func binaryApp(
        notValidAfter: Date
    ) throws -> (configuration: WorkerConfiguration, certificate: TestCertificates.Pair) {
        let pair = try PoolSettingsTests.certificates.makeClient(
            notValidBefore: notValidAfter - 365 * day,
            notValidAfter: notValidAfter
        )
        let configuration = try PoolSettingsTests.configuration(
            transport: "binary",
            credentials: "certificatePemEnv: CERT\nkeyPemEnv: KEY",
            environment: ["CERT": pair.certificatePEM, "KEY": pair.keyPEM]
        )
        return (configuration, pair)
    }

    /// An HTTP/2 app `a` authenticating with a provider token.
    static func tokenApp() throws -> WorkerConfiguration {
        let key = PoolSettingsTests.signingKey.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n")
        return try PoolSettingsTests.configuration(
            transport: "http2",
            credentials: "signingKeyPem: |\n\(key)\nkeyId: ABCDE12345\nteamId: TEAM123456"
        )
    }

    /// The value of each series of `name` in a Prometheus text exposition, by its label text.
    static func samples(_ name: String, in text: String) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix(name + "{") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...])
            else { continue }
            samples[String(line[line.index(line.startIndex, offsetBy: name.count)..<space])] = value
        }
        return samples
    }

    @Test("The expiry gauge of a certificate-authenticated app environment is the certificate's notAfter")
    func gaugeIsTheCertificatesNotAfter() throws {
        let (configuration, pair) = try Self.binaryApp(notValidAfter: Self.now + 200 * Self.day)
        let registry = PrometheusCollectorRegistry()
        let worker = try Worker(
            configuration: configuration,
            metrics: WorkerMetrics(factory: PrometheusMetricsFactory(registry: registry))
        )
        worker.updateMetrics()
        let samples = Self.samples(MetricCatalogue.credentialExpiry.name, in: registry.emitToString())
        #expect(
            samples == [
                #"{app="a",env="production",kind="certificate"}"#: pair.certificate.notValidAfter.timeIntervalSince1970
            ]
        )
        #expect(pair.certificate.notValidAfter == Self.now + 200 * Self.day)
    }

    @Test("A provider-token app environment exports no expiry: a .p8 key does not expire")
    func noGaugeForASigningKey() throws {
        let registry = PrometheusCollectorRegistry()
        let worker = try Worker(
            configuration: try Self.tokenApp(),
            metrics: WorkerMetrics(factory: PrometheusMetricsFactory(registry: registry))
        )
        worker.updateMetrics()
        let text = registry.emitToString()
        #expect(Self.samples(MetricCatalogue.credentialExpiry.name, in: text).isEmpty)
        #expect(text.contains("apn_worker_ready"))
        #expect(worker.expiringCredentials.isEmpty)
    }

    @Test("A certificate ending in 20 days is warned about: app, env, subject, end, days left and what to do")
    func warningWithin30Days() throws {
        let (configuration, pair) = try Self.binaryApp(notValidAfter: Self.now + 20 * Self.day + 3600)
        let records = RecordedLogs()
        let worker = try Worker(
            configuration: configuration,
            logger: Logger(label: "test") { _ in RecordingLogHandler(records: records) }
        )
        // What the worker calls when it starts, and then once a day.
        #expect(worker.warnOfExpiringCredentials(at: Self.now) == 1)
        let logged = records.all
        try #require(logged.count == 1)
        let record = logged[0]
        let subject = String(describing: pair.certificate.subject)
        let end = pair.certificate.notValidAfter.formatted(.iso8601)
        #expect(record.level == .warning)
        #expect(
            record.message
                == "The certificate of app a for production (\(subject)) expires on \(end), in 20 days; renew it in "
                + "the Apple Developer account, put the new certificate and key in the app's configuration and "
                + "restart the workers before then."
        )
        #expect(record.metadata["app"] == "a" && record.metadata["env"] == "production")
        #expect(record.metadata["credential.subject"] == "\(subject)")
        #expect(record.metadata["credential.notAfter"] == "\(end)")
        #expect(record.metadata["credential.daysLeft"] == "20")
    }

    @Test("A certificate ending in 31 days, or a provider token, logs no warning")
    func noWarningFurtherAway() throws {
        let records = RecordedLogs()
        let logger = Logger(label: "test") { _ in RecordingLogHandler(records: records) }
        let (configuration, _) = try Self.binaryApp(notValidAfter: Self.now + 31 * Self.day)
        #expect(try Worker(configuration: configuration, logger: logger).warnOfExpiringCredentials(at: Self.now) == 0)
        #expect(try Worker(configuration: Self.tokenApp(), logger: logger).warnOfExpiringCredentials(at: Self.now) == 0)
        #expect(records.all.filter { $0.level >= .warning }.isEmpty)
    }

    @Test("The warning starts exactly 30 days before the end, counts whole days, and says when it has passed")
    func warningBoundaries() {
        let end = Self.now + 30 * Self.day
        let credential = CredentialExpiry(
            app: "a",
            environment: .sandbox,
            kind: .certificate,
            subject: "CN=x",
            notValidAfter: end
        )
        #expect(credential.warning(at: end - 30 * Self.day - 1) == nil)
        #expect(credential.warning(at: end - 30 * Self.day)?.contains(", in 30 days;") == true)
        #expect(credential.warning(at: end - 1.5 * Self.day)?.contains(", in 1 day;") == true)
        #expect(credential.warning(at: end - 60)?.contains(", in less than a day;") == true)
        #expect(credential.daysLeft(at: end + 60) == -1)
        let passed = credential.warning(at: end + 60)
        #expect(passed?.hasPrefix("The certificate of app a for sandbox (CN=x) expired on ") == true)
        #expect(passed?.contains("Apple refuses connections made with it") == true)
        #expect(credential.timestamp == Int(end.timeIntervalSince1970))
    }

    @Test("An expired certificate stops the worker before it starts, with a sentence naming the setting")
    func expiredCertificateIsRefused() throws {
        let (configuration, _) = try Self.binaryApp(notValidAfter: Self.now - Self.day)
        let error = #expect(throws: ConfigurationError.self) { try Worker(configuration: configuration) }
        #expect(error?.message.hasPrefix("apps.a.environments.production: the certificate ") == true)
        #expect(error?.message.contains(" expired on ") == true)
    }
}

/// Log records kept in memory, in the order they were logged.
final class RecordedLogs: Sendable {
    struct Record: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: [String: String]
    }

    private let records = Mutex<[Record]>([])

    var all: [Record] { records.withLock { $0 } }

    func append(_ record: Record) { records.withLock { $0.append(record) } }
}

/// A log handler that keeps every record in a ``RecordedLogs``.
struct RecordingLogHandler: LogHandler {
    let records: RecordedLogs
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        records.append(
            RecordedLogs.Record(
                level: event.level,
                message: event.message.description,
                metadata: merged.mapValues { "\($0)" }
            )
        )
    }
}
