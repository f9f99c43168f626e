import PushRedis
import PushTestSupport
import Testing

@Suite("Pipelining", .timeLimit(.minutes(2)))
struct PipelineTests {
    @Test("10,000 commands: 10,000 replies in order, in exactly one round trip")
    func tenThousandCommands() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            var commands: [[[UInt8]]] = []
            for index in 0..<5_000 {
                commands.append([Array("SET".utf8), Array("key:\(index)".utf8), Array("value-\(index)".utf8)])
                commands.append([Array("INCR".utf8), Array("sequence".utf8)])
            }
            #expect(commands.count == 10_000)

            let before = redis.roundTrips
            let replies = try await redis.pipeline(commands)
            #expect(redis.roundTrips - before == 1)
            #expect(replies.count == 10_000)
            for index in 0..<5_000 {
                #expect(replies[2 * index] == .simpleString("OK"))
                #expect(replies[2 * index + 1] == .integer(Int64(index + 1)))
            }

            let reads = try await redis.pipeline((0..<5_000).map { ["GET", "key:\($0)"] })
            #expect(reads.map(\.string) == (0..<5_000).map { "value-\($0)" })
            #expect(redis.roundTrips - before == 2)
        }
    }

    @Test("A failing command yields an .error in place; the others succeed")
    func errorInPlace() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let before = redis.roundTrips
            let replies = try await redis.pipeline([
                ["SET", "name", "apn-worker"],
                ["INCR", "name"],
                ["INCR", "count"],
                ["LPUSH", "name", "x"],
                ["GET", "name"],
            ])
            #expect(redis.roundTrips - before == 1)
            #expect(replies.count == 5)
            #expect(replies[0] == .simpleString("OK"))
            #expect(replies[1] == .error("ERR value is not an integer or out of range"))
            #expect(replies[2] == .integer(1))
            #expect(replies[3].errorMessage?.hasPrefix("WRONGTYPE") == true)
            #expect(replies[4].string == "apn-worker")
            #expect(await redis.isConnected)
        }
    }

    @Test("An empty pipeline makes no round trip; an empty command is rejected locally")
    func emptyPipeline() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let before = redis.roundTrips
            #expect(try await redis.pipeline([[String]]()).isEmpty)
            #expect(redis.roundTrips == before)

            let error = try #require(await redisError { try await redis.pipeline([["PING"], []]) })
            #expect(error.code == .invalidCommand)
            #expect(redis.roundTrips == before)
            #expect(try await redis.send(["PING"]) == .simpleString("PONG"))
        }
    }
}
