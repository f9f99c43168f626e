import Foundation
import PushLocalStack

#if canImport(Glibc)
import Glibc
#endif

/// A tinyproxy (Debian's `tinyproxy-bin`) on 127.0.0.1, run in the foreground from a
/// generated configuration: an HTTP proxy the project did not write, for the `CONNECT` tunnel
/// tests. ``stop()`` kills it (as a crash would) and ``start()`` starts it again on the same
/// port.
public final class TinyProxy: @unchecked Sendable {
    public let port: Int
    private let directory: String
    // Guarded by `lock`.
    private let lock = NSLock()
    private var process: Process?

    /// Writes the configuration: `Port`, `Listen 127.0.0.1`, `Allow 127.0.0.1`, then `extra`
    /// lines, such as `BasicAuth user pass` or `ConnectPort 443`.
    public init(extra: [String] = []) throws {
        port = try RedisServerProcess.freePort()
        directory = try Paths.temporaryDirectory()
        let lines =
            [
                "Port \(port)", "Listen 127.0.0.1", "Allow 127.0.0.1", "Timeout 600", "MaxClients 200",
                "LogLevel Info",
            ] + extra
        try (lines.joined(separator: "\n") + "\n").write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// `http://[user:password@]127.0.0.1:port`.
    public func url(user: String? = nil, password: String? = nil) -> String {
        guard let user else { return "http://127.0.0.1:\(port)" }
        return "http://\(user):\(password ?? "")@127.0.0.1:\(port)"
    }

    /// Starts tinyproxy and returns once it accepts connections (within 10 s).
    public func start() async throws {
        let config = configPath
        let logPath = self.logPath
        let process = try await offPool {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["tinyproxy", "-d", "-c", config]
            process.standardInput = FileHandle.nullDevice
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
            let log = FileHandle(forWritingAtPath: logPath)
            process.standardOutput = log
            process.standardError = log
            try process.run()
            return process
        }
        lock.withLock { self.process = process }
        let deadline = ContinuousClock.now + .seconds(10)
        let port = self.port
        while ContinuousClock.now < deadline {
            if !process.isRunning {
                process.waitUntilExit()
                if process.terminationStatus == 127 {
                    throw TinyProxyError("tinyproxy is not installed; install Debian's tinyproxy-bin")
                }
                throw TinyProxyError("tinyproxy exited with status \(process.terminationStatus); log:\n\(log)")
            }
            if try await offPool({ RedisServerProcess.acceptsConnections(port: port) }) { return }
            try await Task.sleep(for: .milliseconds(10))  // poll interval, not synchronisation
        }
        kill()
        throw TinyProxyError("tinyproxy on port \(port) did not accept connections within 10 s; log:\n\(log)")
    }

    /// Kills tinyproxy with SIGKILL, which ends every tunnel through it at once, and waits
    /// until it has exited.
    public func stop() async {
        guard let process = lock.withLock({ self.process }) else { return }
        if process.isRunning { _ = Glibc.kill(process.processIdentifier, SIGKILL) }
        _ = try? await offPool { process.waitUntilExit() }
        lock.withLock { self.process = nil }
    }

    private func kill() {
        guard let process = lock.withLock({ self.process }), process.isRunning else { return }
        _ = Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    private var configPath: String { directory + "/tinyproxy.conf" }
    private var logPath: String { directory + "/tinyproxy.log" }

    /// What tinyproxy logged, for failure messages.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "(no log)" }
}

public struct TinyProxyError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
