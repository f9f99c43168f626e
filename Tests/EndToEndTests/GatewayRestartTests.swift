import NIOCore
import NIOPosix
import Testing

@testable import PushLocalStack

/// A stopped gateway is started again on its port even when a client's connect holds that port
/// for a moment (``LocalStack/restartGateway()``).
@Suite(.timeLimit(.minutes(1)))
struct GatewayRestartTests {
    @Test func aServerStartedAgainOnItsPortRetriesWhileTheHolderLetsGo() async throws {
        // A port below the ephemeral range, as the local stack's servers have: once the holder
        // lets go, no other suite's connection can take it as its source port.
        let holder = try await ServerPorts.start { port in
            try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: port).get()
        }
        let port = try #require(holder.localAddress?.port)
        var attempts = 0
        let server = try await LocalStack.onTheSamePort {
            attempts += 1
            // The first attempt finds the port held; the holder lets go before the second.
            if attempts == 2 { try await holder.close() }
            return try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: port).get()
        }
        #expect(attempts == 2)
        #expect(server.localAddress?.port == port)
        try await server.close()
    }

    @Test func theLocalStacksServersListenBelowTheEphemeralRange() async throws {
        #expect(ServerPorts.ephemeral.lowerBound > ServerPorts.lowest)
        for port in ServerPorts.candidates(100) {
            #expect(port >= ServerPorts.lowest && port < ServerPorts.ephemeral.lowerBound)
        }
        let freePort = try RedisServerProcess.freePort()
        #expect(freePort < ServerPorts.ephemeral.lowerBound)
        let server = try await ServerPorts.start { port in
            try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: port).get()
        }
        let port = try #require(server.localAddress?.port)
        #expect(port >= ServerPorts.lowest && port < ServerPorts.ephemeral.lowerBound)
        try await server.close()
    }
}
