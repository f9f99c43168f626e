#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The name a client sends for SNI and verifies the server's certificate against: `override` if
/// there is one, otherwise `host` unless it is an IP address (SNI carries names only, RFC 6066 §3).
public func serverName(host: String, override: String?) -> String? {
    if let override { return override }
    return isIPAddress(host) ? nil : host
}

/// True when `host` is an IPv4 or IPv6 address literal rather than a name.
func isIPAddress(_ host: String) -> Bool {
    var v4 = in_addr()
    var v6 = in6_addr()
    return host.withCString { inet_pton(AF_INET, $0, &v4) == 1 || inet_pton(AF_INET6, $0, &v6) == 1 }
}
