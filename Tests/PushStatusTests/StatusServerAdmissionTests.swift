import NIOCore
import NIOHTTP1
import PushStatus
import Testing

@Suite("StatusServer: the probe reserve, the per-peer cap and the connection lifetime")
struct StatusServerAdmissionTests {
    @Test func beyondTheGeneralSlotsProbesAreAnsweredAndOtherPathsGet503() async throws {
        // A deadline longer than any stall of a loaded machine: the held connections keep their
        // slots for the whole test.
        let configuration = StatusServer.Configuration(
            host: "127.0.0.1",
            port: 0,
            maximumConnections: 2,
            reservedProbeConnections: 1,
            requestTimeout: .seconds(120)
        )
        try await withStatusServer(configuration: configuration) { _, client in
            try await withHeldConnections(2, port: client.port) {
                let refused = try await withDeadline("the answer to /metrics beyond the general slots") {
                    try await PeerConnection.with(port: client.port) { try await $0.get("/metrics") }
                }
                #expect(refused?.status == .serviceUnavailable)
                #expect(refused?.headers.first(name: "Retry-After") == "1")
                #expect(refused?.closes == true)

                for path in ["/health/live", "/health/ready"] {
                    let (answer, closed) = try await withDeadline("the answer to \(path) beyond the general slots") {
                        try await PeerConnection.with(port: client.port) { connection in
                            // Asked with keep-alive: the reserve answers once and closes anyway.
                            let answer = try await connection.get(path)
                            return (answer, try await connection.waitForClose())
                        }
                    }
                    #expect(answer?.status == .ok, "\(path)")
                    #expect(answer?.closes == true, "\(path)")
                    #expect(closed, "\(path): the connection stayed open after its answer")
                }
            }
        }
    }

