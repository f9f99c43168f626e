import Foundation

/// Parses `redis://[[user]:password@]host[:port][/db]` for the `redis.url` setting.
///
/// User and password may be percent-encoded and an IPv6 host is written in brackets.
/// `rediss://` is refused: the linked hiredis 0.14 has no TLS. Error messages show the URL
/// with its password masked.
enum RedisURL {
    struct Parsed: Equatable {
        var host: String
        var port = WorkerConfiguration.Redis.defaultPort
        var username: String?
        var password: String?
        var database = 0
    }

    static let form = "redis://[[user]:password@]host[:port][/db]"

    /// The TLS refusal, shared by `redis.tls: true` and `rediss://` URLs.
    static func tlsUnsupported(_ label: String) -> ConfigurationError {
        ConfigurationError(
            "\(label): TLS to Redis is not supported by the linked hiredis 0.14; connect through "
                + "a TLS proxy (for example stunnel) and use redis:// to it.")
    }

    static func parse(_ url: String, label: String) throws(ConfigurationError) -> Parsed {
        func malformed(_ reason: String) -> ConfigurationError {
            ConfigurationError(
                "\(label) must be a Redis URL of the form \(form), not \(quoted(redacted(url))) (\(reason)).")
        }

        let trimmed = url.trimmingCharacters(in: .whitespaces)
        guard let schemeEnd = trimmed.range(of: "://") else { throw malformed("the scheme is missing") }
        switch trimmed[..<schemeEnd.lowerBound].lowercased() {
        case "redis": break
        case "rediss": throw tlsUnsupported(label)
        case "unix": throw malformed("unix sockets are not supported")
        default: throw malformed("the scheme must be redis://")
        }

        let rest = trimmed[schemeEnd.upperBound...]
        if rest.contains(where: { $0.isWhitespace }) { throw malformed("it contains white space") }
        if rest.contains("?") || rest.contains("#") {
            throw malformed("query parameters and fragments are not supported")
        }

        let authority: Substring
        var path: Substring = ""
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            path = rest[rest.index(after: slash)...]
        } else {
            authority = rest
        }

        var result = Parsed(host: "")
        var hostPort = authority
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hostPort = authority[authority.index(after: at)...]
            let userPart: Substring
            var passwordPart: Substring?
            if let colon = userInfo.firstIndex(of: ":") {
                userPart = userInfo[..<colon]
                passwordPart = userInfo[userInfo.index(after: colon)...]
            } else {
                userPart = userInfo
            }
            guard let user = userPart.removingPercentEncoding else {
                throw malformed("the user name has bad percent-encoding")
            }
            result.username = user.isEmpty ? nil : user
            if let passwordPart {
                guard let password = passwordPart.removingPercentEncoding else {
                    throw malformed("the password has bad percent-encoding")
                }
                result.password = password.isEmpty ? nil : password
            }
        }

        var portText: Substring?
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else {
                throw malformed("an IPv6 host has no closing ']'")
            }
            result.host = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let after = hostPort[hostPort.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw malformed("there is text after the IPv6 host") }
                portText = after.dropFirst()
            }
        } else {
            let parts = hostPort.split(separator: ":", omittingEmptySubsequences: false)
            if parts.count > 2 { throw malformed("an IPv6 host must be written in brackets") }
            result.host = String(parts[0])
            portText = parts.count == 2 ? parts[1] : nil
        }
        if result.host.isEmpty { throw malformed("the host is missing") }
        if result.host.contains(where: { "[]@/%".contains($0) }) {
            throw malformed("the host has an invalid character")
        }

        if let portText {
            guard !portText.isEmpty, portText.allSatisfy({ $0.isASCII && $0.isNumber }),
                  let port = Int(portText), (1...65535).contains(port)
            else { throw malformed("the port must be from 1 to 65535") }
            result.port = port
        }

        if !path.isEmpty {
            guard path.allSatisfy({ $0.isASCII && $0.isNumber }), let database = Int(path) else {
                throw malformed("the database must be a whole number of at least 0")
            }
            result.database = database
        }
        return result
    }

    /// The URL with any password replaced by `***`.
    static func redacted(_ url: String) -> String {
        guard let schemeEnd = url.range(of: "://") else { return url }
        let rest = url[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { "/?#".contains($0) }) ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return url }
        let userInfo = rest[..<at]
        guard let colon = userInfo.firstIndex(of: ":") else { return url }
        return String(url[..<schemeEnd.upperBound]) + String(userInfo[..<colon]) + ":***"
            + String(rest[at...])
    }
}
