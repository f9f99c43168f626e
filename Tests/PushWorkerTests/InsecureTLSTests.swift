import APNSCore
import Prometheus
import PushConfiguration
import Testing

@testable import PushWorker

/// An app environment that does not verify Apple's certificate (`verifyServer: false`) is
/// exported as `apn_worker_insecure_tls` 1 from the worker's start; one that verifies as 0.
@Suite struct InsecureTLSTests {
    static func gauge(verifyServer: Bool) throws -> [String: Double] {
        let configuration = try PoolSettingsTests.configuration(
            transport: "http2",
            credentials: "certificatePemEnv: CERT\nkeyPemEnv: KEY\nverifyServer: \(verifyServer)",
            environment: [
                "CERT": PoolSettingsTests.certificates.client.certificatePEM,
                "KEY": PoolSettingsTests.certificates.client.keyPEM,
            ]
        )
        let registry = PrometheusCollectorRegistry()
        _ = try Worker(
            configuration: configuration,
            metrics: WorkerMetrics(factory: PrometheusMetricsFactory(registry: registry))
        )
        return CredentialExpiryTests.samples(MetricCatalogue.insecureTLS.name, in: registry.emitToString())
    }

    @Test("verifyServer false sets apn_worker_insecure_tls to 1 for the app environment; true sets it to 0")
    func gaugeFollowsVerifyServer() throws {
        #expect(try Self.gauge(verifyServer: false) == [#"{app="a",env="production"}"#: 1])
        #expect(try Self.gauge(verifyServer: true) == [#"{app="a",env="production"}"#: 0])
    }

    @Test("A pool's transport says whether it verifies the server, as the pool-open warning reads it")
    func transportVerifiesServer() throws {
        for verifyServer in [false, true] {
            let configuration = try PoolSettingsTests.configuration(
                transport: "binary",
                credentials: "certificatePemEnv: CERT\nkeyPemEnv: KEY\nverifyServer: \(verifyServer)",
                environment: [
                    "CERT": PoolSettingsTests.certificates.client.certificatePEM,
                    "KEY": PoolSettingsTests.certificates.client.keyPEM,
                ]
            )
            let pool = try #require(try PoolSettings.all(for: configuration).first?.value)
            #expect(pool.transport.verifiesServer == verifyServer)
            #expect(pool.feedback?.verifyServer == verifyServer)
        }
    }
}
