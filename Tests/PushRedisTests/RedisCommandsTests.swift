import PushLocalStack
import PushTestSupport
import Testing

@testable import PushRedis

@Suite("RedisCommands: pipelines encoded in place", .timeLimit(.minutes(2)))
struct RedisCommandsTests {
    /// The same three commands, built argument by argument.
    static func built() -> RedisCommands {
        var commands = RedisCommands()
        commands.begin(.set, arguments: 4)
        commands.appendKey {
            $0 += "apn:n:".utf8
            $0 += "{ab}x".utf8
        }
        commands.append([0, 13, 10, 255, 36, 42])
        commands.append("EX")
        commands.append(Int64(86_400))
        commands.beginEvalsha(RedisScript("return #KEYS"), keyCount: 2, argumentCount: 1)
        commands.appendKey(Array("{t}a".utf8))
        commands.appendKey(Array("{t}b".utf8))
        commands.append(Int64(-12))
        commands.begin(words: ["PING"], arguments: 0)
        return commands
    }

    @Test("The bytes are RESP, the same whether built in place or from argument lists")
    func encoding() throws {
        let script = RedisScript("return #KEYS")
        let lists: [[[UInt8]]] = [
            [
                Array("SET".utf8), Array("apn:n:{ab}x".utf8), [0, 13, 10, 255, 36, 42], Array("EX".utf8),
                Array("86400".utf8),
            ],
            script.evalshaCommand(keys: [Array("{t}a".utf8), Array("{t}b".utf8)], args: [Array("-12".utf8)]),
            [Array("PING".utf8)],
        ]
        let built = Self.built()
        let fromLists = try RedisCommands(lists)
        #expect(built.bytes == fromLists.bytes)
        #expect(built.count == 3 && fromLists.count == 3)
        let expected =
            "*5\r\n$3\r\nSET\r\n$11\r\napn:n:{ab}x\r\n$6\r\n\u{0}\r\n\u{FF}$*\r\n$2\r\nEX\r\n$5\r\n86400\r\n"
            + "*6\r\n$7\r\nEVALSHA\r\n$40\r\n\(script.sha1)\r\n$1\r\n2\r\n$4\r\n{t}a\r\n$4\r\n{t}b\r\n$3\r\n-12\r\n"
            + "*1\r\n$4\r\nPING\r\n"
        // U+FF is two bytes in UTF-8: compare the bytes with 0xFF put in its place.
        var expectedBytes = Array(expected.utf8)
        let at = try #require(expectedBytes.firstIndex(of: 0xC3))
        expectedBytes.replaceSubrange(at...(at + 1), with: [0xFF])
        #expect(built.bytes == expectedBytes)
        #expect(throws: RedisError.self) { try RedisCommands([[]]) }
    }

    @Test("Numbers, as arguments and as length lines, are their decimal text, whatever their digits")
    func numbers() throws {
        let powers = (1...18).flatMap { n -> [Int64] in
            let power = (0..<n).reduce(Int64(1)) { value, _ in value * 10 }
            return [power - 1, power, power + 1, -power]
        }
        let values: [Int64] = [0, 7, -7, 12, -1, Int64.max, Int64.min, Int64.max - 1, Int64.min + 1] + powers
        for value in values {
            var inPlace = RedisCommands()
            inPlace.begin(argumentCount: 2)
            inPlace.append(Int64(value))
            inPlace.append(DecimalArgument(value))
            #expect(try inPlace.bytes == RedisCommands([[Array(String(value).utf8), Array(String(value).utf8)]]).bytes)
            var text: [UInt8] = []
            DecimalArgument(value).append(to: &text)
            #expect(String(decoding: text, as: UTF8.self) == String(value))
            #expect(DecimalArgument(value) == DecimalArgument(value))
        }
        #expect(DecimalArgument(10) != DecimalArgument(1))
        // Arguments of 1 to 120 bytes: each length line is its length.
        let arguments = (1...120).map { [UInt8](repeating: UInt8(ascii: "x"), count: $0) }
        var built = RedisCommands()
        built.begin(argumentCount: arguments.count)
        for argument in arguments { built.append { $0 += argument } }
        let expected =
            "*120\r\n" + arguments.map { "$\($0.count)\r\n\(String(decoding: $0, as: UTF8.self))\r\n" }.joined()
        #expect(built.bytes == Array(expected.utf8))
    }

