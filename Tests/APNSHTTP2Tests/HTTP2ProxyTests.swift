import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import NIOSSL
import PushTestSupport
import Testing

@testable import APNSHTTP2

/// The HTTP/2 provider API and the channel management API through a real HTTP proxy
/// (tinyproxy), with `CONNECT` tunnels (``APNSConnector``).
@Suite(.serialized, .timeLimit(.minutes(5)))
struct HTTP2ProxyTests {
    @Test("1,000 notifications over HTTP/2 through tinyproxy with Basic authentication: each accepted once")
    func deliveryThroughProxy() async throws {
        let proxy = try TinyProxy(extra: ["BasicAuth alice s3cret"])
        try await proxy.start()
        let simulator = try await ClientHarness.simulator()
        let client = try ClientHarness.tokenClient(port: simulator.port) {
            $0.proxy = try? APNSProxy(url: proxy.url(user: "alice", password: "s3cret"))
            $0.maxConnections = 2
        }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<1_000))
        let accepted = simulator.acceptedByToken
        await simulator.stop()
        let log = proxy.log
        await proxy.stop()

        #expect(run.duplicateOutcomes == 0)
        #expect(run.outcomes.count == 1_000)
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
        #expect(accepted.count == 1_000 && accepted.values.allSatisfy { $0 == 1 })
        #expect(log.contains("CONNECT 127.0.0.1:\(simulator.port) HTTP/1.1"), "tinyproxy's log: \(log)")
    }

    @Test("A proxy that denies the destination: the pool fails the notifications with the 403 sentence")
    func destinationDenied() async throws {
        let proxy = try TinyProxy(extra: ["ConnectPort 9"])
        try await proxy.start()
        let simulator = try await ClientHarness.simulator()
        let client = try ClientHarness.tokenClient(port: simulator.port) {
            $0.proxy = try? APNSProxy(url: proxy.url())
            $0.connectionRetryLimit = 2
            $0.reconnectBaseDelay = .milliseconds(1)
            $0.reconnectMaxDelay = .milliseconds(5)
        }
        let run = try await ClientHarness.run(client, ClientHarness.submissions(0..<3))
        let accepted = simulator.statistics.accepted
        await simulator.stop()
        await proxy.stop()

        #expect(run.outcomes.count == 3)
        let sentence =
            "the proxy at 127.0.0.1:\(proxy.port) refused the tunnel to 127.0.0.1:\(simulator.port) (403 Access "
            + "violation); the proxy's rules must allow CONNECT to that host and port"
        for outcome in run.outcomes.values {
            #expect(outcome.status == .connectionFailed)
            #expect(outcome.message?.contains(sentence) == true, "\(outcome)")
        }
        #expect(accepted == 0)
    }

    @Test("Broadcast channels are created and listed through tinyproxy")
    func channelManagementThroughProxy() async throws {
        let proxy = try TinyProxy()
        try await proxy.start()
        let simulator = try await ClientHarness.simulator()
        var config = APNSHTTP2Configuration(
            host: "127.0.0.1",
            port: simulator.port,
            authentication: .token(try ClientHarness.tokenProvider()),
            topic: ClientHarness.topic
        )
        config.trustRoots = try NIOSSLCertificate.fromPEMBytes(Array(ClientHarness.certificates.ca.certificatePEM.utf8))
        config.proxy = try APNSProxy(url: proxy.url())
        let manager = APNSChannelManager(configuration: config, environment: .production)
        let id = try await manager.create(storagePolicy: .none)
        let listed = try await manager.list()
        await simulator.stop()
        let log = proxy.log
        await proxy.stop()

        #expect(listed.contains(id))
        #expect(log.contains("CONNECT 127.0.0.1:\(simulator.port) HTTP/1.1"), "tinyproxy's log: \(log)")
    }
}
