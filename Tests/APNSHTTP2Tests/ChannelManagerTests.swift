import APNSCore
import Foundation
import NIOSSL
import Testing

@testable import APNSHTTP2

/// ``APNSChannelManager`` against the simulator (`docs/apns-protocol.md` §7.1, §7.2): one
/// connection for every request of a manager and its copies, opened again after it closed, and an
/// `apns-request-id` of its own on each request.
@Suite struct ChannelManagerTests {
    static func manager(port: Int) throws -> APNSChannelManager {
        var config = APNSHTTP2Configuration(
            host: "127.0.0.1",
            port: port,
            authentication: .token(try ClientHarness.tokenProvider()),
            topic: ClientHarness.topic
        )
        config.trustRoots = try NIOSSLCertificate.fromPEMBytes(Array(ClientHarness.certificates.ca.certificatePEM.utf8))
        return APNSChannelManager(configuration: config, environment: .production)
    }

    @Test("Create, read, list and delete share one connection; each request has its own apns-request-id")
    func oneConnectionForEveryRequest() async throws {
        let simulator = try await ClientHarness.simulator()
        let manager = try Self.manager(port: simulator.port)
        let id = try await manager.create(storagePolicy: .mostRecent)
        let copy = manager
        #expect(try await copy.read(channelID: id) == .mostRecent)
        #expect(try await manager.list() == [id])
        try await copy.delete(channelID: id)
        let operations = simulator.channelOperations
        let connections = simulator.statistics.connections
        // Closed (as Apple closes an idle connection): the next request opens another.
        await manager.close()
        #expect(try await manager.list() == [])
        let after = simulator.statistics.connections
        await simulator.stop()

        #expect(operations.map(\.kind) == [.create, .read, .list, .delete])
        #expect(connections == 1, "\(connections) connections for four requests")
        #expect(Set(operations.map(\.connection)).count == 1)
        #expect(operations.allSatisfy { $0.requestIDEchoed }, "a request without its own apns-request-id")
        #expect(Set(operations.map(\.requestID)).count == 4)
        #expect(after == 2)
    }
}
