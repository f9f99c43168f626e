import Foundation
import PushRedis

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A throw-away `redis-server` on 127.0.0.1, for one test or one local stack.
///
/// It listens on a port found free by binding a socket to port 0, saves nothing unless its
/// extra arguments say so (`--appendonly yes`), and is
/// ready when it answers `PING` (polled against a deadline). A TLS server (``start(_:tls:)``
/// with `tls: true`) listens on `port` with TLS only (`--port 0 --tls-port <port>`; the
/// caller passes the certificate arguments) and is ready when `port` accepts connections. Blocking work (process
/// start/stop, socket probes) runs off Swift's cooperative pool.
public final class RedisServerProcess: @unchecked Sendable {
    public static let executable = "/usr/bin/redis-server"

    /// The program started: a path, or a name looked up on PATH.
    public let executable: String
    /// The port clients connect to: the TLS port of a TLS server.
    public let port: Int
    public let extraArguments: [String]
    /// Whether `port` speaks TLS.
    public let tls: Bool
    /// Its working directory (data and log), removed on deinit.
    let directory: URL
    // Guarded by `lock`.
    private let lock = NSLock()
    private var process: Process?

    private init(port: Int, extraArguments: [String], tls: Bool, executable: String) throws {
        self.executable = executable
        self.port = port
        self.extraArguments = extraArguments
        self.tls = tls
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("pushredis-\(port)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(at: directory)
    }

    /// A configuration pointing at this server.
    public func configuration(
        password: String? = nil,
        username: String? = nil,
        database: Int = 0,
        commandTimeout: Duration = .seconds(5)
    ) -> RedisConfiguration {
        RedisConfiguration(
            host: "127.0.0.1",
            port: port,
            username: username,
            password: password,
            database: database,
            connectTimeout: .seconds(2),
            commandTimeout: commandTimeout
        )
    }

    /// Starts `executable` on a free port; retries with a new port if another process took it.
    public static func start(
        _ extraArguments: [String] = [],
        tls: Bool = false,
        executable: String = RedisServerProcess.executable
    ) async throws -> RedisServerProcess {
        var lastError: (any Error)?
        for _ in 0..<3 {
            let server = try RedisServerProcess(
                port: try freePort(),
                extraArguments: extraArguments,
                tls: tls,
                executable: executable
            )
            do {
                try await server.start()
                return server
            } catch {
                lastError = error
            }
        }
        throw lastError!
    }

    /// Starts (or restarts) the server on `port` and waits until it answers PING (or, with
    /// TLS, accepts connections), up to `readyWithin`: a server that loads a large data set
    /// answers `-LOADING` until it has.
    public func start(readyWithin: Duration = .seconds(10)) async throws {
        let ports = tls ? ["--port", "0", "--tls-port", String(port)] : ["--port", String(port)]
        let arguments =
            ports + [
                "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", directory.path, "--logfile", logURL.path,
            ] + extraArguments
        let executable = executable
        let process = try await offPool {
            let process = Process()
            // Through env, so that a name is looked up on PATH.
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [executable] + arguments
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }
        lock.withLock { self.process = process }

        let deadline = ContinuousClock.now + readyWithin
        while ContinuousClock.now < deadline {
            if !process.isRunning {
                process.waitUntilExit()
                if process.terminationStatus == 127 {
                    throw ServerError(
                        "cannot start \(executable): not found; install redis-server or name another with its path"
                    )
                }
                throw ServerError(
                    "redis-server on port \(port) exited with status \(process.terminationStatus); log:\n\(log)"
                )
            }
            let port = self.port
            let tls = self.tls
            if try await offPool({ tls ? Self.acceptsConnections(port: port) : Self.answersPing(port: port) }) {
                return
            }
            try await Task.sleep(for: .milliseconds(10))  // poll interval, not synchronisation
        }
        kill()
        throw ServerError("redis-server on port \(port) did not answer PING within \(readyWithin); log:\n\(log)")
    }

    /// Kills the server with SIGKILL, as in a crash, and waits until it has exited.
    ///
    /// SIGKILL rather than SIGTERM: Foundation's `Process` on Linux spawns the child with the
    /// spawning thread's signal mask, and Dispatch worker threads block SIGTERM, so the
    /// server would ignore SIGTERM. The test servers hold nothing worth saving.
    public func stop() async {
        guard let process = lock.withLock({ self.process }) else { return }
        if process.isRunning { _ = sendSignal(process.processIdentifier, SIGKILL) }
        _ = try? await offPool { process.waitUntilExit() }
        lock.withLock { self.process = nil }
    }

    /// Stops the server as a service manager would: `SHUTDOWN`, after which it writes what its
    /// persistence settings ask for (the append-only file flushed with `--appendonly yes`, an RDB
    /// file with `save` points) and exits; waits until it has exited, and kills it (SIGKILL) if
    /// it has not within `timeout`. ``start()`` starts it again on the same port and directory,
    /// where it loads what it wrote. Not for a TLS server.
    public func shutdown(timeout: Duration = .seconds(30)) async throws {
        guard !tls else { throw ServerError("shutdown() speaks plain Redis; this server listens with TLS only") }
        guard let process = lock.withLock({ self.process }), process.isRunning else { return }
        let port = port
        // On success the server closes the connection without an answer.
        let reply = try await offPool { Self.send("SHUTDOWN", port: port, replyTimeout: timeout) }
        if let reply, reply.hasPrefix("-") { throw ServerError("redis-server refused SHUTDOWN: \(reply)") }
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))  // poll interval, not synchronisation
        }
        await stop()
    }

    /// Whether the server process is running.
    public var isRunning: Bool {
        lock.withLock { process?.isRunning ?? false }
    }

    /// The server's process ID while it runs.
    public var processIdentifier: Int32? {
        lock.withLock { process?.isRunning == true ? process?.processIdentifier : nil }
    }

    /// Kills the server with SIGKILL and waits until it has exited, blocking the calling thread
    /// (for clean-up that cannot wait for a task: a signal handler, `deinit`).
    public func kill() {
        let process = lock.withLock { self.process }
        guard let process, process.isRunning else { return }
        _ = sendSignal(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    private var logURL: URL { directory.appendingPathComponent("redis.log") }

    /// The server's log, for failure messages.
    public var log: String {
        (try? String(contentsOf: logURL, encoding: .utf8)) ?? "(no log)"
    }

    // MARK: - Sockets (plain POSIX, independent of the code under test)

    /// A port that was free a moment ago, below the ephemeral range when one there is
    /// (``ServerPorts``), so that a server started again on it finds it free: bind 127.0.0.1 to
    /// it, read the port, close.
    public static func freePort() throws -> Int {
        for port in ServerPorts.candidates(20) {
            if let free = try? bindAndClose(port: port) { return free }
        }
        return try bindAndClose(port: 0)
    }

    /// Binds a socket to 127.0.0.1:`port` (0: the kernel's choice), closes it, and returns the
    /// port it had.
    private static func bindAndClose(port: Int) throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ServerError("socket() failed: errno \(errno)") }
        defer { close(fd) }
        var address = loopback(port: port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else { throw ServerError("bind() failed: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw ServerError("getsockname() failed: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Whether a TCP connection to `port` succeeds.
    public static func acceptsConnections(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        } == 0
    }

    /// Connects, sends `PING`, and accepts `+PONG` or `-NOAUTH` (a password-protected server
    /// is up too). Any failure means "not yet".
    public static func answersPing(port: Int) -> Bool {
        guard let reply = send("PING", port: port, replyTimeout: .milliseconds(200)) else { return false }
        return reply.hasPrefix("+PONG") || reply.hasPrefix("-NOAUTH")
    }

    /// Connects, sends an inline command, and returns the start of the reply (up to 64 bytes);
    /// nil when it cannot connect or send, or no reply came within `replyTimeout`.
    static func send(_ command: String, port: Int, replyTimeout: Duration) -> String? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let (seconds, attoseconds) = replyTimeout.components
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var sendTimeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &sendTimeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopback(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { return nil }
        let bytes = Array("\(command)\r\n".utf8)
        guard write(fd, bytes, bytes.count) == bytes.count else { return nil }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = read(fd, &buffer, buffer.count)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }
}

/// `kill(2)`, named apart from `RedisServerProcess`'s methods.
private func sendSignal(_ pid: pid_t, _ signal: Int32) -> Int32 {
    kill(pid, signal)
}

public struct ServerError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Runs blocking work on a Dispatch thread instead of the cooperative pool.
public func offPool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async {
            continuation.resume(with: Result { try work() })
        }
    }
}
