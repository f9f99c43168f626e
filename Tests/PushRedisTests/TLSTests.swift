import APNSSimulator
import Foundation
import NIOCore
import PushLocalStack
import PushTestSupport
import Testing

@testable import PushRedis

/// Certificates made for one test, written to a temporary directory: a CA, a server
/// certificate for 127.0.0.1 and `localhost`, and a client certificate from the same CA.
struct TLSFiles {
    let directory: String
    var ca: String { directory + "/ca.pem" }
    var serverCertificate: String { directory + "/server.pem" }
    var serverKey: String { directory + "/server-key.pem" }
    var clientCertificate: String { directory + "/client.pem" }
    var clientKey: String { directory + "/client-key.pem" }

    /// With `dnsNameOnly`, the server certificate names only `redis.test` (no IP address).
    init(dnsNameOnly: Bool = false) throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("pushredis-tls-\(UUID().uuidString)").path
        let certificates =
            dnsNameOnly
            ? try TestCertificates(serverDNSNames: ["redis.test"], serverLoopbackIP: false) : try TestCertificates()
        try certificates.write(to: directory)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// redis-server's TLS arguments; `authClients` requires a client certificate.
    func serverArguments(authClients: Bool) -> [String] {
        [
            "--tls-cert-file", serverCertificate, "--tls-key-file", serverKey, "--tls-ca-cert-file", ca,
            "--tls-auth-clients", authClients ? "yes" : "no",
        ]
    }
}

