import NIOCore
import NIOPosix
import Testing

@testable import PushLocalStack

/// A stopped gateway is started again on its port even when a client's connect holds that port
/// for a moment (``LocalStack/restartGateway()``).
@Suite(.timeLimit(.minutes(1)))
struct GatewayRestartTests {
    @Test func aServerStartedAgainOnItsPortWaitsForAMomentaryHolderToLetGo() async throws {
        let holder = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(holder.localAddress?.port)
        let release = Task {
            try await Task.sleep(for: .milliseconds(300))
            try await holder.close()
        }
        let server = try await LocalStack.onTheSamePort {
            try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: port).get()
        }
        #expect(server.localAddress?.port == port)
        try await release.value
        try await server.close()
    }
}
