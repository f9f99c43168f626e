import PushRedis
import PushTestSupport
import Testing

/// SET NX + EXPIRE: takes a lock for ARGV[1] for ARGV[2] seconds; 1 if taken, 0 if held.
let lockScript = RedisScript(
    """
    if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
      redis.call('EXPIRE', KEYS[1], ARGV[2])
      return 1
    end
    return 0
    """
)

@Suite("Lua scripts", .timeLimit(.minutes(2)))
struct ScriptTests {
    @Test("The locally computed SHA-1 matches SCRIPT LOAD")
    func shaMatchesScriptLoad() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            #expect(try await redis.scriptLoad(lockScript.source) == lockScript.sha1)
            let unicode = RedisScript("return 'grüße, 世界'")
            #expect(try await redis.scriptLoad(unicode.source) == unicode.sha1)
        }
    }

    @Test("Pipelined EVALSHA after SCRIPT FLUSH: NOSCRIPT triggers SCRIPT LOAD and one retry of those EVALSHAs")
    func pipelineAfterFlush() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            _ = try await redis.scriptLoad(lockScript.source)
            #expect(try await redis.send(["SCRIPT", "FLUSH"]) == .simpleString("OK"))
            #expect(try await redis.send(["SCRIPT", "EXISTS", lockScript.sha1]) == .array([.integer(0)]))

            let before = redis.roundTrips
            let replies = try await redis.pipeline(
                [
                    lockScript.evalshaCommand(keys: ["lock:device-1"], args: ["worker-a", "60"]),
                    lockScript.evalshaCommand(keys: ["lock:device-1"], args: ["worker-b", "60"]),
                    ["TTL", "lock:device-1"].map { Array($0.utf8) },
                    ["GET", "lock:device-1"].map { Array($0.utf8) },
                ],
                scripts: [lockScript]
            )
            #expect(redis.roundTrips - before == 2)  // the NOSCRIPT pass and the retry
            #expect(replies.count == 4)
            #expect(replies[0] == .integer(1))
            #expect(replies[1] == .integer(0))
            // TTL and GET ran once, in the first round trip, before the scripts did.
            #expect(replies[2] == .integer(-2))
            #expect(replies[3].isNull)
            #expect((1...60).contains(try await redis.send(["TTL", "lock:device-1"]).int ?? -1))
            #expect(try await redis.send(["GET", "lock:device-1"]).string == "worker-a")
            #expect(try await redis.send(["SCRIPT", "EXISTS", lockScript.sha1]) == .array([.integer(1)]))

            // Now loaded: one round trip, no retry.
            let beforeAgain = redis.roundTrips
            let again = try await redis.pipeline(
                [lockScript.evalshaCommand(keys: ["lock:device-2"], args: ["worker-c", "60"])],
                scripts: [lockScript]
            )
            #expect(again == [.integer(1)])
            #expect(redis.roundTrips - beforeAgain == 1)
        }
    }

    @Test(
        "After NOSCRIPT only the EVALSHAs that answered it are sent again: every other command of the pipeline runs once"
    )
    func noScriptResendsOnlyTheScripts() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let replies = try await redis.pipeline(
                [
                    ["INCR", "counter"].map { Array($0.utf8) },
                    lockScript.evalshaCommand(keys: ["lock:a"], args: ["worker-a", "60"]),
                    ["INCR", "counter"].map { Array($0.utf8) },
                    lockScript.evalshaCommand(keys: ["lock:b"], args: ["worker-a", "60"]),
                ],
                scripts: [lockScript]
            )
            #expect(replies == [.integer(1), .integer(1), .integer(2), .integer(1)])
            #expect(try await redis.send(["GET", "counter"]).string == "2")
            #expect(try await redis.send(["GET", "lock:b"]).string == "worker-a")
        }
    }

    @Test("Without scripts: the NOSCRIPT error stays in place")
    func noscriptWithoutScripts() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let before = redis.roundTrips
            let replies = try await redis.pipeline([
                lockScript.evalshaCommand(keys: ["k"], args: ["v", "5"]), ["PING"].map { Array($0.utf8) },
            ])
            #expect(redis.roundTrips - before == 1)
            #expect(replies[0].errorMessage?.hasPrefix("NOSCRIPT") == true)
            #expect(replies[1] == .simpleString("PONG"))
        }
    }

    @Test("A script that fails to load reports its compile error in place of NOSCRIPT")
    func brokenScriptInPipeline() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let broken = RedisScript("return +")
            let replies = try await redis.pipeline(
                [broken.evalshaCommand(), ["PING"].map { Array($0.utf8) }],
                scripts: [broken]
            )
            let message = try #require(replies[0].errorMessage)
            #expect(message.hasPrefix("ERR"))
            #expect(message.contains("compiling"))
            #expect(replies[1] == .simpleString("PONG"))
        }
    }

    @Test("evalsha loads the script on NOSCRIPT and runs it again, then EVALSHA hits the cache")
    func evalshaFallback() async throws {
        try await withRedisServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let before = redis.roundTrips
            #expect(try await redis.evalsha(lockScript, keys: ["lock:x"], args: ["a", "30"]) == .integer(1))
            #expect(redis.roundTrips - before == 2)
            #expect(try await redis.evalsha(lockScript, keys: ["lock:x"], args: ["b", "30"]) == .integer(0))
            #expect(redis.roundTrips - before == 3)

            let failing = RedisScript("return redis.error_reply('LOCKED device is busy')")
            let error = try #require(await redisError { try await redis.evalsha(failing) })
            #expect(error.code == .server("LOCKED"))
            #expect(error.detail == "LOCKED device is busy")
        }
    }
}
