import Foundation
import PushConfiguration
import PushRedis
import Testing

// What the configuration tests share: a directory of credential files and configs, and the
// parsing entry points with their errors as sentences.

/// A temporary directory holding credential files and config files; removed on deinit.
final class Fixture {
    let directory: String

    init() throws {
        directory =
            FileManager.default.temporaryDirectory
            .appendingPathComponent("apn-worker-config-tests-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for name in ["cert.pem", "key.pem", "app.p12", "ca.pem", "sandbox-cert.pem", "sandbox-key.pem"] {
            write(name, "-----BEGIN PLACEHOLDER-----\n")
        }
        write("passphrase.txt", "s3cret pass\n")
    }

    deinit {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Writes `contents` to `name` in the directory, readable by its owner only (as files
    /// holding secrets should be), and returns its absolute path.
    @discardableResult
    func write(_ name: String, _ contents: String) -> String {
        let path = self.path(name)
        _ = FileManager.default.createFile(
            atPath: path,
            contents: Data(contents.utf8),
            attributes: [.posixPermissions: 0o600]
        )
        return path
    }

    func path(_ name: String) -> String { "\(directory)/\(name)" }

    /// A minimal valid YAML config with one production app, plus `extra` lines appended.
    func minimalYAML(app: String = "", extra: String = "") -> String {
        """
        kafka:
          bootstrapServers: "127.0.0.1:9092"
        redis:
          url: "redis://127.0.0.1:6379/0"
        apps:
          com.example.app:
            environments:
              production:
                certificate: \(path("cert.pem"))
                key: \(path("key.pem"))
        \(app)
        \(extra)
        """
    }
}

/// The message of the error `body` throws, or `nil` when it succeeds.
func errorMessage(_ body: () throws(ConfigurationError) -> WorkerConfiguration) -> String? {
    do {
        _ = try body()
        return nil
    } catch {
        return error.message
    }
}

func parse(
    _ text: String,
    path: String = "/tmp/config.yaml",
    overrides: ConfigurationOverrides = .init(),
    environment: [String: String] = [:]
) throws(ConfigurationError) -> WorkerConfiguration {
    try WorkerConfiguration.parse(
        fileContents: text,
        path: path,
        overrides: overrides,
        environment: environment,
        hostname: "host",
        pid: 42
    )
}

func parseError(
    _ text: String,
    path: String = "/tmp/config.yaml",
    overrides: ConfigurationOverrides = .init(),
    environment: [String: String] = [:]
) -> String? {
    errorMessage { () throws(ConfigurationError) in
        try parse(text, path: path, overrides: overrides, environment: environment)
    }
}

extension WorkerConfiguration.Worker {
    func with(dedupeBuckets: Int) -> Self {
        var copy = self
        copy.dedupeBuckets = dedupeBuckets
        return copy
    }
}
