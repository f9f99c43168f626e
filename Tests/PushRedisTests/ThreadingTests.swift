import PushRedis
import PushTestSupport
import Testing

@Suite("Threading and lifetime", .timeLimit(.minutes(2)))
struct ThreadingTests {
    @Test("Blocking socket I/O does not occupy Swift's cooperative pool")
    func blockingIOLeavesThePoolFree() async throws {
        try await withRedisServer { server in
            // More blocked connections than this 2-core machine has cooperative threads.
            let blockers = 6
            var connections: [RedisConnection] = []
            for _ in 0..<blockers {
                connections.append(try await RedisConnection.connect(server.configuration()))
            }
            let clock = ContinuousClock()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for connection in connections {
                    group.addTask {
                        // Blocks until the test pushes an item (or 30 s pass, if it fails first).
                        let reply = try await connection.send(["BLPOP", "filled-later", "30"])
                        #expect(reply.array?.last?.string == "item")
                    }
                }
                // Give the BLPOPs time to reach the server (polled, with a deadline).
                let admin = try await RedisConnection.connect(server.configuration())
                let deadline = clock.now + .seconds(5)
                while clock.now < deadline {
                    let info = try await admin.send(["INFO", "clients"]).string ?? ""
                    if info.contains("blocked_clients:\(blockers)") { break }
                }
                #expect(
                    try await admin.send(["INFO", "clients"]).string?.contains("blocked_clients:\(blockers)") == true
                )

                // While all of them block, ordinary async work still runs: it finishes while
                // every BLPOP is still blocked, which a pool they occupied could not do.
                let sum = await Task { (1...1000).reduce(0, +) }.value
                #expect(sum == 500_500)
                #expect(
                    try await admin.send(["INFO", "clients"]).string?.contains("blocked_clients:\(blockers)") == true
                )
                // Then each blocked connection gets an item.
                _ = try await admin.send(["RPUSH", "filled-later"] + Array(repeating: "item", count: blockers))
                try await group.waitForAll()
            }
        }
    }

    @Test("Dropping the last reference closes the socket (on the connection's thread)")
    func deinitClosesSocket() async throws {
        try await withRedisServer { server in
            let observer = try await RedisConnection.connect(server.configuration())
            // The server's own view of one client, by id: counting `connected_clients` would also
            // count the readiness probe's connection until the server has noticed it closed.
            func isConnected(_ id: Int64) async throws -> Bool {
                let list = try await observer.send(["CLIENT", "LIST", "ID", String(id)]).string ?? ""
                return list.contains("id=\(id) ")
            }
            let id: Int64
            do {
                let temporary = try await RedisConnection.connect(server.configuration())
                #expect(try await temporary.send(["PING"]) == .simpleString("PONG"))
                id = try #require(try await temporary.send(["CLIENT", "ID"]).int)
                #expect(try await isConnected(id))
            }
            // Redis notices the close on its next event loop turn; a machine busy with the whole
            // suite can delay both sides by seconds.
            let deadline = ContinuousClock.now + .seconds(30)
            var connected = try await isConnected(id)
            while connected && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))  // poll interval
                connected = try await isConnected(id)
            }
            #expect(!connected)
        }
    }
}
