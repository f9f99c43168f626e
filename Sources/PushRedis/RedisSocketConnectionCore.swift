import CHiredis

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The hiredis transport: owns one hiredis context and is the only code that touches it.
///
/// The actor's executor is a ``RedisThreadExecutor``, so every method body, and therefore
/// every hiredis call, runs on that connection's dedicated thread, one call at a time.
/// Methods are synchronous on purpose: a method never suspends half-way through a
/// request/reply exchange, so requests from concurrent callers cannot interleave on the
/// socket.
actor RedisSocketConnectionCore: RedisConnectionCore {
    // @unchecked: State is only touched inside the actor and in deinit, which has exclusive
    // access; deinit hands the context to the connection thread to be freed there.
    private enum State: @unchecked Sendable {
        case connected(UnsafeMutablePointer<redisContext>)
        /// Unusable after the given error; `reconnect()` replaces the context.
        case broken(RedisError)
        case closed
    }

    let configuration: RedisConfiguration
    private let executor: RedisThreadExecutor
    private let counter: RoundTripCounter
    private var state: State = .closed

    nonisolated var unownedExecutor: UnownedSerialExecutor {
        executor.asUnownedSerialExecutor()
    }

    init(configuration: RedisConfiguration, counter: RoundTripCounter) {
        self.configuration = configuration
        self.counter = counter
        self.executor = RedisThreadExecutor(name: "PushRedis \(configuration.endpoint)")
    }

    deinit {
        if case .connected(let context) = state {
            let handle = ContextHandle(context: context)
            executor.shutdown { redisFree(handle.context) }
        } else {
            executor.shutdown {}
        }
    }

    /// Carries the context pointer to the connection thread for the final `redisFree`.
    private struct ContextHandle: @unchecked Sendable {
        let context: UnsafeMutablePointer<redisContext>
    }

    private var target: String { "Redis at \(configuration.endpoint)" }

    // MARK: - Lifecycle

    /// Connects (or reconnects), replacing any previous context.
    func open() throws(RedisError) {
        if case .connected(let old) = state {
            redisFree(old)
        }
        state = .closed
        do throws(RedisError) {
            state = .connected(try makeContext())
        } catch {
            state = .broken(error)
            throw error
        }
    }

    func close() {
        if case .connected(let context) = state {
            redisFree(context)
        }
        state = .closed
    }

    var isConnected: Bool {
        if case .connected = state { return true }
        return false
    }

    /// Opens the socket, sets the command timeout, then AUTH and SELECT in one round trip.
    private func makeContext() throws(RedisError) -> UnsafeMutablePointer<redisContext> {
        try configuration.validate()
        guard
            let context = redisConnectWithTimeout(
                configuration.host,
                Int32(configuration.port),
                Self.timeval(configuration.connectTimeout)
            )
        else {
            throw RedisError(.connection, "cannot connect to \(target): hiredis could not allocate a context")
        }
        if context.pointee.err != 0 {
            let text = Self.errorString(context)
            let detail = Self.detail(context)
            redisFree(context)
            if Self.isTimeout(text) {
                throw RedisError(
                    .timeout,
                    "cannot connect to \(target) within the connect timeout of \(configuration.connectTimeout): \(text)",
                    detail: detail
                )
            }
            throw RedisError(.connection, "cannot connect to \(target): \(text)", detail: detail)
        }
        if redisSetTimeout(context, Self.timeval(configuration.commandTimeout)) != REDIS_OK {
            let error = RedisError(
                .connection,
                "cannot set the command timeout on the connection to \(target): \(Self.errorString(context))",
                detail: Self.detail(context)
            )
            redisFree(context)
            throw error
        }

        var handshake: [[[UInt8]]] = []
        if let password = configuration.password {
            handshake.append(Self.bytes(["AUTH"] + (configuration.username.map { [$0] } ?? []) + [password]))
        }
        if configuration.database != 0 {
            handshake.append(Self.bytes(["SELECT", String(configuration.database)]))
        }
        if handshake.isEmpty { return context }

        let replies: [RedisValue]
        do throws(RedisError) {
            replies = try exchange(
                context,
                try RedisCommands(handshake),
                activity: "authenticating and selecting the database"
            )
        } catch {
            redisFree(context)
            throw error
        }
        do throws(RedisError) {
            try configuration.checkHandshake(replies, target: target)
        } catch {
            redisFree(context)
            throw error
        }
        return context
    }

    // MARK: - Commands

    /// One command; an error reply is thrown as `.server`.
    func send(_ command: [[UInt8]]) throws(RedisError) -> RedisValue {
        try RedisCommands.validate(command)
        let name = RedisCommands.name(of: command)
        let commands = try RedisCommands([command])
        return try withContext { context throws(RedisError) in
            let reply = try exchange(context, commands, activity: "running \(name)")[0]
            if case .error(let line) = reply { throw RedisError.server(line, command: name) }
            return reply
        }
    }

    /// All commands in one round trip; error replies stay in place as `.error` values.
    /// When a reply is `NOSCRIPT` for an `EVALSHA` of one of `scripts`, the scripts are
    /// loaded and only the commands that answered `NOSCRIPT` are sent again, once, in a second
    /// round trip (``NoScriptRetry``).
    func pipeline(_ commands: RedisCommands, scripts: [RedisScript]) throws(RedisError) -> [RedisValue] {
        try RedisCommands.validate(commands)
        return try withContext { context throws(RedisError) in
            if commands.isEmpty { return [] }
            let activity = "running a pipeline of \(commands.count) commands"
            let replies = try exchange(context, commands, activity: activity)
            guard let retry = NoScriptRetry(replies: replies, commands: commands, scripts: scripts) else {
                return replies
            }
            return retry.merge(
                replies,
                try exchange(context, retry.commands, activity: activity + " again after SCRIPT LOAD")
            )
        }
    }

    /// `SCRIPT LOAD`, returning the SHA-1 Redis computed.
    func scriptLoad(_ source: String) throws(RedisError) -> String {
        var load = RedisCommands()
        load.scriptLoad(source)
        let reply = try pipeline(load, scripts: [])[0]
        if case .error(let line) = reply { throw RedisError.server(line, command: "SCRIPT LOAD") }
        guard let sha = reply.string, sha.count == 40 else {
            throw RedisError(.protocol, "\(target) answered SCRIPT LOAD with \(reply), not a SHA-1")
        }
        return sha
    }

    // MARK: - hiredis plumbing (runs on the connection thread)

    /// Runs `body` with the live context. An I/O, timeout or protocol error frees the
    /// context and marks the connection broken, so later calls fail fast.
    private func withContext<T>(
        _ body: (UnsafeMutablePointer<redisContext>) throws(RedisError) -> T
    ) throws(RedisError) -> T {
        switch state {
        case .closed:
            throw .closed(target)
        case .broken(let cause):
            throw .broken(target, by: cause)
        case .connected(let context):
            do throws(RedisError) {
                return try body(context)
            } catch {
                switch error.code {
                case .connection, .timeout, .protocol:
                    redisFree(context)
                    state = .broken(error)
                default:
                    break
                }
                throw error
            }
        }
    }

    /// Appends the encoded commands to hiredis' output buffer, then reads one reply per
    /// command: the first `redisGetReply` flushes the buffer, so this is one round trip.
    private func exchange(
        _ context: UnsafeMutablePointer<redisContext>,
        _ commands: RedisCommands,
        activity: String
    ) throws(RedisError) -> [RedisValue] {
        let status = commands.bytes.withUnsafeBytes { bytes in
            redisAppendFormattedCommand(context, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), bytes.count)
        }
        if status != REDIS_OK { throw ioError(context, activity: activity) }
        counter.increment()
        var replies: [RedisValue] = []
        replies.reserveCapacity(commands.count)
        for _ in 0..<commands.count {
            var raw: UnsafeMutableRawPointer?
            let status = redisGetReply(context, &raw)
            guard status == REDIS_OK, let raw else {
                throw ioError(context, activity: activity)
            }
            defer { freeReplyObject(raw) }
            replies.append(try RedisValue(hiredisReply: raw.assumingMemoryBound(to: redisReply.self)))
        }
        return replies
    }

    /// Turns the context's `err`/`errstr` (read right after the failing call) into a RedisError.
    private func ioError(_ context: UnsafeMutablePointer<redisContext>, activity: String) -> RedisError {
        RedisThreadExecutor.discardPendingSIGPIPE()
        let text = Self.errorString(context)
        let detail = Self.detail(context)
        switch context.pointee.err {
        case REDIS_ERR_IO where Self.isTimeout(text):
            return RedisError(
                .timeout,
                "\(target) did not answer within the command timeout of \(configuration.commandTimeout) while "
                    + "\(activity); the connection was dropped, call reconnect()",
                detail: detail
            )
        case REDIS_ERR_PROTOCOL:
            return RedisError(
                .protocol,
                "\(target) sent a reply that hiredis cannot parse while \(activity): \(text); the connection was dropped",
                detail: detail
            )
        case REDIS_ERR_OOM:
            return RedisError(.connection, "hiredis ran out of memory while \(activity) on \(target)", detail: detail)
        default:
            return RedisError(
                .connection,
                "lost the connection to \(target) while \(activity): \(text); call reconnect() once the server is reachable",
                detail: detail
            )
        }
    }

    // MARK: - Helpers without state

    private static func errorString(_ context: UnsafeMutablePointer<redisContext>) -> String {
        withUnsafeBytes(of: context.pointee.errstr) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
    }

    private static func detail(_ context: UnsafeMutablePointer<redisContext>) -> String {
        let name =
            switch context.pointee.err {
            case REDIS_ERR_IO: "REDIS_ERR_IO"
            case REDIS_ERR_EOF: "REDIS_ERR_EOF"
            case REDIS_ERR_PROTOCOL: "REDIS_ERR_PROTOCOL"
            case REDIS_ERR_OOM: "REDIS_ERR_OOM"
            case REDIS_ERR_OTHER: "REDIS_ERR_OTHER"
            default: "err \(context.pointee.err)"
            }
        return "hiredis \(name): \(errorString(context))"
    }

    /// hiredis 0.14 has no timeout error code: a socket timeout is a plain REDIS_ERR_IO whose
    /// errstr is strerror(EAGAIN) (command timeout, SO_RCVTIMEO/SO_SNDTIMEO expired) or
    /// strerror(ETIMEDOUT) (connect timeout), possibly after a "prefix: ".
    private static func isTimeout(_ text: String) -> Bool {
        [EAGAIN, EWOULDBLOCK, ETIMEDOUT].contains { text.hasSuffix(String(cString: strerror($0))) }
    }

    private static func timeval(_ duration: Duration) -> timeval {
        let (seconds, attoseconds) = duration.components
        var microseconds = attoseconds / 1_000_000_000_000
        if seconds == 0 && microseconds == 0 { microseconds = 1 }
        return CHiredis.timeval(
            tv_sec: .init(truncatingIfNeeded: seconds),
            tv_usec: .init(truncatingIfNeeded: microseconds)
        )
    }

    private static func bytes(_ strings: [String]) -> [[UInt8]] {
        strings.map { Array($0.utf8) }
    }
}
