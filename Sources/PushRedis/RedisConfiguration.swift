/// Where and how to connect to Redis.
///
/// Connecting opens a TCP connection within `connectTimeout`, applies `commandTimeout` to
/// every later socket read and write, then sends `AUTH` (when `password` is set; with
/// `username` it is the ACL form `AUTH username password`) and `SELECT database` (when it
/// is not 0). ``RedisConnection/reconnect()`` repeats all of that.
public struct RedisConfiguration: Sendable, Hashable, CustomStringConvertible {
    /// Host name or IP address (IPv6 without brackets).
    public var host: String
    /// TCP port, 1...65535.
    public var port: Int
    /// ACL user name; requires `password`. `nil` authenticates as the default user.
    public var username: String?
    /// Password sent with `AUTH`; `nil` sends no `AUTH`.
    public var password: String?
    /// Database index sent with `SELECT` (0 sends nothing).
    public var database: Int
    /// How long opening the TCP connection may take.
    public var connectTimeout: Duration
    /// How long any single socket read or write may block. A command that waits on the
    /// server (`BLPOP key 10`) needs a longer command timeout than its own timeout.
    public var commandTimeout: Duration

    /// Creates a configuration; the defaults match a local Redis without a password.
    public init(
        host: String = "127.0.0.1",
        port: Int = 6379,
        username: String? = nil,
        password: String? = nil,
        database: Int = 0,
        connectTimeout: Duration = .seconds(5),
        commandTimeout: Duration = .seconds(5)
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
    }

    /// Parses `redis://[[user]:password@]host[:port][/db]`.
    ///
    /// The port defaults to 6379 and the database to 0; user and password may be
    /// percent-encoded; an IPv6 host is written in brackets (`redis://[::1]:6379`).
    /// `rediss://` is rejected because hiredis 0.14 has no TLS. Errors have code
    /// ``RedisError/Code/invalidConfiguration`` and never repeat the password.
    public init(
        url: String,
        connectTimeout: Duration = .seconds(5),
        commandTimeout: Duration = .seconds(5)
    ) throws(RedisError) {
        let parsed = try RedisURLParser.parse(url)
        self.init(
            host: parsed.host, port: parsed.port, username: parsed.username,
            password: parsed.password, database: parsed.database,
            connectTimeout: connectTimeout, commandTimeout: commandTimeout)
    }

    /// `host:port`, with IPv6 hosts in brackets, as used in error messages.
    public var endpoint: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// A URL-like summary with the password masked, safe to log.
    public var description: String {
        var credentials = ""
        if password != nil { credentials = "\(username ?? ""):***@" }
        return "redis://\(credentials)\(endpoint)/\(database)"
    }

    /// Checks the values before any connection attempt.
    func validate() throws(RedisError) {
        func invalid(_ text: String) -> RedisError {
            RedisError(.invalidConfiguration, "invalid Redis configuration: \(text)")
        }
        if host.isEmpty { throw invalid("host is empty") }
        if host.utf8.contains(0) { throw invalid("host contains a NUL byte") }
        if !(1...65535).contains(port) { throw invalid("port \(port) is not in 1...65535") }
        if database < 0 { throw invalid("database \(database) is negative") }
        if username != nil && password == nil {
            throw invalid("username '\(username!)' is set but password is not (ACL AUTH needs both)")
        }
        if connectTimeout <= .zero { throw invalid("connect timeout \(connectTimeout) must be positive") }
        if commandTimeout <= .zero { throw invalid("command timeout \(commandTimeout) must be positive") }
    }
}

/// The hand-written `redis://` URL parser behind ``RedisConfiguration/init(url:connectTimeout:commandTimeout:)``.
enum RedisURLParser {
    struct Parsed {
        var host: String
        var port = 6379
        var username: String?
        var password: String?
        var database = 0
    }

    static let expectedForm = "expected redis://[[user]:password@]host[:port][/db]"

