import PushRedis
import PushTestSupport
import Testing

@Suite("redis:// URLs", .timeLimit(.minutes(2)))
struct URLTests {
    @Test("Valid forms")
    func validForms() throws {
        let plain = try RedisConfiguration(url: "redis://127.0.0.1:6390")
        #expect(plain.host == "127.0.0.1")
        #expect(plain.port == 6390)
        #expect(plain.username == nil)
        #expect(plain.password == nil)
        #expect(plain.database == 0)

        let defaults = try RedisConfiguration(url: "redis://cache.internal")
        #expect(defaults.host == "cache.internal")
        #expect(defaults.port == 6379)

        let passwordOnly = try RedisConfiguration(url: "redis://:s3cret@cache.internal:6380/2")
        #expect(passwordOnly.username == nil)
        #expect(passwordOnly.password == "s3cret")
        #expect(passwordOnly.port == 6380)
        #expect(passwordOnly.database == 2)

        let acl = try RedisConfiguration(url: "redis://apn-worker:p%40ss%3Aw%2Frd@127.0.0.1:6379/15")
        #expect(acl.username == "apn-worker")
        #expect(acl.password == "p@ss:w/rd")
        #expect(acl.database == 15)

        let ipv6 = try RedisConfiguration(url: "redis://[::1]:7000/1")
        #expect(ipv6.host == "::1")
        #expect(ipv6.port == 7000)
        #expect(ipv6.endpoint == "[::1]:7000")

        let trailingSlash = try RedisConfiguration(url: "REDIS://localhost:1/")
        #expect(trailingSlash.host == "localhost")
        #expect(trailingSlash.port == 1)
        #expect(trailingSlash.database == 0)

        let timeouts = try RedisConfiguration(
            url: "redis://h",
            connectTimeout: .seconds(1),
            commandTimeout: .milliseconds(250)
        )
        #expect(timeouts.connectTimeout == .seconds(1))
        #expect(timeouts.commandTimeout == .milliseconds(250))
    }

    @Test(
        "Malformed URLs give a clear message",
        arguments: [
            ("127.0.0.1:6379", "missing scheme"),
            ("http://127.0.0.1:6379", "unsupported scheme 'http'"),
            ("unix:///tmp/redis.sock", "unix sockets are not supported"),
            ("redis://", "missing host"),
            ("redis://:6379", "missing host"),
            ("redis://host:", "port '' is not a number in 1...65535"),
            ("redis://host:port", "port 'port' is not a number in 1...65535"),
            ("redis://host:70000", "port '70000' is not a number in 1...65535"),
            ("redis://host:6379/abc", "database 'abc' is not a non-negative integer"),
            ("redis://host:6379/-1", "database '-1' is not a non-negative integer"),
            ("redis://host:6379/1/2", "database '1/2' is not a non-negative integer"),
            ("redis://user@host", "credentials must be written user:password@ or :password@"),
            ("redis://user:@host", "the password is empty"),
            ("redis://u:bad%zz@host", "bad percent-encoding"),
            ("redis://::1:6379", "an IPv6 host must be written in brackets"),
            ("redis://[::1:6379", "unclosed '['"),
            ("redis://host:6379?db=1", "query parameters and fragments are not supported"),
            ("redis://ho st:6379", "contains whitespace"),
        ]
    )
    func malformed(url: String, reason: String) {
        do {
            _ = try RedisConfiguration(url: url)
            Issue.record("'\(url)' was accepted")
        } catch {
            #expect(error.code == .invalidConfiguration)
            #expect(error.message.contains("malformed Redis URL"), "\(error.message)")
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }

    @Test("rediss:// turns on TLS with verification against the system's roots")
    func tls() throws {
        let configuration = try RedisConfiguration(url: "rediss://:pw@cache.internal:6380/2")
        #expect(configuration.tls == RedisTLS())
        #expect(configuration.tls?.verify == true)
        #expect(configuration.endpoint == "cache.internal:6380")
        #expect(configuration.database == 2)
        #expect(configuration.description == "rediss://:***@cache.internal:6380/2")
        #expect(try RedisURL(parsing: "REDISS://h").tls)
        #expect(try RedisConfiguration(url: "redis://h").tls == nil)
    }

    @Test("Passwords never appear in errors or descriptions")
    func passwordsRedacted() throws {
        do {
            _ = try RedisConfiguration(url: "redis://worker:topsecret@host:notaport")
            Issue.record("accepted")
        } catch {
            #expect(!error.message.contains("topsecret"))
            #expect(error.message.contains("redis://worker:***@host:notaport"))
        }
        let configuration = try RedisConfiguration(url: "redis://worker:topsecret@host:6380/4")
        #expect(configuration.description == "redis://worker:***@host:6380/4")
    }

    @Test("RedisURL reads credentials as written; RedisConfiguration(url:) then needs a password")
    func credentialsAsWritten() throws {
        let userOnly = try RedisURL(parsing: "redis://u@h")
        #expect(userOnly.username == "u")
        #expect(userOnly.password == nil)
        let emptyPassword = try RedisURL(parsing: "redis://u:@h:7/3")
        #expect(emptyPassword.password == "")
        #expect(emptyPassword.port == 7 && emptyPassword.database == 3)
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis://u@h") }
    }

    @Test(
        "RedisURL names the problem and masks the password",
        arguments: [
            ("redis://:pw@h:0", RedisURL.Problem.badPort("0"), "redis://:***@h:0"),
            ("http://h", .unsupportedScheme("http"), "http://h"),
            ("unix:///tmp/redis.sock", .unixSocket, "unix:///tmp/redis.sock"),
            ("redis://secret@h/x", .badDatabase("x"), "redis://:***@h/x"),
            ("redis://h%:1", .invalidHostCharacter("h%"), "redis://h%:1"),
        ]
    )
    func problems(url: String, problem: RedisURL.Problem, shown: String) {
        #expect(throws: RedisURL.ParseError(problem: problem, redactedURL: shown)) { try RedisURL(parsing: url) }
    }

    @Test("A password with /, ?, # or @ is read whole, up to the last @, and masked whole in errors")
    func passwordsWithURLCharacters() throws {
        let configuration = try RedisConfiguration(url: "redis://app:Zq9/Secret?x#y@z@redis.internal:6380/3")
        #expect(configuration.username == "app" && configuration.password == "Zq9/Secret?x#y@z")
        #expect(configuration.host == "redis.internal" && configuration.port == 6380 && configuration.database == 3)
        #expect(configuration.description == "redis://app:***@redis.internal:6380/3")
        for bad in [
            "redis://app:Zq9/Secret?x#y@redis.internal:notaport", "redis://app:Zq9/Secret@h:6379/0?db=1",
            "app:Zq9/Secret@redis.internal:6379", "ftp://app:Zq9/Secret@h",
        ] {
            do {
                _ = try RedisConfiguration(url: bad)
                Issue.record("\(bad) was accepted")
            } catch {
                #expect(!error.message.contains("Secret"), "\(error.message)")
                #expect(error.message.contains(":***@"), "\(error.message)")
            }
        }
    }
}
