/// Where and how to connect to Redis.
///
/// Connecting opens a TCP connection within `connectTimeout`, applies `commandTimeout` to
/// every later socket read and write, then sends `AUTH` (when `password` is set; with
/// `username` it is the ACL form `AUTH username password`) and `SELECT database` (when it
/// is not 0). ``RedisConnection/reconnect()`` repeats all of that.
public struct RedisConfiguration: Sendable, Hashable, CustomStringConvertible {
    /// Host name or IP address (IPv6 without brackets).
    public var host: String
    /// TCP port, 1...65535.
    public var port: Int
    /// ACL user name; requires `password`. `nil` authenticates as the default user.
    public var username: String?
    /// Password sent with `AUTH`; `nil` sends no `AUTH`.
    public var password: String?
    /// Database index sent with `SELECT` (0 sends nothing).
    public var database: Int
    /// How long opening the TCP connection may take.
    public var connectTimeout: Duration
    /// How long any single socket read or write may block. A command that waits on the
    /// server (`BLPOP key 10`) needs a longer command timeout than its own timeout.
    public var commandTimeout: Duration
    /// TLS settings; `nil` connects without TLS.
    public var tls: RedisTLS?

    /// Creates a configuration; the defaults match a local Redis without a password.
    public init(
        host: String = "127.0.0.1",
        port: Int = 6379,
        username: String? = nil,
        password: String? = nil,
        database: Int = 0,
        connectTimeout: Duration = .seconds(5),
        commandTimeout: Duration = .seconds(5),
        tls: RedisTLS? = nil
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.tls = tls
    }

    /// Parses `redis://[[user]:password@]host[:port][/db]` or the same with `rediss://`.
    ///
    /// The port defaults to 6379 and the database to 0; user and password may be
    /// percent-encoded; an IPv6 host is written in brackets (`redis://[::1]:6379`).
    /// `rediss://` sets ``tls`` to ``RedisTLS`` defaults (system trust roots, the host as
    /// server name, verification on). Errors have code
    /// ``RedisError/Code/invalidConfiguration`` and never repeat the password.
    public init(
        url: String,
        connectTimeout: Duration = .seconds(5),
        commandTimeout: Duration = .seconds(5)
    ) throws(RedisError) {
        let parsed: RedisURL
        do {
            parsed = try RedisURL(parsing: url)
        } catch {
            throw error.redisError
        }
        // Without a separate password setting, a URL that names a user must carry its password.
        let shown = RedisURL.redacted(url)
        if parsed.username != nil && parsed.password == nil {
            throw RedisURL.ParseError.malformed(shown, "credentials must be written user:password@ or :password@")
        }
        if parsed.password?.isEmpty == true {
            throw RedisURL.ParseError.malformed(shown, "the password is empty")
        }
        self.init(
            host: parsed.host,
            port: parsed.port,
            username: parsed.username,
            password: parsed.password,
            database: parsed.database,
            connectTimeout: connectTimeout,
            commandTimeout: commandTimeout,
            tls: parsed.tls ? RedisTLS() : nil
        )
    }

    /// `host:port`, with IPv6 hosts in brackets, as used in error messages.
    public var endpoint: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// A URL-like summary with the password masked, safe to log.
    public var description: String {
        var credentials = ""
        if password != nil { credentials = "\(username ?? ""):***@" }
        return "\(tls == nil ? "redis" : "rediss")://\(credentials)\(endpoint)/\(database)"
    }

    /// Checks the values before any connection attempt.
    func validate() throws(RedisError) {
        func invalid(_ text: String) -> RedisError {
            RedisError(.invalidConfiguration, "invalid Redis configuration: \(text)")
        }
        if host.isEmpty { throw invalid("host is empty") }
        if host.utf8.contains(0) { throw invalid("host contains a NUL byte") }
        if !(1...65535).contains(port) { throw invalid("port \(port) is not in 1...65535") }
        if database < 0 { throw invalid("database \(database) is negative") }
        if username != nil && password == nil {
            throw invalid("username '\(username!)' is set but password is not (ACL AUTH needs both)")
        }
        if connectTimeout <= .zero { throw invalid("connect timeout \(connectTimeout) must be positive") }
        if commandTimeout <= .zero { throw invalid("command timeout \(commandTimeout) must be positive") }
        if let tls, (tls.certFile == nil) != (tls.keyFile == nil) {
            throw invalid("a TLS client certificate needs both a certificate file and a key file")
        }
        if let name = tls?.serverName, name.isEmpty || name.utf8.contains(0) {
            throw invalid("the TLS server name is empty or contains a NUL byte")
        }
    }
}

extension RedisConfiguration {
    /// Checks the replies to a connection's handshake — `AUTH` when a password is set, then
    /// `SELECT` when the database is not 0, in that order — and throws the refusal, if any:
    /// `.authentication` for rejected credentials, `.server` for a refused `SELECT`.
    func checkHandshake(_ replies: [RedisValue], target: String) throws(RedisError) {
        var next = 0
        if password != nil {
            if case .error(let line) = replies[next] {
                throw RedisError(
                    .authentication,
                    "\(target) rejected the credentials for user '\(username ?? "default")': \(line). "
                        + "Check the configured username and password.",
                    detail: line
                )
            }
            next += 1
        }
        if database != 0, case .error(let line) = replies[next] {
            throw RedisError.server(line, command: "SELECT \(database) on \(target)")
        }
    }
}