    static func parse(_ url: String) throws(RedisError) -> Parsed {
        let shown = redacted(url)
        func malformed(_ reason: String) -> RedisError {
            RedisError(.invalidConfiguration, "malformed Redis URL '\(shown)': \(reason)",
                       detail: expectedForm)
        }

        guard let schemeEnd = url.range(of: "://") else {
            throw malformed("missing scheme; \(expectedForm)")
        }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        switch scheme {
        case "redis":
            break
        case "rediss":
            throw RedisError(
                .invalidConfiguration,
                "TLS (rediss://) is not supported: the system hiredis 0.14 has no TLS. "
                    + "Run a TLS-terminating proxy such as stunnel next to the service and "
                    + "connect to it with redis://",
                detail: "URL '\(shown)'")
        case "unix":
            throw malformed("unix sockets are not supported; use redis://host:port")
        default:
            throw malformed("unsupported scheme '\(scheme)'; \(expectedForm)")
        }

        let rest = url[schemeEnd.upperBound...]
        if rest.contains(where: { $0.isWhitespace }) { throw malformed("contains whitespace") }
        if rest.contains("?") || rest.contains("#") {
            throw malformed("query parameters and fragments are not supported")
        }

        let authority: Substring
        let path: Substring
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            path = rest[rest.index(after: slash)...]
        } else {
            authority = rest
            path = ""
        }

        var result = Parsed(host: "")
        var hostPort = authority
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hostPort = authority[authority.index(after: at)...]
            guard let colon = userInfo.firstIndex(of: ":") else {
                throw malformed("credentials must be written user:password@ or :password@")
            }
            guard let user = percentDecoded(userInfo[..<colon]),
                  let password = percentDecoded(userInfo[userInfo.index(after: colon)...])
            else { throw malformed("bad percent-encoding in the credentials") }
            if password.isEmpty { throw malformed("the password is empty") }
            result.username = user.isEmpty ? nil : user
            result.password = password
        }

        var portText: Substring?
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else {
                throw malformed("unclosed '[' in an IPv6 host")
            }
            result.host = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let after = hostPort[hostPort.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw malformed("unexpected text after ']'") }
                portText = after.dropFirst()
            }
        } else {
            let colons = hostPort.filter { $0 == ":" }.count
            if colons > 1 { throw malformed("an IPv6 host must be written in brackets, e.g. redis://[::1]:6379") }
            if let colon = hostPort.firstIndex(of: ":") {
                result.host = String(hostPort[..<colon])
                portText = hostPort[hostPort.index(after: colon)...]
            } else {
                result.host = String(hostPort)
            }
        }
        if result.host.isEmpty { throw malformed("missing host") }
        if result.host.contains(where: { "[]@/%".contains($0) }) {
            throw malformed("invalid character in host '\(result.host)'")
        }

        if let portText {
            guard !portText.isEmpty, portText.allSatisfy(\.isASCIIDigit), let port = Int(portText),
                  (1...65535).contains(port)
            else { throw malformed("port '\(portText)' is not a number in 1...65535") }
            result.port = port
        }

        if !path.isEmpty {
            guard path.allSatisfy(\.isASCIIDigit), let database = Int(path) else {
                throw malformed("database '\(path)' is not a non-negative integer")
            }
            result.database = database
        }
        return result
    }

    /// The URL with any password replaced by `***`, for error messages.
    static func redacted(_ url: String) -> String {
        guard let schemeEnd = url.range(of: "://") else { return url }
        let rest = url[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { "/?#".contains($0) }) ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return url }
        let userInfo = rest[..<at]
        let user = userInfo.firstIndex(of: ":").map { userInfo[..<$0] } ?? ""
        return String(url[..<schemeEnd.upperBound]) + String(user) + ":***" + String(rest[at...])
    }

    /// Decodes `%XX` escapes; `nil` for a broken escape or invalid UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue)
            else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
