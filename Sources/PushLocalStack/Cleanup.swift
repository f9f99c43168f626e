import Foundation
import Synchronization
import UnixSignals

/// What a ``LocalStack`` started and has not cleaned up yet: its processes (workers and
/// redis-servers, which would otherwise outlive the process that started them), the network
/// namespaces of partitionable workers, and its working directory unless it is kept.
///
/// ``run(removingDirectories:)`` is synchronous so that a signal trap can call it before the
/// process ends.
public final class Cleanup: Sendable {
    private struct Started {
        var processes: [Process] = []
        var servers: [RedisServerProcess] = []
        var directories: [String] = []
        var namespaces: [NetworkNamespace] = []
    }

    private let started = Mutex(Started())

    public init() {}

    func add(_ process: Process) { started.withLock { $0.processes.append(process) } }
    func add(_ server: RedisServerProcess) {
        started.withLock {
            $0.servers.append(server)
            $0.directories.append(server.directory.path)
        }
    }
    func add(directory: String) { started.withLock { $0.directories.append(directory) } }
    func add(namespace: NetworkNamespace) { started.withLock { $0.namespaces.append(namespace) } }

    /// Kills (SIGKILL) and reaps every process recorded and removes the directories; what it
    /// cleaned up is forgotten.
    public func run(removingDirectories: Bool = true) {
        let (processes, servers, directories, namespaces) = started.withLock { started in
            defer {
                started.processes = []
                started.servers = []
                started.namespaces = []
                if removingDirectories { started.directories = [] }
            }
            return (
                started.processes, started.servers, removingDirectories ? started.directories : [], started.namespaces
            )
        }
        for process in processes where process.isRunning { kill(process.processIdentifier, SIGKILL) }
        for server in servers { server.kill() }
        for process in processes { process.waitUntilExit() }
        // After the processes in them: deleting a namespace kills what still runs inside.
        for namespace in namespaces { namespace.delete() }
        for directory in directories { try? FileManager.default.removeItem(atPath: directory) }
    }
}

extension LocalStack {
    /// Runs `body` on a new stack and shuts the stack down afterwards, whether `body` succeeded.
    /// A SIGINT or SIGTERM meanwhile kills the processes the stack started (workers and
    /// redis-servers), removes its working directory unless it is kept, and ends this process
    /// with status 128 + the signal.
    public static func with(_ options: Options, _ body: (LocalStack) async throws -> Void) async throws {
        let cleanup = Cleanup()
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let trap = Task {
            for await signal in signals {
                cleanup.run()
                let program = URL(fileURLWithPath: CommandLine.arguments[0]).lastPathComponent
                FileHandle.standardError.write(
                    Data(
                        "\(program): stopped by \(signal); the workers and redis-server it started are stopped too\n"
                            .utf8
                    )
                )
                _exit(128 + signal.rawValue)
            }
        }
        defer { trap.cancel() }
        let stack = try await LocalStack.start(options, cleanup: cleanup)
        do {
            try await body(stack)
        } catch {
            await stack.shutdown()
            throw error
        }
        await stack.shutdown()
    }
}
