import Foundation
import PushConfiguration
import Testing

/// `verifyServer: false`: the app environments that do not verify Apple's certificate, each
/// warned of at start.
@Suite struct InsecureTLSSettingsTests {
    typealias Files = AppSettingsTests.Files

    // MARK: verifyServer

    @Test("verifyServer: false is a warning at start, naming the app environment and the risk")
    func unverifiedGatewayIsAWarning() throws {
        let files = try Files()
        let config = try SecretSettings.load(SecretSettings.yaml(files: files, environmentLines: "verifyServer: false"))
        #expect(config.insecureEnvironments.map { "\($0.app) \($0.environment)" } == ["a production"])
        #expect(
            config.warnings == [WorkerConfiguration.insecureTLSWarning(app: "a", environment: .production)]
        )
        #expect(config.warnings.first?.hasPrefix("apps.a.environments.production.verifyServer is false: ") == true)
        #expect(try SecretSettings.load(SecretSettings.yaml(files: files)).insecureEnvironments.isEmpty)
    }
}
