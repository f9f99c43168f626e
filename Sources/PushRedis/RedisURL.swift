import Foundation
import PushSecrets

/// The parts of a `redis://[[user]:password@]host[:port][/db]` (or `rediss://`, TLS) URL.
///
/// The one parser of Redis URLs: ``RedisConfiguration/init(url:connectTimeout:commandTimeout:)``
/// and the worker's `redis.url` setting both use it, each wording its ``Problem``s for its
/// readers. The port defaults to 6379 and the database to 0; user and password may be
/// percent-encoded; an IPv6 host is written in brackets (`redis://[::1]:6379`).
public struct RedisURL: Sendable, Hashable {
    /// Whether the scheme is `rediss://` (TLS).
    public var tls = false
    /// Host name or IP address (IPv6 without brackets).
    public var host: String
    public var port = 6379
    /// The user before `:password@` or `@`; `nil` when absent or empty.
    public var username: String?
    /// The password after `user:`; `nil` when the URL has none (`redis://h`,
    /// `redis://user@h`), empty for `redis://user:@h`.
    public var password: String?
    public var database = 0

    /// The form of a Redis URL, for messages.
    public static let form = "redis[s]://[[user]:password@]host[:port][/db]"

    /// Why a URL is not a Redis URL.
    public enum Problem: Sendable, Hashable {
        case missingScheme
        /// The scheme, lowercased.
        case unsupportedScheme(String)
        /// `unix://`.
        case unixSocket
        case whitespace
        case queryOrFragment
        case badPercentEncoding
        case unclosedBracket
        case textAfterBracket
        /// More than one `:` outside brackets.
        case unbracketedIPv6
        case missingHost
        case invalidHostCharacter(String)
        /// The text after the host's `:`.
        case badPort(String)
        /// The text after the first `/`.
        case badDatabase(String)
    }

    /// A URL that could not be parsed: the problem and the URL with its password masked.
    public struct ParseError: Error, Sendable, Hashable {
        public var problem: Problem
        public var redactedURL: String

        public init(problem: Problem, redactedURL: String) {
            self.problem = problem
            self.redactedURL = redactedURL
        }
    }

    /// Parses `url`; throws the first problem found.
    ///
    /// The credentials end at the last `@` (`PushSecrets.URLUserInfo`), so a password may
    /// hold `/`, `?`, `#` or `@` as it is; white space, a query or a fragment are refused only
    /// after it.
    public init(parsing url: String) throws(ParseError) {
        func fail(_ problem: Problem) -> ParseError { ParseError(problem: problem, redactedURL: Self.redacted(url)) }

        let text = Substring(url)
        guard let schemeEnd = URLUserInfo.schemeEnd(of: text) else { throw fail(.missingScheme) }
        switch text[..<schemeEnd].dropLast(3).lowercased() {
        case "redis": break
        case "rediss": tls = true
        case "unix": throw fail(.unixSocket)
        case let scheme: throw fail(.unsupportedScheme(scheme))
        }

        let (userInfo, rest) = URLUserInfo.split(text[schemeEnd...])
        if rest.contains(where: { $0.isWhitespace }) { throw fail(.whitespace) }
        if rest.contains("?") || rest.contains("#") { throw fail(.queryOrFragment) }

        let hostPort = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(hostPort.count + 1)

        host = ""
        if let userInfo {
            let (user, password) = URLUserInfo.credentials(userInfo)
            guard let user = Self.percentDecoded(user) else { throw fail(.badPercentEncoding) }
            username = user.isEmpty ? nil : user
            if let password {
                guard let password = Self.percentDecoded(password) else { throw fail(.badPercentEncoding) }
                self.password = password
            }
        }

        var portText: Substring?
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else { throw fail(.unclosedBracket) }
            host = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let after = hostPort[hostPort.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw fail(.textAfterBracket) }
                portText = after.dropFirst()
            }
        } else {
            let parts = hostPort.split(separator: ":", omittingEmptySubsequences: false)
            if parts.count > 2 { throw fail(.unbracketedIPv6) }
            host = String(parts[0])
            portText = parts.count == 2 ? parts[1] : nil
        }
        if host.isEmpty { throw fail(.missingHost) }
        if host.contains(where: { "[]@/%".contains($0) }) { throw fail(.invalidHostCharacter(host)) }

        if let portText {
            guard !portText.isEmpty, portText.allSatisfy(\.isASCIIDigit), let port = Int(portText),
                (1...65535).contains(port)
            else { throw fail(.badPort(String(portText))) }
            self.port = port
        }
        if !path.isEmpty {
            guard path.allSatisfy(\.isASCIIDigit), let database = Int(path) else {
                throw fail(.badDatabase(String(path)))
            }
            self.database = database
        }
    }

    /// The URL with any password replaced by `***`, for messages: everything between the
    /// scheme and the last `@` but the user (`PushSecrets.URLUserInfo.redacted(_:)`).
    /// Credentials without a `:` are masked whole, in case they are a password written without
    /// its `:`.
    public static func redacted(_ url: String) -> String { URLUserInfo.redacted(url) }

    /// Decodes `%XX` escapes (Foundation's `removingPercentEncoding`); `nil` for a broken
    /// escape or invalid UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        String(text).removingPercentEncoding
    }
}

extension RedisURL.ParseError {
    /// A ``RedisError/Code/invalidConfiguration`` error about the URL `shown` (already redacted).
    static func malformed(_ shown: String, _ reason: String) -> RedisError {
        RedisError(.invalidConfiguration, "malformed Redis URL '\(shown)': \(reason)", detail: expectedForm)
    }

    static let expectedForm = "expected \(RedisURL.form)"

    /// The error ``RedisConfiguration/init(url:connectTimeout:commandTimeout:)`` throws.
    var redisError: RedisError {
        let reason: String
        switch problem {
        case .missingScheme: reason = "missing scheme; \(Self.expectedForm)"
        case .unsupportedScheme(let scheme): reason = "unsupported scheme '\(scheme)'; \(Self.expectedForm)"
        case .unixSocket: reason = "unix sockets are not supported; use redis://host:port"
        case .whitespace: reason = "contains whitespace"
        case .queryOrFragment: reason = "query parameters and fragments are not supported"
        case .badPercentEncoding: reason = "bad percent-encoding in the credentials"
        case .unclosedBracket: reason = "unclosed '[' in an IPv6 host"
        case .textAfterBracket: reason = "unexpected text after ']'"
        case .unbracketedIPv6: reason = "an IPv6 host must be written in brackets, e.g. redis://[::1]:6379"
        case .missingHost: reason = "missing host"
        case .invalidHostCharacter(let host): reason = "invalid character in host '\(host)'"
        case .badPort(let port): reason = "port '\(port)' is not a number in 1...65535"
        case .badDatabase(let database): reason = "database '\(database)' is not a non-negative integer"
        }
        return Self.malformed(redactedURL, reason)
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