    @Test func aSilentConnectionInTheReserveIsClosedWithinTheReserveTimeoutAndTheProbeGetsItsSlot() async throws {
        // The general request timeout is far beyond the test: only the reserve's own deadline can
        // close the silent connection.
        let configuration = StatusServer.Configuration(
            host: "127.0.0.1",
            port: 0,
            maximumConnections: 1,
            reservedProbeConnections: 1,
            requestTimeout: .seconds(120)
        )
        try await withStatusServer(configuration: configuration) { _, client in
            try await withHeldConnections(1, port: client.port) {
                let clock = ContinuousClock()
                let (closed, after) = try await withDeadline(seconds: 30, "the close of a silent reserve connection") {
                    let start = clock.now
                    return try await PeerConnection.with(port: client.port) { silent in
                        return (try await silent.waitForClose(), clock.now - start)
                    }
                }
                #expect(closed, "the server sent something to a connection that asked nothing")
                #expect(after >= StatusServer.reserveRequestTimeout - .milliseconds(100))
                #expect(after < StatusServer.reserveRequestTimeout + .seconds(10), "closed after \(after)")
                let probe = try await withDeadline("a probe once the reserve slot is free") {
                    while true {
                        if let answer = try await PeerConnection.with(
                            port: client.port,
                            { try await $0.get("/health/live") }
                        ) {
                            return answer
                        }
                        // The server has not yet seen the silent connection's close.
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
                #expect(probe.status == .ok)
            }
        }
    }

    @Test func aPeerHoldsAtMostItsShareOfTheGeneralSlots() async throws {
        let configuration = StatusServer.Configuration(
            host: "127.0.0.1",
            port: 0,
            maximumConnections: 8,
            reservedProbeConnections: 2,
            maximumConnectionsPerPeer: 2,
            requestTimeout: .seconds(120)
        )
        try await withStatusServer(configuration: configuration) { _, client in
            try await PeerConnection.with(port: client.port) { first in
                #expect(try await first.get("/metrics")?.status == .ok)
                try await withHeldConnections(1, port: client.port) {
                    // Six general slots are free, but 127.0.0.1 holds its two.
                    let third = try await withDeadline("a third connection from the same peer") {
                        try await PeerConnection.with(port: client.port) { connection in
                            (try await connection.get("/metrics"), try await connection.waitForClose())
                        }
                    }
                    #expect(third.0?.status == .serviceUnavailable)
                    #expect(third.1)
                    // Its probes are still answered, from the reserve.
                    let probe = try await withDeadline("a probe from the peer at its share") {
                        try await PeerConnection.with(port: client.port) { try await $0.get("/health/live") }
                    }
                    #expect(probe?.status == .ok)
                    #if os(Linux)
                    // Another peer gets a general slot: kept alive, serving every path.
                    let other = try await withDeadline("connections from another peer") {
                        try await PeerConnection.with(port: client.port, from: "127.0.0.2") { connection in
                            [try await connection.get("/metrics"), try await connection.get("/status")]
                        }
                    }
                    #expect(other.map { $0?.status } == [.ok, .ok])
                    #expect(other.allSatisfy { $0?.closes == false })
                    #endif
                }
                // The second has closed: once the server has seen the close, the peer is served
                // in a general slot again.
                let served = try await withDeadline("a general slot for the peer after one closed") {
                    while true {
                        let answer = try await PeerConnection.with(port: client.port) { try await $0.get("/metrics") }
                        if answer?.status == .ok {
                            return answer
                        }
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
                #expect(served?.status == .ok)
                // The first kept its slot throughout.
                #expect(try await first.get("/status")?.status == .ok)
            }
        }
    }

    @Test func aConnectionThatKeepsPollingIsClosedAfterItsMaximumAgeWithConnectionClose() async throws {
        // The request timeout is far beyond the test: only the lifetime can close the connection.
        let age = Duration.seconds(1)
        let configuration = StatusServer.Configuration(
            host: "127.0.0.1",
            port: 0,
            requestTimeout: .seconds(120),
            maximumConnectionAge: age
        )
        try await withStatusServer(configuration: configuration) { _, client in
            let clock = ContinuousClock()
            let (answers, lived, closed) = try await withDeadline(seconds: 30, "the close of a polling connection") {
                // Before connecting: the server's clock for the age starts later, once it accepts.
                let opened = clock.now
                return try await PeerConnection.with(port: client.port) { connection in
                    var answers: [(answer: PeerConnection.Answer?, at: Duration)] = []
                    // A poller: a request every 20 ms until an answer says the connection closes.
                    // The pause is the client's behaviour, not a synchronisation. Each request
                    // re-arms the deadline, so only the age can end the connection.
                    while answers.last?.answer?.closes != true {
                        let answer = try await connection.get("/metrics")
                        answers.append((answer, clock.now - opened))
                        if answer == nil { break }
                        try await Task.sleep(for: .milliseconds(20))
                    }
                    let lived = clock.now - opened
                    return (answers, lived, try await connection.waitForClose())
                }
            }
            #expect(answers.allSatisfy { $0.answer?.status == .ok }, "a request went unanswered")
            // Every answer that ended before the age kept the connection alive (a machine slow
            // enough may answer none that soon).
            #expect(answers.filter { $0.at < age }.allSatisfy { $0.answer?.closes == false })
            #expect(answers.dropLast().allSatisfy { $0.answer?.closes == false })
            #expect(answers.last?.answer?.closes == true)
            #expect(closed, "the server did not close the connection after Connection: close")
            #expect(lived >= age, "closed after \(lived), before its maximum age")
        }
    }

    /// Runs `body` while `count` keep-alive connections from 127.0.0.1 are open, each proven
    /// served in a general slot by a `/metrics` answer kept alive.
    private func withHeldConnections<Result>(
        _ count: Int,
        port: Int,
        _ body: () async throws -> Result
    ) async throws -> Result {
        guard count > 0 else { return try await body() }
        return try await PeerConnection.with(port: port) { connection in
            let answer = try await connection.get("/metrics")
            try #require(answer?.status == .ok && answer?.closes == false, "a held connection was not served")
            return try await withHeldConnections(count - 1, port: port, body)
        }
    }
}
