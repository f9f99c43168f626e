import Synchronization

/// What the simulators accept as a client's credentials can change while they run, as Apple's
/// does when a push certificate is renewed or a `.p8` key is added or revoked in the developer
/// account: tests rotate a worker's credentials against them.
extension APNSSimulator {
    /// From the next connection on, accepts only client certificates that chain to `caPEM`
    /// (one or more PEM certificates). Connections already open stay open.
    public func trustClients(caPEM: String) throws {
        try tls.trust(clientCAPEM: caPEM)
    }
}

extension APNSHTTP2Simulator {
    /// From the next connection on, accepts only client certificates that chain to `caPEM`
    /// (one or more PEM certificates); `nil` asks for none. Connections already open stay open.
    public func trustClients(caPEM: String?) throws {
        try tls.trust(clientCAPEM: caPEM)
    }

    /// From the next request on, verifies provider tokens with `verifier`'s keys only (`nil`:
    /// refuses every token with 403 `InvalidProviderToken`), on every connection: a token a
    /// connection admitted before is verified again.
    public func acceptProviderTokens(_ verifier: APNSJWTVerifier?) {
        tokenKeys.withLock {
            $0.verifier = verifier
            $0.version += 1
        }
    }
}
