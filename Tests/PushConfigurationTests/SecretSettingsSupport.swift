import Foundation
import PushConfiguration
import Testing

/// What the tests of secrets in the configuration share: a config file for app `a` with its
/// credential files, loaded as `apn-worker run` loads it.
enum SecretSettings {
    typealias Files = AppSettingsTests.Files

    /// App `a` with certificate and key files, `worker`, `kafka` and `redis` lines added to their
    /// sections, and `environmentLines` under its production environment.
    static func yaml(
        files: Files,
        worker: String = "",
        kafka: String = "",
        redis: String = "",
        environmentLines: String = ""
    ) -> String {
        """
        worker:
          id: w
        \(worker)
        kafka:
          bootstrapServers: "127.0.0.1:9092"
        \(kafka)
        redis:
        \(redis.isEmpty ? "  url: \"redis://127.0.0.1:6379/0\"" : redis)
        apps:
          a:
            environments:
              production:
                certificate: \(files.path("cert.pem"))
                key: \(files.path("key.pem"))
        \(environmentLines.split(separator: "\n").map { "        \($0)" }.joined(separator: "\n"))

        """
    }

    static func load(
        _ text: String,
        environment: [String: String] = [:],
        overrides: ConfigurationOverrides = ConfigurationOverrides()
    ) throws(ConfigurationError) -> WorkerConfiguration {
        try WorkerConfiguration.parse(
            fileContents: text,
            path: "/tmp/config.yaml",
            overrides: overrides,
            environment: environment,
            hostname: "h",
            pid: 1
        )
    }

    static func error(
        _ text: String,
        environment: [String: String] = [:],
        overrides: ConfigurationOverrides = ConfigurationOverrides()
    ) -> String? {
        do {
            _ = try load(text, environment: environment, overrides: overrides)
            return nil
        } catch {
            return error.message
        }
    }

    /// Writes `contents` to `name` among `files` with `mode`, and returns its path.
    @discardableResult
    static func write(_ name: String, _ contents: String, mode: Int = 0o600, in files: Files) -> String {
        let path = files.path(name)
        _ = FileManager.default.createFile(
            atPath: path,
            contents: Data(contents.utf8),
            attributes: [.posixPermissions: mode]
        )
        return path
    }
}
