/// A connection to one Redis server, safe to share between tasks.
///
/// Every hiredis call for the connection runs on a thread the connection owns (never on
/// Swift's cooperative pool), one call at a time; concurrent callers are served in turn.
/// Each call is bounded by ``RedisConfiguration/commandTimeout``.
///
/// After an I/O error, a timeout or a protocol error the socket is closed and the
/// connection is *broken*: every later call throws ``RedisError/Code/connection`` at once,
/// without touching the network, until ``reconnect()`` succeeds.
///
/// ```swift
/// let redis = try await RedisConnection.connect(RedisConfiguration(url: "redis://:pw@127.0.0.1:6379/2"))
/// try await redis.send(["SET", "greeting", "hello"])
/// let replies = try await redis.pipeline([["INCR", "a"], ["INCR", "b"]])
/// ```
public final class RedisConnection: Sendable {
    /// The configuration used by ``connect(_:)`` and ``reconnect()``.
    public let configuration: RedisConfiguration
    private let core: RedisConnectionCore
    private let counter: RoundTripCounter

    private init(configuration: RedisConfiguration) {
        self.configuration = configuration
        self.counter = RoundTripCounter()
        self.core = RedisConnectionCore(configuration: configuration, counter: counter)
    }

    /// Opens a connection: TCP connect within the connect timeout, then `AUTH` and
    /// `SELECT` as configured (both in one round trip).
    ///
    /// - Throws: `.invalidConfiguration`, `.connection` ("cannot connect to Redis at
    ///   127.0.0.1:6390: Connection refused"), `.timeout`, `.authentication`, or
    ///   `.server` when `SELECT` is refused.
    public static func connect(_ configuration: RedisConfiguration) async throws(RedisError) -> RedisConnection {
        let connection = RedisConnection(configuration: configuration)
        try await connection.core.open()
        return connection
    }

    /// Socket round trips made so far: one per ``send(_:)``, one per
    /// ``pipeline(_:scripts:)``, plus one for the `AUTH`/`SELECT` handshake of each
    /// (re)connect that needs it, one for an `EVAL` fallback and one for a pipeline resent
    /// after `NOSCRIPT`. Meant for benchmarks and tests.
    public var roundTrips: Int {
        counter.current
    }

    /// Whether the connection is open and not broken.
    public var isConnected: Bool {
        get async { await core.isConnected }
    }

    /// Sends one command made of text arguments (encoded as UTF-8).
    ///
    /// - Returns: the reply; an error reply is thrown, not returned.
    /// - Throws: `.server(prefix)` for an error reply (the connection stays usable);
    ///   `.connection`, `.timeout`, `.protocol` for failures that break the connection.
    @discardableResult
    public func send(_ command: [String]) async throws(RedisError) -> RedisValue {
        try await core.send(command.map { Array($0.utf8) })
    }

    /// Sends one command made of binary-safe arguments.
    ///
    /// - Returns: the reply; an error reply is thrown, not returned.
    /// - Throws: as ``send(_:)``.
    @discardableResult
    public func send(_ command: [[UInt8]]) async throws(RedisError) -> RedisValue {
        try await core.send(command)
    }

    /// Sends all `commands` and reads all their replies in one socket round trip.
    ///
    /// Replies come back in command order. An error reply (`-ERR`, `-WRONGTYPE`, ...) is
    /// returned in place as ``RedisValue/error(_:)``; the other commands are unaffected.
    ///
    /// If a reply is `NOSCRIPT` for an `EVALSHA` of one of `scripts` (built with
    /// ``RedisScript/evalshaCommand(keys:args:)``), the connection sends `SCRIPT LOAD` for
    /// the missing scripts followed by the **whole pipeline again**, once, and returns the
    /// second set of replies. Every command that succeeded the first time then runs a
    /// second time, so only combine scripts with commands that are safe to repeat (or
    /// load the scripts beforehand with ``scriptLoad(_:)``).
    ///
    /// - Throws: `.connection`, `.timeout`, `.protocol` when the exchange itself fails
    ///   (the connection is then broken); `.invalidCommand` for an empty command.
    public func pipeline(_ commands: [[[UInt8]]], scripts: [RedisScript] = []) async throws(RedisError) -> [RedisValue] {
        try await core.pipeline(commands, scripts: scripts)
    }

    /// ``pipeline(_:scripts:)`` with text arguments.
    public func pipeline(_ commands: [[String]], scripts: [RedisScript] = []) async throws(RedisError) -> [RedisValue] {
        try await core.pipeline(commands.map { $0.map { Array($0.utf8) } }, scripts: scripts)
    }

    /// Loads a Lua script into the server's script cache and returns its SHA-1.
    public func scriptLoad(_ source: String) async throws(RedisError) -> String {
        try await core.scriptLoad(source)
    }

    /// Runs `script` with `EVALSHA`; if the server answers `NOSCRIPT`, runs it with `EVAL`
    /// (which also caches it) in a second round trip.
    ///
    /// - Throws: `.server(prefix)` when the script raises an error.
    @discardableResult
    public func evalsha(_ script: RedisScript, keys: [String] = [], args: [String] = []) async throws(RedisError) -> RedisValue {
        try await core.evalsha(script, keys: keys.map { Array($0.utf8) }, args: args.map { Array($0.utf8) })
    }

    /// ``evalsha(_:keys:args:)`` with binary-safe keys and arguments.
    @discardableResult
    public func evalsha(_ script: RedisScript, keys: [[UInt8]], args: [[UInt8]]) async throws(RedisError) -> RedisValue {
        try await core.evalsha(script, keys: keys, args: args)
    }

    /// Drops the current socket (if any) and connects again with ``configuration``,
    /// repeating `AUTH` and `SELECT`. Works on broken and on closed connections. If it
    /// fails, the connection stays broken and the error is thrown.
    public func reconnect() async throws(RedisError) {
        try await core.open()
    }

    /// Closes the socket. Later calls throw `.connection` until ``reconnect()``.
    /// Dropping the last reference to the connection closes it too.
    public func close() async {
        await core.close()
    }
}
