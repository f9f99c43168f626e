import APNSCore
import APNSSimulator
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

    @Test(
        "Create, read, list and delete share one connection; each request has its own apns-request-id",
        arguments: APNSHTTP2Simulator.Configuration.Framing.allCases
    )
    func oneConnectionForEveryRequest(_ framing: APNSHTTP2Simulator.Configuration.Framing) async throws {
        let simulator = try await ClientHarness.simulator { $0.framing = framing }
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

    @Test(
        "A list of 10,000 channels, an answer far over HTTP/2's initial 64 KiB window, arrives whole",
        arguments: APNSHTTP2Simulator.Configuration.Framing.allCases
    )
    func aLargeAnswerArrivesWhole(_ framing: APNSHTTP2Simulator.Configuration.Framing) async throws {
        let simulator = try await ClientHarness.simulator { $0.framing = framing }
        let created = Set(
            (0..<10_000).compactMap { _ in
                simulator.createChannel(bundleID: ClientHarness.topic, storagePolicy: .noMessageStored)
            }
        )
        let manager = try Self.manager(port: simulator.port)
        let listed = try await manager.list()
        await manager.close()
        await simulator.stop()
        #expect(created.count == 10_000)
        #expect(listed.count == 10_000 && Set(listed) == created)
    }

    @Test("After GOAWAY the next request opens a new connection and is answered")
    func goAwayOpensANewConnection() async throws {
        let simulator = try await ClientHarness.simulator()
        let manager = try Self.manager(port: simulator.port)
        let id = try await manager.create(storagePolicy: .mostRecent)
        simulator.sendGoAwayToAll()
        // The GOAWAY may still be on its way: a request sent before it arrived fails with a
        // sentence; one after it goes on a new connection.
        var policy: APNSChannelStoragePolicy?
        for _ in 0..<3 where policy == nil {
            do throws(APNSChannelError) { policy = try await manager.read(channelID: id) } catch {
                #expect(error.reason.contains("GOAWAY") || error.reason.contains("closed"), "\(error)")
            }
        }
        let connections = simulator.statistics.connections
        await manager.close()
        await simulator.stop()
        #expect(policy == .mostRecent)
        #expect(connections == 2)
    }

    @Test("A server that never answers: the request fails after the manager's timeout, with a sentence")
    func noAnswerTimesOut() async throws {
        let simulator = try await ClientHarness.simulator { $0.responseDelay = .seconds(60) }
        var manager = try Self.manager(port: simulator.port)
        manager.timeout = .milliseconds(500)
        await #expect {
            _ = try await manager.list()
        } throws: { error in
            (error as? APNSChannelError)?.reason.contains("no answer from 127.0.0.1:\(simulator.port)") == true
        }
        await manager.close()
        await simulator.stop()
    }
}