    @Test("Each command knows its first key's slot and, for EVALSHA, its script")
    func routing() throws {
        for commands in [Self.built(), try RedisCommands(Self.lists())] {
            #expect(commands.slot(of: 0) == RedisClusterSlot.of("ab"))
            #expect(commands.slot(of: 1) == RedisClusterSlot.of("t"))
            #expect(commands.slot(of: 2) == nil)
            #expect(commands.script(of: 0) == nil)
            #expect(
                commands.script(of: 1).map { String(decoding: $0, as: UTF8.self) } == RedisScript("return #KEYS").sha1
            )

            // Copied commands keep their keys and scripts.
            var part = RedisCommands()
            part.asking()
            part.append(commands, at: [1, 0])
            #expect(part.count == 3)
            #expect(part.slot(of: 1) == RedisClusterSlot.of("t"))
            #expect(part.slot(of: 2) == RedisClusterSlot.of("ab"))
            #expect(part.script(of: 1) == commands.script(of: 1))
            #expect(part.bytes.count == 16 + commands.bytes.count - 14)  // ASKING in, PING out
        }
    }

    @Test("Each typed command is the argument list it names, its key marked for routing")
    func typedCommands() throws {
        let key = Array("apn:{k}x".utf8)
        let script = RedisScript("return redis.call('GET', KEYS[1])")
        var typed = RedisCommands()
        var lists: [[String]] = []
        typed.get(key)
        lists.append(["GET", "apn:{k}x"])
        typed.set(key, "v")
        lists.append(["SET", "apn:{k}x", "v"])
        typed.set(key, Int64(7), expiry: .seconds(60))
        lists.append(["SET", "apn:{k}x", "7", "EX", "60"])
        typed.set(key, "owner", expiry: .milliseconds(1_500), onlyIfAbsent: true)
        lists.append(["SET", "apn:{k}x", "owner", "PX", "1500", "NX"])
        typed.del(key, Array("apn:{k}y".utf8))
        lists.append(["DEL", "apn:{k}x", "apn:{k}y"])
        typed.exists(key)
        lists.append(["EXISTS", "apn:{k}x"])
        typed.expire(key, seconds: 30)
        lists.append(["EXPIRE", "apn:{k}x", "30"])
        typed.hget(key, field: "f")
        lists.append(["HGET", "apn:{k}x", "f"])
        typed.hset(key, field: "f", value: 3)
        lists.append(["HSET", "apn:{k}x", "f", "3"])
        typed.hdel(key, fields: ["f", "g"])
        lists.append(["HDEL", "apn:{k}x", "f", "g"])
        typed.hgetall(key)
        lists.append(["HGETALL", "apn:{k}x"])
        typed.hlen(key)
        lists.append(["HLEN", "apn:{k}x"])
        typed.evalsha(script, keys: [key], arguments: [Array("a".utf8)])
        lists.append(["EVALSHA", script.sha1, "1", "apn:{k}x", "a"])
        typed.scriptLoad(script.source)
        lists.append(["SCRIPT", "LOAD", script.source])
        typed.begin(.hsetnx, arguments: 3)
        typed.appendKey(key)
        typed.append("f")
        typed.append("v")
        lists.append(["HSETNX", "apn:{k}x", "f", "v"])
        let expected = try RedisCommands(lists.map { $0.map { Array($0.utf8) } })
        #expect(typed.bytes == expected.bytes)
        #expect(typed.count == lists.count)
        for index in 0..<typed.count {
            // Every command but SCRIPT LOAD has the key, and routes by its slot.
            let slot = lists[index][0] == "SCRIPT" ? nil : RedisClusterSlot.of("k")
            #expect(typed.slot(of: index) == slot, "\(lists[index][0])")
        }
        #expect(typed.script(of: 12).map { String(decoding: $0, as: UTF8.self) } == script.sha1)
        #expect(typed.isComplete)
    }

    static func lists() -> [[[UInt8]]] {
        [
            [
                Array("SET".utf8), Array("apn:n:{ab}x".utf8), [0, 13, 10, 255, 36, 42], Array("EX".utf8),
                Array("86400".utf8),
            ],
            RedisScript("return #KEYS").evalshaCommand(
                keys: [Array("{t}a".utf8), Array("{t}b".utf8)],
                args: [Array("-12".utf8)]
            ),
            [Array("PING".utf8)],
        ]
    }

    @Test("redis-server runs a built pipeline, on the hiredis socket and over TLS, NOSCRIPT included")
    func againstRedis() async throws {
        func check(_ redis: RedisConnection) async throws {
            let replies = try await redis.pipeline(Self.built(), scripts: [RedisScript("return #KEYS")])
            // The script was never loaded: NOSCRIPT, loaded, that EVALSHA sent again.
            #expect(replies == [.simpleString("OK"), .integer(2), .simpleString("PONG")])
            #expect(try await redis.send(["GET", "apn:n:{ab}x"]) == .bulk([0, 13, 10, 255, 36, 42]))
            let ttl = try await redis.send(["TTL", "apn:n:{ab}x"])
            #expect((ttl.int ?? 0) > 86_000)
        }
        try await withRedisServer { server in try await check(try await RedisConnection.connect(server.configuration()))
        }
        try await withTLSRedisServer { (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            try await check(try await RedisConnection.connect(server.tlsConfiguration(files)))
        }
    }
}
