import Foundation
import PushTestSupport
import Synchronization
import Testing

@testable import PushLocalStack

/// The partition harness itself (docs/architecture.md, "The partition harness"): a client in a
/// network namespace of its own reaches a redis-server outside through a ``PathForwarder``,
/// which carries bytes, holds them while the path drops, resets and refuses while it rejects,
/// and heals; and the namespaces go away with their cleanup.
@Suite("Partition harness", .serialized, .timeLimit(.minutes(2)))
struct PartitionHarnessTests {
    /// A redis-server, and a namespace whose 127.0.0.1 at the server's port leads to it.
    private struct Path {
        let redis: RedisServerProcess
        let namespace: NetworkNamespace
        let forwarder: PathForwarder
        let cleanup = Cleanup()

        init() async throws {
            redis = try await RedisServerProcess.start()
            cleanup.add(redis)
            namespace = try NetworkNamespace()
            cleanup.add(namespace: namespace)
            forwarder = try await PathForwarder(namespace: namespace, ports: [redis.port])
        }

        /// `redis-cli` inside the namespace, its commands from standard input.
        func client(_ arguments: [String] = []) throws -> ChildProcess {
            let (executable, command) = namespace.command("/usr/bin/redis-cli", ["-p", "\(redis.port)"] + arguments)
            return try ChildProcess(executable, command, input: arguments.isEmpty)
        }

        func stop() async {
            await forwarder.close()
            cleanup.run()
        }
    }

    /// Runs `body` on a new path and stops the path afterwards, whether `body` succeeded: the
    /// redis-server and the namespace go even when a test fails.
    private func withPath(_ body: (Path) async throws -> Void) async throws {
        let path = try await Path()
        do {
            try await body(path)
        } catch {
            await path.stop()
            throw error
        }
        await path.stop()
    }

    @Test("bytes flow both ways through the path: redis-benchmark inside the namespace completes")
    func forwards() async throws {
        try await withPath { path in
            let (executable, command) = path.namespace.command(
                "/usr/bin/redis-benchmark",
                ["-p", "\(path.redis.port)", "-t", "ping,set,get", "-n", "20000", "-c", "8", "-q"]
            )
            let benchmark = try ChildProcess(executable, command)
            let finished = await benchmark.finish(killAfter: .seconds(60))
            #expect(finished.status == 0, "\(finished.stdout)\(finished.stderr)")
            for test in ["PING_INLINE", "PING_MBULK", "SET", "GET"] {
                #expect(
                    finished.stdout.contains("\(test): ") && finished.stdout.contains("requests per second"),
                    "\(test)"
                )
            }
        }
    }

    @Test("a dropped path answers nothing on an open connection, then delivers what it held once healed")
    func dropHoldsThenHeals() async throws {
        try await withPath { path in
            let client = try path.client()
            client.write("PING\n")
            #expect(await client.readLine() == "PONG")
            try await path.forwarder.cut(.drop)
            client.write("ECHO held\n")
            let answer = PendingLine(client)
            // A new connection is accepted but not answered either.
            let late = PendingLine(try path.client(["PING"]))
            #expect(await answer.isPending(after: .seconds(2)), "answered while dropped")
            #expect(await late.isPending(after: .zero), "a new connection answered while dropped")
            try await path.forwarder.heal()
            #expect(await answer.line == "held")
            #expect(await late.line == "PONG")
            client.signal(SIGKILL)
        }
    }

    @Test("a rejected path resets its open connections and refuses new ones, then accepts again once healed")
    func rejectResetsRefusesThenHeals() async throws {
        try await withPath { path in
            let client = try path.client()
            client.write("PING\n")
            #expect(await client.readLine() == "PONG")
            try await path.forwarder.cut(.reject)
            client.write("PING\n")
            client.write("QUIT\n")
            let reset = await client.finish(killAfter: .seconds(10))
            #expect(reset.stderr.contains("reset") || reset.stdout.contains("reset"), "\(reset)")
            let refused = try await path.client(["PING"]).finish(killAfter: .seconds(10))
            #expect((refused.stdout + refused.stderr).contains("Connection refused"), "\(refused)")
            try await path.forwarder.heal()
            let healed = try await path.client(["PING"]).finish(killAfter: .seconds(10))
            #expect(healed.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "PONG", "\(healed)")
        }
    }

    @Test("the cleanup deletes the namespaces it recorded, and the sweep those of processes that have ended")
    func namespacesAreRemoved() async throws {
        let cleanup = Cleanup()
        let namespace = try NetworkNamespace()
        cleanup.add(namespace: namespace)
        #expect(FileManager.default.fileExists(atPath: namespace.path))
        cleanup.run()
        #expect(!FileManager.default.fileExists(atPath: namespace.path))

        // One named after a process that no longer runs, as a killed run leaves it.
        let ended = try ChildProcess("/bin/true", [])
        _ = await ended.finish()
        let stale = "apnw-\(ended.process.processIdentifier)-1"
        try NetworkNamespace.ip(["netns", "add", stale])
        NetworkNamespace.sweepStale()
        #expect(!FileManager.default.fileExists(atPath: "/run/netns/\(stale)"))
    }

}

/// The next line a child prints, read in the background: a path that drops must leave it
/// pending, and deliver it once healed.
private final class PendingLine: Sendable {
    private final class Flag: Sendable {
        let value = Mutex(false)
    }

    private let reading: Task<String?, Never>
    private let done = Flag()

    init(_ child: ChildProcess) {
        let done = done
        reading = Task {
            let line = await child.readLine()
            done.value.withLock { $0 = true }
            return line
        }
    }

    /// Whether the line is still unread `bound` from now (the bound is the assertion: nothing
    /// may arrive within it).
    func isPending(after bound: Duration) async -> Bool {
        try? await Task.sleep(for: bound)
        return !done.value.withLock { $0 }
    }

    var line: String? { get async { await reading.value } }
}
