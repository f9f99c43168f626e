import PushRedis
import PushTestSupport
import Testing

@Suite("AUTH and SELECT", .timeLimit(.minutes(2)))
struct AuthTests {
    @Test("Right password works, wrong password is a clear .authentication error")
    func password() async throws {
        try await withRedisServer(["--requirepass", "s3cret"]) { server in
            let redis = try await RedisConnection.connect(server.configuration(password: "s3cret"))
            #expect(try await redis.send(["PING"]) == .simpleString("PONG"))

            let wrong = try #require(
                await redisError {
                    try await RedisConnection.connect(server.configuration(password: "wrong"))
                }
            )
            #expect(wrong.code == .authentication)
            #expect(
                wrong.message.hasPrefix("Redis at 127.0.0.1:\(server.port) rejected the credentials for user 'default'")
            )
            #expect(wrong.message.contains("Check the configured username and password"))
            #expect(!wrong.message.contains("wrong"))  // the password itself is never echoed
            #expect(wrong.detail?.hasPrefix("WRONGPASS") == true)

            // Without a password the connection opens, and commands are refused with NOAUTH.
            let anonymous = try await RedisConnection.connect(server.configuration())
            let noauth = try #require(await redisError { try await anonymous.send(["GET", "k"]) })
            #expect(noauth.code == .server("NOAUTH"))
        }
    }

    @Test("ACL user: AUTH username password")
    func aclUser() async throws {
        try await withRedisServer(["--requirepass", "s3cret"]) { server in
            let admin = try await RedisConnection.connect(server.configuration(password: "s3cret"))
            try await admin.send(["ACL", "SETUSER", "apn-worker", "on", ">w0rker", "~*", "&*", "+@all"])

            let worker = try await RedisConnection.connect(
                server.configuration(password: "w0rker", username: "apn-worker")
            )
            #expect(try await worker.send(["ACL", "WHOAMI"]).string == "apn-worker")

            let wrong = try #require(
                await redisError {
                    try await RedisConnection.connect(server.configuration(password: "nope", username: "apn-worker"))
                }
            )
            #expect(wrong.code == .authentication)
            #expect(wrong.message.contains("user 'apn-worker'"))
        }
    }

    @Test("Database selection isolates keys (also via URL)")
    func databaseSelection() async throws {
        try await withRedisServer(["--requirepass", "s3cret"]) { server in
            let db3 = try await RedisConnection.connect(server.configuration(password: "s3cret", database: 3))
            let db0 = try await RedisConnection.connect(server.configuration(password: "s3cret"))
            try await db3.send(["SET", "token", "three"])
            try await db0.send(["SET", "token", "zero"])
            #expect(try await db3.send(["GET", "token"]).string == "three")
            #expect(try await db0.send(["GET", "token"]).string == "zero")
            #expect(try await db0.send(["DBSIZE"]) == .integer(1))

            let viaURL = try await RedisConnection.connect(
                RedisConfiguration(url: "redis://:s3cret@127.0.0.1:\(server.port)/3")
            )
            #expect(try await viaURL.send(["GET", "token"]).string == "three")

            let outOfRange = try #require(
                await redisError {
                    try await RedisConnection.connect(server.configuration(password: "s3cret", database: 99))
                }
            )
            #expect(outOfRange.code == .server("ERR"))
            #expect(outOfRange.message.contains("SELECT 99"))
            #expect(outOfRange.message.contains("out of range"))
        }
    }
}
