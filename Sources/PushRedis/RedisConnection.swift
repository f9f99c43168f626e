/// A connection to one Redis server, safe to share between tasks.
///
/// Without TLS, every hiredis call for the connection runs on a thread the connection owns
/// (never on Swift's cooperative pool), one call at a time; concurrent callers are served in
/// turn. With TLS (``RedisConfiguration/tls``) the connection runs on a SwiftNIO event loop
/// with NIOSSL, hiredis parses the replies, and concurrent callers' commands are pipelined
/// on the socket in call order. Either way each call is bounded by
/// ``RedisConfiguration/commandTimeout``.
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
    /// hiredis' own blocking socket on a dedicated thread, or SwiftNIO (for TLS).
    private let core: any RedisConnectionCore
    private let counter: RoundTripCounter

    /// Which transport carries the connection: hiredis' blocking socket on a dedicated
    /// thread, or SwiftNIO. TLS needs SwiftNIO; without TLS the socket is the default (see
    /// docs/architecture.md for the measurements behind that choice).
    @_spi(Benchmark) public enum Transport: Sendable {
        case socket
        case nio
    }

    private init(configuration: RedisConfiguration, transport: Transport) {
        self.configuration = configuration
        self.counter = RoundTripCounter()
        switch transport {
        case .nio:
            self.core = RedisNIOConnectionCore(configuration: configuration, counter: counter)
        case .socket:
            self.core = RedisSocketConnectionCore(configuration: configuration, counter: counter)
        }
    }

    /// Opens a connection: TCP connect within the connect timeout, then `AUTH` and
    /// `SELECT` as configured (both in one round trip). With TLS, the handshake (and the
    /// first round trip, `PING` when there is no `AUTH` or `SELECT`) must also complete
    /// within the connect timeout, so certificate problems are reported here.
    ///
    /// - Throws: `.invalidConfiguration`, `.connection` ("cannot connect to Redis at
    ///   127.0.0.1:6390: Connection refused"), `.timeout`, `.authentication`, or
    ///   `.server` when `SELECT` is refused; with TLS, `.connection` with a sentence naming
    ///   the problem (an untrusted certificate, a certificate for another name, a client
    ///   certificate the server requires or refuses) and `.invalidConfiguration` for an
    ///   unreadable certificate or key file.
    public static func connect(_ configuration: RedisConfiguration) async throws(RedisError) -> RedisConnection {
        try await connect(configuration, transport: configuration.tls == nil ? .socket : .nio)
    }

    /// ``connect(_:)`` over a chosen transport (TLS always takes SwiftNIO); for benchmarks
    /// and tests that compare the two.
    @_spi(Benchmark)
    public static func connect(
        _ configuration: RedisConfiguration,
        transport: Transport
    ) async throws(RedisError) -> RedisConnection {
        let connection = RedisConnection(
            configuration: configuration,
            transport: configuration.tls == nil ? transport : .nio
        )
        try await connection.open()
        return connection
    }

    private func open() async throws(RedisError) {
        try await core.open()
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
        get async {
            await core.isConnected
        }
    }

    /// Sends one command made of text arguments (encoded as UTF-8).
    ///
    /// - Returns: the reply; an error reply is thrown, not returned.
    /// - Throws: `.server(prefix)` for an error reply (the connection stays usable);
    ///   `.connection`, `.timeout`, `.protocol` for failures that break the connection.
    @discardableResult
    public func send(_ command: [String]) async throws(RedisError) -> RedisValue {
        try await send(command.map { Array($0.utf8) })
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
    /// the missing scripts followed by only the commands that answered `NOSCRIPT`, once, in
    /// a second round trip, and puts their replies in place. A command that answered
    /// `NOSCRIPT` did not run, so no command runs twice.
    ///
    /// - Throws: `.connection`, `.timeout`, `.protocol` when the exchange itself fails
    ///   (the connection is then broken); `.invalidCommand` for an empty command.
    public func pipeline(_ commands: [[[UInt8]]], scripts: [RedisScript] = []) async throws(RedisError) -> [RedisValue]
    {
        try await pipeline(try RedisCommands(commands), scripts: scripts)
    }

    /// ``pipeline(_:scripts:)`` with commands already encoded (``RedisCommands``).
    public func pipeline(
        _ commands: RedisCommands,
        scripts: [RedisScript] = []
    ) async throws(RedisError) -> [RedisValue] {
        try await core.pipeline(commands, scripts: scripts)
    }

    /// ``pipeline(_:scripts:)`` with text arguments.
    public func pipeline(_ commands: [[String]], scripts: [RedisScript] = []) async throws(RedisError) -> [RedisValue] {
        try await pipeline(commands.map { $0.map { Array($0.utf8) } }, scripts: scripts)
    }

    /// Loads a Lua script into the server's script cache and returns its SHA-1.
    public func scriptLoad(_ source: String) async throws(RedisError) -> String {
        try await core.scriptLoad(source)
    }

    /// Runs `script` with `EVALSHA`; if the server answers `NOSCRIPT`, loads it and runs it
    /// again in a second round trip, as a pipeline does (``pipeline(_:scripts:)``).
    ///
    /// - Throws: `.server(prefix)` when the script raises an error.
    @discardableResult
    public func evalsha(
        _ script: RedisScript,
        keys: [String] = [],
        args: [String] = []
    ) async throws(RedisError) -> RedisValue {
        try await evalsha(script, keys: keys.map { Array($0.utf8) }, args: args.map { Array($0.utf8) })
    }

    /// ``evalsha(_:keys:args:)`` with binary-safe keys and arguments.
    @discardableResult
    public func evalsha(_ script: RedisScript, keys: [[UInt8]], args: [[UInt8]]) async throws(RedisError) -> RedisValue
    {
        var command = RedisCommands()
        command.evalsha(script, keys: keys, arguments: args)
        // A NOSCRIPT is answered by the pipeline: the script is loaded and the command sent again.
        let reply = try await core.pipeline(command, scripts: [script])[0]
        if case .error(let line) = reply { throw RedisError.server(line, command: "EVALSHA \(script.sha1)") }
        return reply
    }

    /// Drops the current socket (if any) and connects again with ``configuration``,
    /// repeating `AUTH` and `SELECT`. Works on broken and on closed connections. If it
    /// fails, the connection stays broken and the error is thrown.
    public func reconnect() async throws(RedisError) {
        try await open()
    }

    /// Closes the socket. Later calls throw `.connection` until ``reconnect()``.
    /// Dropping the last reference to the connection closes it too.
    public func close() async {
        await core.close()
    }
}
