import NIOCore
import NIOPosix
import Testing

@testable import PushLocalStack

/// A stopped gateway is started again on its port even when a client's connect holds that port
/// for a moment (``LocalStack/restartGateway()``).
@Suite(.timeLimit(.minutes(1)))
struct GatewayRestartTests {
    @Test func aServerStartedAgainOnItsPortRetriesWhileTheHolderLetsGo() async throws {
        let holder = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
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
}
