import NIOCore
import NIOPosix
import NIOSSL

/// Where an APNs client connects and how: the server's address and name, the proxy on the way,
/// the connect timeout, the TLS context every connection shares, and the event loops. Every APNs
/// client (binary gateway, feedback service, HTTP/2 API, channel management) opens its
/// connections through one.
public struct APNSGateway: Sendable {
    public let host: String
    public let port: Int
    /// The name sent for SNI and checked against the server's certificate (``serverName(host:override:)``).
    public let serverName: String?
    public let proxy: APNSProxy?
    public let connectTimeout: TimeAmount
    public let group: any EventLoopGroup
    private let sslContext: NIOSSLContext

    public init(
        host: String,
        port: Int,
        serverHostname: String?,
        proxy: APNSProxy?,
        connectTimeout: Duration,
        sslContext: NIOSSLContext,
        group: any EventLoopGroup
    ) {
        self.host = host
        self.port = port
        self.serverName = APNSCore.serverName(host: host, override: serverHostname)
        self.proxy = proxy
        self.connectTimeout = connectTimeout.timeAmount
        self.sslContext = sslContext
        self.group = group
    }

    /// Opens a connection (through the proxy when there is one, ``APNSConnector``) with TLS
    /// first in its pipeline, and returns what `initializer` made of the channel once it has
    /// added the client's handlers after TLS.
    public func connect<Output: Sendable>(
        configure: (ClientBootstrap) -> ClientBootstrap = { $0 },
        initializer: @escaping @Sendable (any Channel) throws -> Output
    ) -> EventLoopFuture<Output> {
        let sslContext = self.sslContext
        let serverName = self.serverName
        return APNSConnector.connect(
            host: host,
            port: port,
            proxy: proxy,
            group: group,
            connectTimeout: connectTimeout,
            configure: configure
        ) { channel in
            try channel.pipeline.syncOperations.addHandler(
                NIOSSLClientHandler(context: sslContext, serverHostname: serverName)
            )
            return try initializer(channel)
        }
    }
}

/// The connection settings every APNs client's configuration has.
public protocol APNSGatewaySettings {
    var host: String { get }
    var port: Int { get }
    /// The name for SNI and certificate checks, when it is not `host`.
    var serverHostname: String? { get }
    var proxy: APNSProxy? { get }
    var connectTimeout: Duration { get }
    /// Throws an ``APNSError`` (`invalidConfiguration`) with a sentence naming the first
    /// setting a client cannot run with.
    func validate() throws(APNSError)
}

extension APNSGatewaySettings {
    /// The check every client's ``validate()`` makes first: a port TCP can use.
    public func validatePort() throws(APNSError) {
        guard (1...65535).contains(port) else {
            throw APNSError(.invalidConfiguration, "port must be between 1 and 65535, not \(port)")
        }
    }

    /// Checks the settings (``validate()``), then makes the gateway they name with the TLS
    /// context `tls` builds: a client made from settings it cannot run with, or from unusable
    /// credentials, fails when it is made, not at its first connection.
    public func gateway(
        group: any EventLoopGroup,
        tls: () throws(APNSError) -> NIOSSLContext
    ) throws(APNSError) -> APNSGateway {
        try validate()
        return gateway(sslContext: try tls(), group: group)
    }

    /// The gateway these settings name, with the client's TLS context and event loops.
    public func gateway(sslContext: NIOSSLContext, group: any EventLoopGroup) -> APNSGateway {
        APNSGateway(
            host: host,
            port: port,
            serverHostname: serverHostname,
            proxy: proxy,
            connectTimeout: connectTimeout,
            sslContext: sslContext,
            group: group
        )
    }
}
