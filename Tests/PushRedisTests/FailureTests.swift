import PushRedis
import PushTestSupport
import Testing

@Suite("Failures, timeouts and reconnect", .timeLimit(.minutes(2)))
struct FailureTests {
    @Test("Server killed mid-use: .connection promptly, then reconnect re-AUTHs and re-SELECTs")
    func serverStoppedMidUse() async throws {
        try await withRedisServer(["--requirepass", "s3cret"]) { server in
            let redis = try await RedisConnection.connect(
                server.configuration(password: "s3cret", database: 2, commandTimeout: .seconds(10))
            )
            try await redis.send(["SET", "before", "1"])

            await server.stop()

            let clock = ContinuousClock()
            let start = clock.now
            let lost = try #require(await redisError { try await redis.send(["GET", "before"]) })
            #expect(lost.code == .connection)
            #expect(
                lost.message.hasPrefix("lost the connection to Redis at 127.0.0.1:\(server.port) while running GET")
            )
            // No hang until the 10 s command timeout (room for a busy machine).
            #expect(clock.now - start < .seconds(5))
            #expect(!(await redis.isConnected))

            // A broken connection fails at once, without I/O.
            let secondStart = clock.now
            let broken = try #require(await redisError { try await redis.pipeline([["PING"]]) })
            #expect(broken.code == .connection)
            #expect(broken.message.contains("call reconnect()"))
            #expect(clock.now - secondStart < .seconds(2))

            // Reconnecting while the server is down fails and leaves the connection broken.
            let refused = try #require(await redisError { try await redis.reconnect() })
            #expect(refused.code == .connection)
            #expect(refused.message.hasSuffix("Connection refused"))

            try await server.start()  // same port, empty data set
            try await redis.reconnect()
            #expect(await redis.isConnected)
            try await redis.send(["SET", "after", "2"])
            let db2 = try await RedisConnection.connect(server.configuration(password: "s3cret", database: 2))
            #expect(try await db2.send(["GET", "after"]).string == "2")  // SELECT 2 was repeated
        }
    }

    @Test("A large pipeline to a dead server throws .connection (SIGPIPE does not kill the process)")
    func writeToDeadServer() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration(commandTimeout: .seconds(3)))
            try await redis.send(["PING"])
            await server.stop()

            let value = [UInt8](repeating: 0x61, count: 4096)
            let commands = (0..<4_000).map { [Array("SET".utf8), Array("k\($0)".utf8), value] }
            let error = try #require(await redisError { try await redis.pipeline(commands) })
            #expect(error.code == .connection)
            #expect(error.message.contains("running a pipeline of 4000 commands"))
        }
    }

    @Test("Command timeout: a blocked command throws .timeout, then reconnect works")
    func commandTimeout() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration(commandTimeout: .milliseconds(200)))
            let clock = ContinuousClock()
            let start = clock.now
            let error = try #require(await redisError { try await redis.send(["BLPOP", "empty-list", "5"]) })
            let elapsed = clock.now - start
            #expect(error.code == .timeout)
            #expect(
                error.message.contains("did not answer within the command timeout of 0.2 seconds while running BLPOP")
            )
            #expect(elapsed >= .milliseconds(150))
            // Well before BLPOP's own 5 s: the timeout ended the wait (with room for a busy machine).
            #expect(elapsed < .seconds(4))

            let after = try #require(await redisError { try await redis.send(["PING"]) })
            #expect(after.code == .connection)

            try await redis.reconnect()
            #expect(try await redis.send(["PING"]) == .simpleString("PONG"))
        }
    }

    @Test("close() makes later calls throw .connection; reconnect() opens it again")
    func closeAndReopen() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            await redis.close()
            let closed = try #require(await redisError { try await redis.send(["PING"]) })
            #expect(closed.code == .connection)
            #expect(closed.message.contains("is closed"))
            await redis.close()  // closing twice is harmless

            try await redis.reconnect()
            #expect(try await redis.send(["PING"]) == .simpleString("PONG"))
        }
    }
}