/// Starts a TLS-only redis-server with fresh certificates, runs `body`, and stops the server.
func withTLSRedisServer<T>(
    authClients: Bool = false,
    dnsNameOnly: Bool = false,
    _ extraArguments: [String] = [],
    _ body: (RedisServerProcess, TLSFiles) async throws -> T
) async throws -> T {
    let files = try TLSFiles(dnsNameOnly: dnsNameOnly)
    defer { files.remove() }
    let server = try await RedisServerProcess.start(
        files.serverArguments(authClients: authClients) + extraArguments,
        tls: true
    )
    do {
        let result = try await body(server, files)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

extension RedisServerProcess {
    /// A TLS configuration for this server, trusting `files`' CA.
    func tlsConfiguration(
        _ files: TLSFiles,
        password: String? = nil,
        database: Int = 0,
        tls: RedisTLS? = nil,
        commandTimeout: Duration = .seconds(5)
    ) -> RedisConfiguration {
        var configuration = configuration(password: password, database: database, commandTimeout: commandTimeout)
        configuration.tls = tls ?? RedisTLS(caFile: files.ca)
        return configuration
    }
}

@Suite("TLS (rediss://) over SwiftNIO with hiredis' reply parser", .timeLimit(.minutes(2)))
struct TLSTests {
    @Test("Commands, pipelines and scripts over TLS, verified against the CA file")
    func commandsPipelinesScripts() async throws {
        try await withTLSRedisServer { (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            let redis = try await RedisConnection.connect(server.tlsConfiguration(files))
            #expect(try await redis.send(["PING"]) == .simpleString("PONG"))
            try await redis.send(["SET", "greeting", "hello"])
            #expect(try await redis.send(["GET", "greeting"]).string == "hello")
            #expect(try await redis.send(["GET", "missing"]) == .bulk(nil))
            let binary: [UInt8] = [0, 13, 10, 255, 36, 42]
            try await redis.send([Array("SET".utf8), Array("bin".utf8), binary])
            #expect(try await redis.send(["GET", "bin"]) == .bulk(binary))

            let wrongType = try #require(await redisError { try await redis.send(["INCR", "greeting"]) })
            #expect(wrongType.code == .server("ERR"))
            #expect(await redis.isConnected)

            let replies = try await redis.pipeline([
                ["INCR", "n"], ["INCR", "n"], ["LPUSH", "greeting", "x"], ["MGET", "n", "nope"],
            ])
            #expect(replies[0] == .integer(1))
            #expect(replies[1] == .integer(2))
            #expect(replies[2].errorMessage?.hasPrefix("WRONGTYPE") == true)
            #expect(replies[3] == .array([.bulk(Array("2".utf8)), .bulk(nil)]))

            // A large pipeline: replies span many TLS records and reads.
            let value = [UInt8](repeating: 0x61, count: 10_000)
            let many = try await redis.pipeline((0..<500).map { [Array("SET".utf8), Array("k\($0)".utf8), value] })
            #expect(many.allSatisfy { $0 == .simpleString("OK") })
            let back = try await redis.pipeline((0..<500).map { [Array("GET".utf8), Array("k\($0)".utf8)] })
            #expect(back.allSatisfy { $0 == .bulk(value) })

            #expect(try await redis.evalsha(lockScript, keys: ["lock"], args: ["me", "60"]) == .integer(1))
            #expect(try await redis.scriptLoad(lockScript.source) == lockScript.sha1)
            try await redis.send(["SCRIPT", "FLUSH"])
            let afterFlush = try await redis.pipeline(
                [
                    lockScript.evalshaCommand(keys: ["lock2"], args: ["me", "60"]),
                    [Array("INCR".utf8), Array("n".utf8)],
                ],
                scripts: [lockScript]
            )
            // NOSCRIPT → SCRIPT LOAD → that EVALSHA again; the INCR ran once.
            #expect(afterFlush == [.integer(1), .integer(3)])
        }
    }

    @Test("Concurrent callers share one TLS connection and each gets its own replies")
    func concurrentCallers() async throws {
        try await withTLSRedisServer { (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            let redis = try await RedisConnection.connect(server.tlsConfiguration(files))
            let before = redis.roundTrips
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<20 {
                    group.addTask {
                        for round in 0..<20 {
                            let key = "t\(task)"
                            let replies = try await redis.pipeline([["SET", key, "\(round)"], ["GET", key]])
                            #expect(replies == [.simpleString("OK"), .bulk(Array("\(round)".utf8))])
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(redis.roundTrips - before == 400)
        }
    }

    @Test("AUTH and SELECT over TLS; a wrong password is .authentication")
    func authentication() async throws {
        try await withTLSRedisServer(["--requirepass", "s3cret"]) {
            (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            let redis = try await RedisConnection.connect(
                server.tlsConfiguration(files, password: "s3cret", database: 3)
            )
            try await redis.send(["SET", "k", "v"])
            #expect(try await redis.send(["CLIENT", "INFO"]).string?.contains("db=3") == true)

            let wrong = try #require(
                await redisError { try await RedisConnection.connect(server.tlsConfiguration(files, password: "nope")) }
            )
            #expect(wrong.code == .authentication)
            #expect(wrong.message.contains("rejected the credentials for user 'default'"))

            let none = try #require(
                await redisError {
                    let unauthenticated = try await RedisConnection.connect(server.tlsConfiguration(files))
                    return try await unauthenticated.send(["GET", "k"])
                }
            )
            #expect(none.code == .server("NOAUTH"))
        }
    }

    @Test("A server certificate from another CA fails the connect with a sentence naming the CA file")
    func wrongCA() async throws {
        let other = try TLSFiles()
        defer { other.remove() }
        try await withTLSRedisServer { (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            let error = try #require(
                await redisError {
                    try await RedisConnection.connect(server.tlsConfiguration(files, tls: RedisTLS(caFile: other.ca)))
                }
            )
            #expect(error.code == .connection)
            #expect(
                error.message
                    == "cannot verify the TLS certificate of Redis at 127.0.0.1:\(server.port): it is not signed by a CA in "
                    + "the CA file '\(other.ca)'; set the CA file to the CA that issued the server's certificate"
            )

            // The system's trust roots do not know the test CA either.
            let system = try #require(
                await redisError {
                    try await RedisConnection.connect(server.tlsConfiguration(files, tls: RedisTLS()))
                }
            )
            #expect(system.message.contains("it is not signed by a CA in the system's trust roots"))

            // With verification off, the same server is accepted.
            let unverified = try await RedisConnection.connect(
                server.tlsConfiguration(files, tls: RedisTLS(caFile: other.ca, verify: false))
            )
            #expect(try await unverified.send(["PING"]) == .simpleString("PONG"))
        }
    }

    @Test("The certificate must carry the server name: a wrong name fails, the name it carries works")
    func serverName() async throws {
        try await withTLSRedisServer(dnsNameOnly: true) {
            (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            let error = try #require(
                await redisError {
                    try await RedisConnection.connect(
                        server.tlsConfiguration(files, tls: RedisTLS(caFile: files.ca, serverName: "other.test"))
                    )
                }
            )
            #expect(error.code == .connection)
            #expect(
                error.message
                    == "the TLS certificate of Redis at 127.0.0.1:\(server.port) is not valid for the name "
                    + "'other.test'; connect with the name the certificate carries, or set the TLS server name to it"
            )

            // The default name is the host, 127.0.0.1, which this certificate does not carry.
            let byAddress = try #require(
                await redisError { try await RedisConnection.connect(server.tlsConfiguration(files)) }
            )
            #expect(byAddress.message.contains("is not valid for the name '127.0.0.1'"), "\(byAddress.message)")

            let named = try await RedisConnection.connect(
                server.tlsConfiguration(files, tls: RedisTLS(caFile: files.ca, serverName: "redis.test"))
            )
            #expect(try await named.send(["PING"]) == .simpleString("PONG"))
        }
    }

    @Test("tls-auth-clients yes: the client certificate is accepted, and its absence fails with a sentence")
    func clientCertificate() async throws {
        try await withTLSRedisServer(authClients: true) {
            (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            let withCertificate = try await RedisConnection.connect(
                server.tlsConfiguration(
                    files,
                    tls: RedisTLS(caFile: files.ca, certFile: files.clientCertificate, keyFile: files.clientKey)
                )
            )
            #expect(try await withCertificate.send(["PING"]) == .simpleString("PONG"))

            let error = try #require(
                await redisError { try await RedisConnection.connect(server.tlsConfiguration(files)) }
            )
            #expect(error.code == .connection)
            #expect(
                error.message
                    == "Redis at 127.0.0.1:\(server.port) refused the TLS connection because it requires a client "
                    + "certificate; set the TLS certificate and key files"
            )

            // A client certificate from an unknown CA is refused.
            let other = try TLSFiles()
            defer { other.remove() }
            let foreign = try #require(
                await redisError {
                    try await RedisConnection.connect(
                        server.tlsConfiguration(
                            files,
                            tls: RedisTLS(caFile: files.ca, certFile: other.clientCertificate, keyFile: other.clientKey)
                        )
                    )
                }
            )
            #expect(foreign.code == .connection)
            #expect(foreign.message.contains("rejected the TLS client certificate"), "\(foreign.message)")
        }
    }

    @Test("Unreadable certificate files and a plain port are reported before or at connect")
    func misconfiguration() async throws {
        let files = try TLSFiles()
        defer { files.remove() }
        var missing = RedisConfiguration(port: 1, connectTimeout: .seconds(2))
        missing.tls = RedisTLS(caFile: files.directory + "/nope.pem")
        let unreadable = try #require(await redisError { try await RedisConnection.connect(missing) })
        #expect(unreadable.code == .invalidConfiguration)
        #expect(unreadable.message.hasPrefix("cannot use the TLS CA file '\(files.directory)/nope.pem'"))

        var halfClient = missing
        halfClient.tls = RedisTLS(certFile: files.clientCertificate)
        let half = try #require(await redisError { try await RedisConnection.connect(halfClient) })
        #expect(half.code == .invalidConfiguration)

        // redis-server's plain port reads the ClientHello as an unfinished command and waits.
        try await withRedisServer { plain in
            var configuration = plain.configuration()
            configuration.connectTimeout = .milliseconds(300)
            configuration.tls = RedisTLS(caFile: files.ca)
            let error = try #require(await redisError { try await RedisConnection.connect(configuration) })
            #expect(error.code == .timeout)
            #expect(
                error.message.hasSuffix(
                    "while completing the TLS handshake and the first command (is the port a TLS port?)"
                )
            )
        }

        var refused = RedisConfiguration(port: try RedisServerProcess.freePort(), connectTimeout: .seconds(2))
        refused.tls = RedisTLS(caFile: files.ca)
        let down = try #require(await redisError { try await RedisConnection.connect(refused) })
        #expect(down.code == .connection)
        #expect(down.message.hasSuffix("Connection refused"), "\(down.message)")
    }

    @Test("Server killed: .connection, the connection stays broken, reconnect works once it is back")
    func serverKilled() async throws {
        try await withTLSRedisServer(["--requirepass", "pw"]) {
            (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            let redis = try await RedisConnection.connect(server.tlsConfiguration(files, password: "pw", database: 2))
            try await redis.send(["SET", "before", "1"])
            await server.stop()

            let lost = try #require(await redisError { try await redis.send(["GET", "before"]) })
            #expect(lost.code == .connection)
            #expect(
                lost.message.hasPrefix("lost the connection to Redis at 127.0.0.1:\(server.port) while running GET")
            )
            #expect(!(await redis.isConnected))
            let broken = try #require(await redisError { try await redis.pipeline([["PING"]]) })
            #expect(broken.message.contains("unusable after an earlier error"))

            try await server.start()
            try await redis.reconnect()
            try await redis.send(["SET", "after", "2"])
            #expect(try await redis.send(["CLIENT", "INFO"]).string?.contains("db=2") == true)
        }
    }

    @Test("Command timeout over TLS: .timeout, the connection is dropped, reconnect works")
    func commandTimeout() async throws {
        try await withTLSRedisServer { (server: RedisServerProcess, files: TLSFiles) async throws -> Void in
            let redis = try await RedisConnection.connect(
                server.tlsConfiguration(files, commandTimeout: .milliseconds(200))
            )
            let error = try #require(await redisError { try await redis.send(["BLPOP", "nothing", "2"]) })
            #expect(error.code == .timeout)
            #expect(
                error.message.contains("did not answer within the command timeout of 0.2 seconds while running BLPOP")
            )
            #expect(!(await redis.isConnected))
            try await redis.reconnect()
            #expect(try await redis.send(["PING"]) == .simpleString("PONG"))
        }
    }
}

@Suite("hiredis' reply parser fed by the NIO transport")
struct HiredisReplyReaderTests {
    @Test("Replies fed one byte at a time come out whole and in order")
    func byteByByte() throws {
        let reader = try #require(HiredisReplyReader())
        let wire = Array("+OK\r\n-ERR bad\r\n:42\r\n$3\r\na\r\n\r\n$-1\r\n*2\r\n$1\r\nx\r\n*1\r\n:7\r\n".utf8)
        var replies: [RedisValue] = []
        for byte in wire {
            try [byte].withUnsafeBytes { try reader.feed($0) }
            while let reply = try reader.next() { replies.append(reply) }
        }
        #expect(
            replies == [
                .simpleString("OK"), .error("ERR bad"), .integer(42), .bulk(Array("a\r\n".utf8)), .bulk(nil),
                .array([.bulk(Array("x".utf8)), .array([.integer(7)])]),
            ]
        )
    }

    @Test("Bytes that are not RESP are a .protocol error")
    func garbage() throws {
        let reader = try #require(HiredisReplyReader())
        try Array("?what\r\n".utf8).withUnsafeBytes { try reader.feed($0) }
        #expect(throws: RedisError.self) { try reader.next() }
    }
}
