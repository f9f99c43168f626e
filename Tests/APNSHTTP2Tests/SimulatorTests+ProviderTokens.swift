import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import NIOCore
import NIOHTTP2
import Testing

// Provider tokens (§4, §6.10, §6.12), response delays, flow control and recording.
extension SimulatorTests {
    // MARK: Provider tokens

    @Test("JWT signatures in JOSE (raw r‖s) and DER form are both accepted (§6.12)", arguments: [false, true])
    func rawAndDERSignatures(der: Bool) async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let jwt = try F.jwt(der: der)
        let response = try await client.send(headers: F.headers(authorization: "bearer " + jwt), body: F.payload)
        #expect(response.status == 200)
        await client.close()
        await simulator.stop()
    }

    @Test("iat older than one hour gives ExpiredProviderToken, and it sticks on that connection (§4, §6.10)")
    func expiredTokenSticks() async throws {
        let simulator = try await F.simulator()
        let client = try await F.tokenClient(simulator)
        let old = try await client.send(
            headers: F.headers(authorization: F.authorization(issuedAt: F.epoch - 3601)),
            body: F.payload
        )
        #expect(old.status == 403)
        #expect(old.reason == "ExpiredProviderToken")
        let fresh = try await client.send(headers: F.headers(authorization: F.authorization()), body: F.payload)
        #expect(fresh.status == 403)
        #expect(fresh.reason == "ExpiredProviderToken")
        await client.close()

        let next = try await F.tokenClient(simulator)
        #expect(try await next.send(headers: F.headers(), body: F.payload).status == 200)
        await next.close()
        await simulator.stop()
    }

    @Test("A token that ages past one hour on a connection is refused from then on")
    func tokenAgesOnConnection() async throws {
        let clock = TestClock(F.epoch)
        let simulator = try await F.simulator(clock: clock) { $0.expiredTokenSticks = false }
        let client = try await F.tokenClient(simulator)
        #expect(try await client.send(headers: F.headers(), body: F.payload).status == 200)
        clock.advance(by: 3601)
        let stale = try await client.send(headers: F.headers(), body: F.payload)
        #expect(stale.reason == "ExpiredProviderToken")
        // Without expiredTokenSticks a fresh token works again on the same connection.
        let fresh = try await client.send(
            headers: F.headers(authorization: F.authorization(issuedAt: clock.now)),
            body: F.payload
        )
        #expect(fresh.status == 200)
        await client.close()
        await simulator.stop()
    }

    @Test("A second team on one connection gives InvalidProviderToken (§3.2)")
    func secondTeamOnConnection() async throws {
        let otherKey = try APNSSigningKey(keyID: "OTHER12345", pem: TestCertificates.unrelatedKeyPEM())
        let simulator = try await F.simulator {
            $0.verifier = APNSJWTVerifier(keys: [
                F.keyID: .init(publicKey: F.signingKey.publicKey, teamID: F.teamID),
                otherKey.keyID: .init(publicKey: otherKey.publicKey, teamID: "OTHERTEAM1"),
            ])
        }
        let client = try await F.tokenClient(simulator)
        #expect(try await client.send(headers: F.headers(), body: F.payload).status == 200)
        let other = try await client.send(
            headers: F.headers(authorization: F.authorization(key: otherKey, team: "OTHERTEAM1")),
            body: F.payload
        )
        #expect(other.status == 403)
        #expect(other.reason == "InvalidProviderToken")
        await client.close()

        // The same token is fine on a connection of its own.
        let fresh = try await F.tokenClient(simulator)
        let own = try await fresh.send(
            headers: F.headers(authorization: F.authorization(key: otherKey, team: "OTHERTEAM1")),
            body: F.payload
        )
        #expect(own.status == 200)
        await fresh.close()
        await simulator.stop()
    }

    @Test("A topic-specific key other than the connection's first gives UnrelatedKeyIdInToken")
    func unrelatedKeyID() async throws {
        let topicKey = try APNSSigningKey(keyID: "TOPICKEY12", pem: TestCertificates.unrelatedKeyPEM())
        let simulator = try await F.simulator {
            $0.verifier = APNSJWTVerifier(keys: [
                F.keyID: .init(publicKey: F.signingKey.publicKey, teamID: F.teamID),
                topicKey.keyID: .init(publicKey: topicKey.publicKey, teamID: F.teamID, topics: [F.topic]),
            ])
        }
        let client = try await F.tokenClient(simulator)
        #expect(try await client.send(headers: F.headers(), body: F.payload).status == 200)
        let response = try await client.send(
            headers: F.headers(authorization: F.authorization(key: topicKey)),
            body: F.payload
        )
        #expect(response.status == 403)
        #expect(response.reason == "UnrelatedKeyIdInToken")
        await client.close()
        await simulator.stop()
    }

    @Test("Changing the token within 20 minutes on one connection gives TooManyProviderTokenUpdates (§4)")
    func tokenChangeWithin20Minutes() async throws {
        let clock = TestClock(F.epoch)
        let simulator = try await F.simulator(clock: clock)
        let client = try await F.tokenClient(simulator)
        #expect(try await client.send(headers: F.headers(), body: F.payload).status == 200)
        clock.advance(by: 5 * 60)
        let early = try await client.send(
            headers: F.headers(authorization: F.authorization(issuedAt: clock.now)),
            body: F.payload
        )
        #expect(early.status == 429)
        #expect(early.reason == "TooManyProviderTokenUpdates")
        // The previous token still works.
        #expect(try await client.send(headers: F.headers(), body: F.payload).status == 200)
        clock.advance(by: 16 * 60)
        let later = try await client.send(
            headers: F.headers(authorization: F.authorization(issuedAt: clock.now)),
            body: F.payload
        )
        #expect(later.status == 200)
        await client.close()
        await simulator.stop()
    }

    @Test("responseDelay holds every answer; the delayed streams count as open")
    func responseDelay() async throws {
        let simulator = try await F.simulator { $0.responseDelay = .milliseconds(500) }
        let client = try await F.certificateClient(simulator)
        let responses = try await client.send((0..<5).map { (F.headers(token: F.token($0)), F.payload) })
        #expect(responses.map(\.status) == [200, 200, 200, 200, 200])
        #expect(simulator.statistics.accepted == 5)
        #expect(simulator.statistics.maxConcurrentStreamsSeen == 5)
        await client.close()
        await simulator.stop()
    }

    // MARK: Flow control, recording

    @Test("Megabytes of bodies pass: the simulator keeps the stream and connection windows open")
    func largeBodiesFlowControl() async throws {
        let simulator = try await F.simulator()
        let client = try await F.certificateClient(simulator)
        // Bodies far beyond one stream window (65,535 bytes): answered 413 once complete.
        let huge = try await client.send((0..<4).map { (F.headers(token: F.token($0)), Self.body(1 << 20)) })
        #expect(huge.map(\.status) == [413, 413, 413, 413])
        // 8 MB of regular bodies: beyond the connection window many times over.
        let many = try await client.send((0..<2000).map { (F.headers(token: F.token($0)), Self.body(4000)) })
        #expect(many.allSatisfy { $0.status == 200 })
        #expect(simulator.statistics.accepted == 2000)
        await client.close()
        await simulator.stop()
    }

    @Test("Accepted requests are recorded as JSON lines with \"api\":\"http2\"")
    func recordFile() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("h2sim-\(UUID().uuidString).jsonl")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let simulator = try await F.simulator { $0.recordPath = path }
        let client = try await F.tokenClient(simulator)
        _ = try await client.send((0..<2).map { (F.headers(token: F.token($0)), F.payload) })
        await client.close()
        await simulator.stop()
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 2)
        let first = try #require(try JSONValue.parse(Array(lines[0].utf8)).objectValue)
        #expect(first["api"]?.stringValue == "http2")
        #expect(first["token"]?.stringValue == F.token(0).hex)
        #expect(first["topic"]?.stringValue == F.topic)
        #expect(first["payloadLength"]?.intValue == Int64(F.payload.count))
    }

    static func body(_ size: Int) -> [UInt8] {
        // A JSON object of exactly `size` bytes.
        let prefix = Array(#"{"aps":{"alert":""#.utf8)
        let suffix = Array(#""}}"#.utf8)
        return prefix + [UInt8](repeating: UInt8(ascii: "a"), count: max(0, size - prefix.count - suffix.count))
            + suffix
    }
}
