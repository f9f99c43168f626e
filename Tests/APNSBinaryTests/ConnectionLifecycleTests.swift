import APNSCore
import APNSSimulator
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import PushTestSupport
import Testing

@testable import APNSBinary

@Suite(.timeLimit(.minutes(2))) struct ConnectionLifecycleTests {
    /// Reads events until `match` accepts one; nil if the stream ends first, or after 30 s
    /// (an issue is recorded).
    static func waitFor(
        _ client: APNSBinaryClient,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ match: @escaping @Sendable (APNSDeliveryEvent) -> Bool
    ) async -> APNSDeliveryEvent? {
        await within(.seconds(30), "a matching event from the client", sourceLocation: sourceLocation) {
            for await event in client.events where match(event) { return event }
            return nil
        }
    }

    @Test("An iteration of the events ends when its task is cancelled, with no event and the client still open")
    func eventIterationEndsWhenCancelled() async throws {
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator)
        // Never started: no event will come, so only the cancellation can end the iteration.
        let reader = Task { () -> Int in
            var seen = 0
            for await _ in client.events { seen += 1 }
            return seen
        }
        reader.cancel()
        let seen = await within(.seconds(30), "the cancelled iteration to end") { await reader.value }
        #expect(seen == 0)
        await client.shutdown()
        await simulator.stop()
    }

    @Test func warmConnectionsOpenWithoutTraffic() async throws {
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator) {
            $0.minConnections = 2
            $0.maxConnections = 2
        }
        client.start()
        var connected = Set<Int>()
        for await event in client.events {
            if case .connected(let id) = event { connected.insert(id) }
            if connected.count == 2 { break }
        }
        #expect(connected.count == 2)
        #expect(simulator.statistics.connections == 2)
        await client.shutdown()
        await simulator.stop()
    }

    @Test func idleConnectionsCloseAfterTheIdleTimeout() async throws {
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator) {
            $0.idleTimeout = .milliseconds(200)
            $0.confirmationWindow = .milliseconds(50)
        }
        try await client.send(Harness.notification(), to: Harness.token(1), tag: 1)
        let outcome = await Self.waitFor(client) { $0.outcome != nil }
        #expect(outcome?.outcome?.isTransmitted == true)
        let idle = await Self.waitFor(client) { if case .timeout(_, "idle") = $0 { true } else { false } }
        #expect(idle != nil)
        let closed = await Self.waitFor(client) {
            if case .disconnected(_, "idle timeout") = $0 { true } else { false }
        }
        #expect(closed != nil)
        await client.shutdown()
        await simulator.stop()
    }

    @Test func aServerThatNeverCompletesTheHandshakeTimesOut() async throws {
        // A TCP listener that accepts and then says nothing.
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { $0.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        var config = APNSBinaryConfiguration(
            host: "127.0.0.1",
            port: silent.localAddress!.port!,
            credentials: try Harness.clientCredentials()
        )
        // Long enough that a busy machine's event loop still sees the TCP connect complete in
        // time: what must time out is the handshake.
        config.connectTimeout = .seconds(1)
        config.connectionRetryLimit = 1
        let client = try APNSBinaryClient(configuration: config)
        let run = try await Harness.run(
            client,
            [APNSSubmission(tag: 7, token: Harness.token(7), notification: Harness.notification())]
        )
        #expect(run.outcomes[7]?.status == .connectionFailed)
        #expect(
            run.events.contains { if case .timeout(_, let reason) = $0 { reason.contains("handshake") } else { false } }
        )
        try await silent.close()
    }
}

