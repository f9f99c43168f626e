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
