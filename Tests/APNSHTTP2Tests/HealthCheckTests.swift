import APNSCore
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Testing

@testable import APNSHTTP2

/// PING health checks (§3.5, §6.11) against a server that completes TLS and sends its HTTP/2
/// SETTINGS, then goes silent: it never reads again, so it never answers a PING.
@Suite("HTTP/2 client health checks", .timeLimit(.minutes(1)))
struct HealthCheckTests {
    /// Sends an empty SETTINGS frame after the TLS handshake and ignores everything after it.
    final class SilentServerHandler: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        func channelActive(context: ChannelHandlerContext) {
            // Frame header: length 0, type 4 (SETTINGS), flags 0, stream 0.
            let settings = context.channel.allocator.buffer(bytes: [0, 0, 0, 4, 0, 0, 0, 0, 0])
            context.writeAndFlush(wrapOutboundOut(settings), promise: nil)
            context.fireChannelActive()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
    }

    static func silentServer() async throws -> any Channel {
        let certificates = ClientHarness.certificates
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(certificates.server.certificatePEM.utf8)).map {
                .certificate($0)
            },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(certificates.server.keyPEM.utf8), format: .pem))
        )
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    try channel.pipeline.syncOperations.addHandler(SilentServerHandler())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return server
    }

    @Test("a connection whose PING goes unanswered is closed, and its notification is resent on a new one")
    func unansweredPingClosesTheConnection() async throws {
        let server = try await Self.silentServer()
        let port = try #require(server.localAddress?.port)
        let client = try ClientHarness.certificateClient(port: port) {
            $0.maxConnections = 1
            $0.pingInterval = .milliseconds(100)
            $0.pingTimeout = .milliseconds(200)
            $0.maxAttempts = 2
        }
        // The notification is written, never answered; the PING goes unanswered too.
        try await client.send(ClientHarness.submissions(0..<1))
        var reasons: [String] = []
        var outcome: APNSDeliveryOutcome?
        // The second connection's close settles the notification and is then reported.
        while outcome == nil || reasons.count < 2, let event = await client.nextEvent() {
            if case .disconnected(_, let reason) = event { reasons.append(reason) }
            if let o = event.outcome { outcome = o }
        }
        await client.shutdown(gracePeriod: .seconds(1))
        try await server.close()

        #expect(reasons.count == 2)
        #expect(reasons.allSatisfy { $0.contains("no PING answer") }, "\(reasons)")
        // Written twice, answered never: the server may have it, so the outcome says so.
        #expect(outcome?.status == .indeterminate)
        #expect(outcome?.possibleDuplicate == true)
        #expect(outcome?.attempts == 2)
    }

    @Test("a notification left unanswered and still waiting at shutdown is reported indeterminate, never as not sent")
    func abandonedAfterAnUnansweredAttemptIsIndeterminate() async throws {
        let server = try await Self.silentServer()
        let port = try #require(server.localAddress?.port)
        let client = try ClientHarness.certificateClient(port: port) {
            $0.maxConnections = 1
            $0.pingInterval = .milliseconds(100)
            $0.pingTimeout = .milliseconds(200)
            $0.reconnectBaseDelay = .seconds(5)
            $0.reconnectMaxDelay = .seconds(5)
        }
        try await client.send(ClientHarness.submissions(0..<1))
        // Connected: stop listening, so that after the PING timeout the notification waits in
        // the queue (reconnects are refused) instead of going out again.
        while let event = await client.nextEvent() {
            if case .connected = event { break }
        }
        try await server.close()
        while let event = await client.nextEvent() {
            if case .disconnected = event { break }
        }
        async let stopped: Void = client.shutdown(gracePeriod: .milliseconds(100))
        var outcome: APNSDeliveryOutcome?
        while outcome == nil, let event = await client.nextEvent() { outcome = event.outcome }
        await stopped
        #expect(outcome?.status == .indeterminate, "\(String(describing: outcome))")
        #expect(outcome?.possibleDuplicate == true)
    }
}
