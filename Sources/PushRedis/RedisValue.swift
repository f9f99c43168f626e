/// A reply from Redis, copied out of hiredis' memory into plain Swift values.
///
/// hiredis 0.14 speaks RESP2 only. It reports both the null bulk string (`$-1`) and the
/// null array (`*-1`, e.g. a timed-out `BLPOP`) as the same "nil" reply; PushRedis
/// represents that as `.bulk(nil)`, so `.array(nil)` is never produced by the connection.
/// Use ``isNull`` to test for either.
public enum RedisValue: Sendable, Hashable {
    /// A status reply such as `+OK` or `+PONG`.
    case simpleString(String)
    /// An error reply such as `-ERR unknown command`, without the leading `-`.
    case error(String)
    /// An integer reply (`:42`).
    case integer(Int64)
    /// A bulk string (binary safe); `nil` is the null bulk string (e.g. `GET` of a missing key).
    case bulk([UInt8]?)
    /// An array reply; `nil` is the null array.
    case array([RedisValue]?)

    /// The text of a status reply, or of a bulk string that is valid UTF-8.
    public var string: String? {
        switch self {
        case .simpleString(let text): text
        case .bulk(let bytes?): String(validating: bytes, as: UTF8.self)
        default: nil
        }
    }

    /// An integer reply, or a bulk/status string that holds a decimal integer
    /// (`GET` of a counter returns the bulk string `"5"`).
    public var int: Int64? {
        switch self {
        case .integer(let value): value
        case .bulk, .simpleString: string.flatMap { Int64($0) }
        default: nil
        }
    }

    /// The raw bytes of a bulk string, or the UTF-8 of a status reply.
    public var bytes: [UInt8]? {
        switch self {
        case .bulk(let bytes): bytes
        case .simpleString(let text): Array(text.utf8)
        default: nil
        }
    }

    /// The elements of a non-null array reply.
    public var array: [RedisValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// The text of an error reply.
    public var errorMessage: String? {
        if case .error(let text) = self { return text }
        return nil
    }

    /// `true` for the null bulk string and the null array.
    public var isNull: Bool {
        switch self {
        case .bulk(nil), .array(nil): true
        default: false
        }
    }

    /// `true` for an error reply whose first word is `NOSCRIPT`.
    var isNoScript: Bool {
        errorMessage?.hasPrefix("NOSCRIPT") ?? false
    }
}
