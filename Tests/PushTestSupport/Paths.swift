import Foundation
import PushLocalStack

public enum Paths {
    /// The project root, found from this file's location.
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// The `apn-worker` executable built next to the test bundle.
    public static var executable: String { built("apn-worker") }

    /// The `apn-bench` executable (the benchmarks) built next to the test bundle.
    public static var benchExecutable: String { built("apn-bench") }

    private static func built(_ name: String) -> String {
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return root + "/.build/release/" + name
    }

    public static func temporaryDirectory() throws -> String {
        let dir = NSTemporaryDirectory() + "apn-worker-e2e-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }
}

/// Runs a command to completion, without the proxy variables of the test run's environment:
/// the servers the commands reach are on this machine.
public func run(
    _ executable: String,
    _ arguments: [String]
) async throws -> (status: Int32, stdout: String, stderr: String) {
    try await ChildProcess(executable, arguments, environment: ["https_proxy": "", "HTTPS_PROXY": ""]).finish()
}

/// Parses a JSON object line.
public func jsonObject(_ line: String) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
}
