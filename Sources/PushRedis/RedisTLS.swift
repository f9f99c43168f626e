/// TLS settings for a connection to Redis (`rediss://`).
///
/// A connection with TLS settings runs over SwiftNIO and NIOSSL instead of hiredis' own
/// socket; hiredis still parses the replies. The server's certificate is verified against
/// `caFile` (or the system's trust roots) and must name `serverName` (or the URL's host).
/// A certificate that carries the IP address connected to is accepted whatever the name
/// (NIOSSL's rule), so a host given as an IP address needs that address in the certificate,
/// or `serverName` set to a name it carries.
public struct RedisTLS: Sendable, Hashable {
    /// PEM file with the CA certificates to trust; `nil` trusts the system's roots.
    public var caFile: String?
    /// PEM file with the client certificate (chain) to present; needs `keyFile`.
    public var certFile: String?
    /// PEM file with the client certificate's private key; needs `certFile`.
    public var keyFile: String?
    /// The name sent in SNI and required in the server's certificate; `nil` uses the host.
    public var serverName: String?
    /// Whether to verify the server's certificate and name. Turning it off accepts any
    /// server, including an impostor; it is meant for tests only.
    public var verify: Bool

    /// TLS with system trust roots, no client certificate and verification on.
    public init(
        caFile: String? = nil,
        certFile: String? = nil,
        keyFile: String? = nil,
        serverName: String? = nil,
        verify: Bool = true
    ) {
        self.caFile = caFile
        self.certFile = certFile
        self.keyFile = keyFile
        self.serverName = serverName
        self.verify = verify
    }
}