/// The simulator answers raw frames the way §1.4–§1.5 say Apple does.
@Suite(.timeLimit(.minutes(2))) struct SimulatorFidelityTests {
    /// Sends `bytes` over TLS with the test client certificate and returns everything the gateway
    /// sends back before it closes.
    static func exchange(_ simulator: APNSSimulator, _ bytes: ByteBuffer) async throws -> [UInt8] {
        let credentials = try Harness.clientCredentials()
        let context = try NIOSSLContext(configuration: credentials.tlsClientConfiguration())
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: simulator.binaryPort) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        NIOSSLClientHandler(context: context, serverHostname: nil)
                    )
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        var received: [UInt8] = []
        do {
            try await channel.executeThenClose { inbound, outbound in
                try await outbound.write(bytes)
                for try await chunk in inbound {
                    received += chunk.readableBytesView
                    // One error packet is all a gateway ever says.
                    if received.count >= ErrorResponse.size { break }
                }
            }
        } catch let error as NIOSSLError where error == .uncleanShutdown {}
        return received
    }

    static func frame(
        token: [UInt8]? = [UInt8](repeating: 1, count: 32),
        payload: String? = #"{"aps":{"alert":"x"}}"#,
        identifier: UInt32 = 0x0A0B_0C0D,
        priority: UInt8? = 10
    ) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeNotificationFrame(
            BinaryNotificationFrame(
                command: .framed,
                token: token,
                payload: payload.map { ByteBuffer(string: $0) },
                identifier: identifier,
                expiry: 0,
                priority: priority
            )
        )
        return buffer
    }

    @Test(arguments: [
        (frame(token: nil), UInt8(2)),
        (frame(token: [UInt8](repeating: 1, count: 20)), UInt8(5)),
        (frame(payload: nil), UInt8(4)),
        (frame(payload: String(repeating: "x", count: 3000)), UInt8(7)),
        (frame(priority: 7), UInt8(128)),
        (frame(payload: #"{"aps":"#), UInt8(128)),
        (frame(payload: #"[1,2]"#), UInt8(128)),
    ])
    func badFramesGetTheirStatusAndIdentifier(frame: ByteBuffer, status: UInt8) async throws {
        let simulator = try await Harness.simulator()
        let reply = try await Self.exchange(simulator, frame)
        #expect(reply == [8, status, 0x0A, 0x0B, 0x0C, 0x0D])
        #expect(simulator.acceptedByToken.isEmpty)
        await simulator.stop()
    }

    @Test func framesAfterABadOneAreDiscardedAndTheOnesBeforeAreKept() async throws {
        let simulator = try await Harness.simulator {
            $0.badTokens = [try! DeviceToken(bytes: [UInt8](repeating: 2, count: 32))]
        }
        var bytes = Self.frame(token: [UInt8](repeating: 1, count: 32), identifier: 1)
        var bad = Self.frame(token: [UInt8](repeating: 2, count: 32), identifier: 2)
        var after = Self.frame(token: [UInt8](repeating: 3, count: 32), identifier: 3)
        bytes.writeBuffer(&bad)
        bytes.writeBuffer(&after)
        let reply = try await Self.exchange(simulator, bytes)
        #expect(reply == [8, 8, 0, 0, 0, 2])
        let accepted = simulator.acceptedByToken
        #expect(accepted.count == 1)
        #expect(accepted[try DeviceToken(bytes: [UInt8](repeating: 1, count: 32))] == 1)
    }

    @Test func aBadSimpleFrameClosesTheConnectionWithoutAPacket() async throws {
        let simulator = try await Harness.simulator()
        var buffer = ByteBuffer()
        buffer.writeSimpleNotification(token: [UInt8](repeating: 1, count: 32), payload: Array("not json".utf8))
        let reply = try await Self.exchange(simulator, buffer)
        #expect(reply.isEmpty)
        await simulator.stop()
    }

    @Test func anUnknownCommandIsAProtocolError() async throws {
        let simulator = try await Harness.simulator()
        let reply = try await Self.exchange(simulator, ByteBuffer(bytes: [42, 0, 0, 0, 0, 0, 0]))
        #expect(reply == [8, 128, 0, 0, 0, 0])
        await simulator.stop()
    }
}

/// A TLS server that completes the handshake and then never reads again.
private final class StopReadingAfterHandshake: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        }
        context.fireUserInboundEventTriggered(event)
    }
}

@Suite(.timeLimit(.minutes(2))) struct StalledGatewayTests {
    @Test func aGatewayThatStopsReadingIsAbandonedAfterTheWriteTimeout() async throws {
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(Harness.certificates.server.certificatePEM.utf8))
                .map {
                    .certificate($0)
                },
            privateKey: .privateKey(
                try NIOSSLPrivateKey(bytes: Array(Harness.certificates.server.keyPEM.utf8), format: .pem)
            )
        )
        tls.certificateVerification = .none
        let context = try NIOSSLContext(configuration: tls)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelOption(.socketOption(.so_rcvbuf), value: 16 << 10)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    try channel.pipeline.syncOperations.addHandler(StopReadingAfterHandshake())
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        var config = APNSBinaryConfiguration(
            host: "127.0.0.1",
            port: server.localAddress!.port!,
            credentials: try Harness.clientCredentials()
        )
        config.writeTimeout = .milliseconds(500)
        config.connectionRetryLimit = 2
        config.socketSendBufferSize = 16 << 10
        let client = try APNSBinaryClient(configuration: config)
        let count = 1500
        let run = try await Harness.run(
            client,
            (0..<count).map {
                APNSSubmission(tag: UInt64($0), token: Harness.token($0), notification: Harness.notification())
            }
        )
        // Delivery does not hang on a gateway that stops reading: each stalled connection is
        // closed and named, and the rest goes out on a new one. Under the binary protocol, frames
        // that reached the peer's kernel and stayed unanswered for the confirmation window count
        // as transmitted (success is silence), so here every notification ends up that way.
        #expect(run.outcomes.count == count)
        let stalls = run.events.filter {
            if case .timeout(_, let reason) = $0 { reason.contains("stopped reading") } else { false }
        }
        #expect(!stalls.isEmpty)
        let connections = run.events.filter { if case .connected = $0 { true } else { false } }
        #expect(connections.count > stalls.count)
        try await server.close()
    }
}
