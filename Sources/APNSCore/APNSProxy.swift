import Foundation
import PushSecrets

/// An HTTP proxy through which Apple's servers are reached: each connection opens an HTTP
/// `CONNECT` tunnel to the proxy (RFC 9110 §9.3.6), and TLS runs inside it.
///
/// The password never leaves this value except in the `Proxy-Authorization` header:
/// ``description`` and ``redacted(_:)`` replace it with `***`, as the Redis URL does.
public struct APNSProxy: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    public var host: String
    public var port: Int
    /// The user of Basic authentication (`Proxy-Authorization`), if the proxy wants one.
    public var username: String?
    public var password: String?

    /// The port of a proxy URL that names none, as curl assumes.
    public static let defaultPort = 1080

    public init(host: String, port: Int, username: String? = nil, password: String? = nil) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// Parses `http://[user:password@]host[:port][/]`; the scheme may be left out. User and
    /// password are percent-decoded. The error's sentence shows the URL redacted.
    public init(url: String) throws(APNSError) {
        let shown = Self.redacted(url)
        func invalid(_ reason: String) -> APNSError {
            APNSError(
                .invalidConfiguration,
                "\"\(shown)\" is not a proxy URL of the form http://[user:password@]host:port: \(reason)"
            )
        }
        let text = Substring(url.trimmingCharacters(in: .whitespacesAndNewlines))
        var rest = text
        if let schemeEnd = URLUserInfo.schemeEnd(of: text) {
            let scheme = text[..<schemeEnd].dropLast(3).lowercased()
            guard scheme == "http" else {
                throw invalid(
                    scheme == "https"
                        ? "a TLS connection to the proxy itself (https://) is not supported; use http://"
                        : "the scheme must be http, not \(scheme)"
                )
            }
            rest = text[schemeEnd...]
        }
        // The credentials end at the last `@`: a password may hold `/`, `?` or `#` as it is.
        let (userInfo, hostPart) = URLUserInfo.split(rest)
        rest = hostPart
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        if rest.contains(where: { "/?#".contains($0) }) { throw invalid("it must not have a path, query or fragment") }
        var username: String?
        var password: String?
        if let userInfo {
            let (user, secret) = URLUserInfo.credentials(userInfo)
            guard let decodedUser = Self.percentDecoded(user), !decodedUser.isEmpty else {
                throw invalid("the user name is empty or has a broken %-escape")
            }
            username = decodedUser
            if let secret {
                guard let decodedPassword = Self.percentDecoded(secret) else {
                    throw invalid("the password has a broken %-escape")
                }
                password = decodedPassword
            }
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw invalid("an IPv6 address lacks its closing ]") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw invalid("only :port may follow an IPv6 address") }
                portText = after.dropFirst()
            }
        } else {
            let parts = rest.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { throw invalid("write an IPv6 address in brackets") }
            host = parts[0]
            portText = parts.count == 2 ? parts[1] : nil
        }
        guard !host.isEmpty else { throw invalid("the host is missing") }
        guard !host.contains(where: { $0 == "%" || $0 == "@" || $0 == " " }) else {
            throw invalid("the host has a character a host name cannot have")
        }
        var port = Self.defaultPort
        if let portText {
            guard !portText.isEmpty, portText.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int(portText),
                (1...65535).contains(number)
            else { throw invalid("the port must be a number from 1 to 65535") }
            port = number
        }
        self.init(host: String(host), port: port, username: username, password: password)
    }

    /// `host:port`, with an IPv6 host in brackets: how messages name the proxy.
    public var endpoint: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// The proxy as a URL with the password masked, safe to log.
    public var description: String {
        guard let username else { return "http://\(endpoint)" }
        return "http://\(username):***@\(endpoint)"
    }

    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "host": host, "port": port, "username": username as Any,
                "password": password == nil ? "none" : "(set, not shown)",
            ],
            displayStyle: .struct
        )
    }

    /// The value of the `Proxy-Authorization` header, when the proxy has a user.
    public var authorization: String? {
        guard let username else { return nil }
        return "Basic " + Data("\(username):\(password ?? "")".utf8).base64EncodedString()
    }

    /// `url` with everything between its scheme (or its start) and its last `@` but the user
    /// masked as `***` (`PushSecrets.URLUserInfo.redacted(_:)`), for messages about a proxy URL
    /// that could not be parsed.
    public static func redacted(_ url: String) -> String { URLUserInfo.redacted(url) }

    /// Decodes `%XX` escapes (Foundation's `removingPercentEncoding`); `nil` for a broken
    /// escape or invalid UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        String(text).removingPercentEncoding
    }
}
