import Foundation
import PushLocalStack
import PushRedis
import PushTestSupport
import Testing

@Suite("Commands", .timeLimit(.minutes(2)))
struct CommandTests {
    @Test("SET/GET/INCR/DEL round trip and the null bulk reply")
    func setGetIncrDel() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            #expect(try await redis.send(["SET", "greeting", "hello"]) == .simpleString("OK"))
            #expect(try await redis.send(["GET", "greeting"]) == .bulk(Array("hello".utf8)))
            #expect(try await redis.send(["GET", "greeting"]).string == "hello")
            #expect(try await redis.send(["INCR", "counter"]) == .integer(1))
            #expect(try await redis.send(["INCR", "counter"]).int == 2)
            #expect(try await redis.send(["GET", "counter"]).int == 2)
            #expect(try await redis.send(["DEL", "greeting", "counter", "absent"]) == .integer(2))

            let missing = try await redis.send(["GET", "greeting"])
            #expect(missing == .bulk(nil))
            #expect(missing.isNull)
            #expect(missing.string == nil)

            // An empty string is not null.
            try await redis.send(["SET", "empty", ""])
            #expect(try await redis.send(["GET", "empty"]) == .bulk([]))
            await redis.close()
        }
    }

    @Test("Arrays: LRANGE, empty arrays, nested arrays")
    func arrays() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            #expect(try await redis.send(["RPUSH", "list", "a", "b", "c"]) == .integer(3))
            let range = try await redis.send(["LRANGE", "list", "0", "-1"])
            #expect(range.array?.compactMap(\.string) == ["a", "b", "c"])
            #expect(try await redis.send(["LRANGE", "nothing", "0", "-1"]) == .array([]))

            let nested = try await redis.send(["EVAL", "return {1, 'two', {3, false}}", "0"])
            #expect(nested == .array([.integer(1), .bulk(Array("two".utf8)), .array([.integer(3), .bulk(nil)])]))
        }
    }

    @Test("A null array (BLPOP timing out) comes back as a null value")
    func nullArray() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let reply = try await redis.send(["BLPOP", "no-such-list", "0.05"])
            #expect(reply.isNull)
            #expect(reply == .bulk(nil))  // hiredis 0.14 reports *-1 and $-1 alike
        }
    }

    @Test("Binary-safe keys and values: every byte 0x00...0xFF")
    func binarySafe() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let value = (0...255).map { UInt8($0) }
            let key: [UInt8] = [0x00, 0x0D, 0x0A, 0xFF, 0x20]
            #expect(try await redis.send([Array("SET".utf8), key, value]) == .simpleString("OK"))
            #expect(try await redis.send([Array("STRLEN".utf8), key]) == .integer(256))
            let reply = try await redis.send([Array("GET".utf8), key])
            #expect(reply.bytes == value)
            #expect(reply.string == nil)  // not valid UTF-8

            let replies = try await redis.pipeline([[Array("GET".utf8), key], [Array("EXISTS".utf8), key]])
            #expect(replies == [.bulk(value), .integer(1)])
        }
    }

    @Test("Error replies from send are thrown as .server and leave the connection usable")
    func serverErrors() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            try await redis.send(["SET", "text", "not a number"])

            let notInteger = try #require(await redisError { try await redis.send(["INCR", "text"]) })
            #expect(notInteger.code == .server("ERR"))
            #expect(notInteger.message == "Redis rejected INCR: ERR value is not an integer or out of range")
            #expect(notInteger.detail == "ERR value is not an integer or out of range")

            let wrongType = try #require(await redisError { try await redis.send(["LPUSH", "text", "x"]) })
            #expect(wrongType.code == .server("WRONGTYPE"))

            let unknown = try #require(await redisError { try await redis.send(["NOSUCHCOMMAND"]) })
            #expect(unknown.code == .server("ERR"))

            let empty = try #require(await redisError { try await redis.send([String]()) })
            #expect(empty.code == .invalidCommand)

            #expect(await redis.isConnected)
            #expect(try await redis.send(["PING"]) == .simpleString("PONG"))
        }
    }

    @Test("Concurrent callers share one connection safely; one round trip per send")
    func concurrentCallers() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let before = redis.roundTrips
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<200 {
                    group.addTask { try await redis.send(["INCR", "shared"]) }
                }
                try await group.waitForAll()
            }
            #expect(redis.roundTrips - before == 200)
            #expect(try await redis.send(["GET", "shared"]).int == 200)
        }
    }

    @Test("Connecting to a port nobody listens on fails with a clear .connection error")
    func connectionRefused() async throws {
        let port = try RedisServerProcess.freePort()
        let error = try #require(
            await redisError {
                try await RedisConnection.connect(RedisConfiguration(host: "127.0.0.1", port: port))
            }
        )
        #expect(error.code == .connection)
        #expect(error.message == "cannot connect to Redis at 127.0.0.1:\(port): Connection refused")
        #expect(error.detail == "hiredis REDIS_ERR_IO: Connection refused")
    }

    @Test("An invalid configuration is rejected before any I/O")
    func invalidConfiguration() async throws {
        let badPort = try #require(
            await redisError {
                try await RedisConnection.connect(RedisConfiguration(port: 0))
            }
        )
        #expect(badPort.code == .invalidConfiguration)
        #expect(badPort.message.contains("port 0"))

        let userOnly = try #require(
            await redisError {
                try await RedisConnection.connect(RedisConfiguration(username: "worker"))
            }
        )
        #expect(userOnly.code == .invalidConfiguration)
        #expect(userOnly.message.contains("password"))

        let zeroTimeout = try #require(
            await redisError {
                try await RedisConnection.connect(RedisConfiguration(commandTimeout: .zero))
            }
        )
        #expect(zeroTimeout.code == .invalidConfiguration)
    }

    @Test("Replies nested deeper than hiredis 0.14 supports are a .protocol error")
    func nestingLimit() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            // hiredis 0.14's reader has a fixed stack: 8 levels of arrays work, 9 do not
            // (its error text says "depth > 7").
            let eight = try await redis.send(["EVAL", "return {{{{{{{{1}}}}}}}}", "0"])
            var depth = 0
            var value = eight
            while let inner = value.array?.first {
                depth += 1
                value = inner
            }
            #expect(depth == 8)
            #expect(value == .integer(1))

            let error = try #require(
                await redisError {
                    try await redis.send(["EVAL", "return {{{{{{{{{1}}}}}}}}}", "0"])
                }
            )
            #expect(error.code == .protocol)
            #expect(
                error.detail == "hiredis REDIS_ERR_PROTOCOL: No support for nested multi bulk replies with depth > 7"
            )
            #expect(!(await redis.isConnected))
            try await redis.reconnect()
            #expect(try await redis.send(["PING"]) == .simpleString("PONG"))
        }
    }
}
