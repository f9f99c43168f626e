/// The single error type thrown by PushRedis.
///
/// `code` is stable and meant for `switch`/retry decisions, `message` is written for a
/// person reading a log ("cannot connect to Redis at 127.0.0.1:6390: Connection refused"),
/// and `detail` carries the underlying cause verbatim (the hiredis error string and code,
/// or the full server error line) when there is one.
public struct RedisError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, in a form that does not change between releases.
    public enum Code: Sendable, Hashable {
        /// The TCP connection could not be opened, was lost, or is unusable after an
        /// earlier failure (call ``RedisConnection/reconnect()``).
        case connection
        /// The connect timeout or the command timeout expired. The connection is unusable
        /// afterwards, because a late reply would be read as the answer to the next command.
        case timeout
        /// The server sent bytes that hiredis could not parse as a Redis reply.
        case `protocol`
        /// The server answered with an error reply (`-ERR ...`, `-WRONGTYPE ...`).
        /// The associated value is the error's first word, e.g. `"ERR"`, `"WRONGTYPE"`,
        /// `"NOSCRIPT"`; the whole line is in ``RedisError/detail``.
        case server(String)
        /// The server rejected the configured username/password during connect.
        case authentication
        /// A ``RedisConfiguration`` or a Redis URL is invalid; nothing was sent.
        case invalidConfiguration
        /// A command was rejected locally before sending (for example an empty command).
        case invalidCommand
    }

    /// The stable error code.
    public var code: Code
    /// A sentence a person can act on.
    public var message: String
    /// The underlying cause (hiredis error text, the server's error line), if any.
    public var detail: String?

    /// Creates an error; PushRedis creates these, tests and callers may too.
    public init(_ code: Code, _ message: String, detail: String? = nil) {
        self.code = code
        self.message = message
        self.detail = detail
    }

    public var description: String {
        guard let detail, !message.contains(detail) else { return message }
        return "\(message) (\(detail))"
    }
}

extension RedisError {
    /// Builds the error for an error reply. `line` is the reply text without the leading `-`.
    static func server(_ line: String, command: String) -> RedisError {
        let prefix = line.split(separator: " ", maxSplits: 1).first.map(String.init) ?? "ERR"
        return RedisError(.server(prefix), "Redis rejected \(command): \(line)", detail: line)
    }
}
