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

/// Settings of a client of the binary interfaces (the gateway, the feedback service), which
/// authenticate with a client certificate (§1.1).
protocol BinaryGatewaySettings: APNSGatewaySettings {
    var credentials: APNSCredentials { get }
    /// Whether the server's certificate is checked against the trust roots.
    var verifyServer: Bool { get }
}

extension BinaryGatewaySettings {
    /// Checks the settings, then makes the gateway they name, presenting the credentials.
    func gateway(group: any EventLoopGroup) throws(APNSError) -> APNSGateway {
        try gateway(group: group) { () throws(APNSError) in
            try credentials.makeClientContext(verifyServer: verifyServer)
        }
    }
}

extension APNSBinaryConfiguration: BinaryGatewaySettings {}
extension APNSFeedbackClient.Configuration: BinaryGatewaySettings {}
