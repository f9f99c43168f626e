import Synchronization

/// A transport under ``RedisConnection``: hiredis' blocking socket on a thread of its own
/// (``RedisSocketConnectionCore``) or SwiftNIO, needed for TLS (``RedisNIOConnectionCore``).
/// Both keep one contract: the same handshake (`AUTH` and `SELECT` in one round trip), the
/// same replies, error codes and sentences, and the same *broken* state after an I/O error, a
/// timeout or a protocol error, until ``open()`` succeeds again.
///
/// A connection holds its core as `any RedisConnectionCore`: one dynamic call per request,
/// next to an actor hop and a socket round trip of tens of microseconds;
/// `scripts/bench-redis-transport` shows no difference from a concrete core.
protocol RedisConnectionCore: Actor {
    /// Connects (or reconnects), replacing any previous socket.
    func open() async throws(RedisError)
    /// Closes the socket; later calls throw `.connection` until ``open()``.
    func close() async
    /// Whether the connection is open and not broken.
    var isConnected: Bool { get async }
    /// One command; an error reply is thrown as `.server`.
    func send(_ command: [[UInt8]]) async throws(RedisError) -> RedisValue
    /// All commands in one round trip; error replies stay in place as `.error` values. When a
    /// reply is `NOSCRIPT` for an `EVALSHA` of one of `scripts`, the scripts are loaded and only
    /// the commands that answered `NOSCRIPT` are sent again, once (``NoScriptRetry``).
    func pipeline(_ commands: RedisCommands, scripts: [RedisScript]) async throws(RedisError) -> [RedisValue]
    /// `SCRIPT LOAD`, returning the SHA-1 Redis computed.
    func scriptLoad(_ source: String) async throws(RedisError) -> String
}

extension RedisError {
    /// What a core answers after ``RedisConnectionCore/close()``, or before its first `open()`.
    static func closed(_ target: String) -> RedisError {
        RedisError(.connection, "the connection to \(target) is closed; call reconnect() to open it again")
    }

    /// What a core answers once broken by `cause`, until ``RedisConnectionCore/open()`` succeeds.
    static func broken(_ target: String, by cause: RedisError) -> RedisError {
        RedisError(
            .connection,
            "the connection to \(target) is unusable after an earlier error (\(cause.message)); call reconnect()",
            detail: cause.description
        )
    }
}

/// Counts socket round trips; read from any thread, written on the connection's thread.
final class RoundTripCounter: Sendable {
    private let value = Atomic<Int>(0)

    func increment() {
        value.wrappingAdd(1, ordering: .relaxed)
    }

    var current: Int {
        value.load(ordering: .relaxed)
    }
}

extension RedisCommands {
    static func validate(_ command: [[UInt8]]) throws(RedisError) {
        if command.isEmpty {
            throw RedisError(.invalidCommand, "cannot send an empty command: it needs at least the command name")
        }
        if command.count > Int(Int32.max) {
            throw RedisError(.invalidCommand, "cannot send a command with \(command.count) arguments")
        }
    }

    static func validate(_ commands: RedisCommands) throws(RedisError) {
        if !commands.isComplete {
            throw RedisError(.invalidCommand, "cannot send a command that lacks some of its arguments")
        }
    }

    /// The command name for messages (never its arguments, which may hold secrets).
    static func name(of command: [[UInt8]]) -> String {
        guard let first = command.first, first.count <= 32,
            let text = String(validating: first, as: UTF8.self)
        else { return "a command" }
        return text.uppercased()
    }
}

/// The second round trip of a pipeline some of whose `EVALSHA`s of known scripts answered
/// `NOSCRIPT` (a flushed script cache, a promoted replica): `SCRIPT LOAD` for each missing
/// script, then only those commands again. A command that answered `NOSCRIPT` did not run,
/// so nothing runs twice.
struct NoScriptRetry {
    /// The loads, then the commands to send again.
    var commands = RedisCommands()
    /// The scripts loaded, in the order of their loads.
    var missing: [RedisScript] = []
    /// Where the commands sent again are in the first pipeline, with their script's SHA-1.
    var indices: [(index: Int, sha1: String)] = []

    init?(replies: [RedisValue], commands: RedisCommands, scripts: [RedisScript]) {
        guard !scripts.isEmpty else { return nil }
        for (index, reply) in replies.enumerated() where reply.isNoScript {
            guard let target = commands.script(of: index) else { continue }
            let sha = String(decoding: target, as: UTF8.self).lowercased()
            guard let script = scripts.first(where: { $0.sha1 == sha }) else { continue }
            if !missing.contains(script) { missing.append(script) }
            indices.append((index, sha))
        }
        guard !indices.isEmpty else { return nil }
        for script in missing {
            self.commands.scriptLoad(script.source)
        }
        self.commands.append(commands, at: indices.map(\.index))
    }

    /// The first replies with the second round trip's in place of the `NOSCRIPT`s. A
    /// script that fails to load (a Lua syntax error) would only answer `NOSCRIPT` again;
    /// its load error is reported there instead.
    func merge(_ first: [RedisValue], _ retried: [RedisValue]) -> [RedisValue] {
        var results = first
        var failedLoads: [String: RedisValue] = [:]
        for (script, load) in zip(missing, retried.prefix(missing.count)) where load.errorMessage != nil {
            failedLoads[script.sha1] = load
        }
        for (entry, reply) in zip(indices, retried.dropFirst(missing.count)) {
            results[entry.index] = reply.isNoScript ? failedLoads[entry.sha1] ?? reply : reply
        }
        return results
    }
}
