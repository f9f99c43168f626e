import APNSCore
import NIOCore
import NIOSSL

extension APNSCredentials {
    /// A TLS context that presents these credentials, shared by every connection of a client.
    func makeClientContext(verifyServer: Bool) throws(APNSError) -> NIOSSLContext {
        do {
            return try NIOSSLContext(configuration: tlsClientConfiguration(verifyServer: verifyServer))
        } catch {
            throw APNSError(.invalidCredentials, "cannot build a TLS context from the credentials", underlying: error)
        }
    }
}

/// The name to send for SNI and verify the certificate against: the override if there is one,
/// otherwise `host` unless it is an IP address (SNI carries names only).
func serverName(host: String, override: String?) -> String? {
    if let override { return override }
    return (try? SocketAddress(ipAddress: host, port: 0)) != nil ? nil : host
}
