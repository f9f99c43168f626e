import APNSCore
import Foundation
import PushRedis

/// The `redis` section: one server or a Redis Cluster, its URLs, password, timeouts and TLS.
extension ConfigurationBuilder {
    /// The first (or only) Redis server, whether it is a Redis Cluster, and the cluster's
    /// further seed nodes.
    func buildRedis() throws(ConfigurationError) -> (
        WorkerConfiguration.Redis, Bool, [WorkerConfiguration.Redis]
    ) {
        let file = try root.section("redis")
        try file.checkKnown(
            ["url", "urls", "cluster", "password", "passwordFile", "connectTimeoutMs", "commandTimeoutMs", "tls"]
                + Self.redisTLSKeys
        )
        var urls: [(text: String, label: String)] = []
        if let urlValue = file.value("url") {
            if file.node("urls") != nil {
                throw ConfigurationError(
                    "\(urlValue.label) and \(file.label("urls")) are both set: give one server in redis.url, or the seed nodes of a "
                        + "Redis Cluster in redis.urls."
                )
            }
            urls = [(try SettingParsing.string(urlValue), urlValue.label)]
        } else if let node = file.node("urls") {
            let label = file.label("urls")
            guard case .list(let items) = node, !items.isEmpty else {
                throw ConfigurationError(
                    "\(label) must be a list of redis:// or rediss:// URLs, at least one, not \(node.shown)."
                )
            }
            for (index, item) in items.enumerated() {
                let text = try SettingParsing.string(SettingValue(label: "\(label)[\(index)]", node: item))
                urls.append((text, "\(label)[\(index)]"))
            }
        } else {
            throw required(.redisURL)
        }
        var cluster = urls.count > 1
        if let value = file.value("cluster") {
            cluster = try SettingParsing.boolean(value)
            if !cluster && urls.count > 1 {
                throw ConfigurationError(
                    "\(value.label) is false but \(file.label("urls")) names \(urls.count) servers; several URLs are the seed nodes "
                        + "of a Redis Cluster: set redis.cluster to true, or give one URL."
                )
            }
        }
        var parsed: [RedisURL] = []
        for url in urls {
            do {
                parsed.append(try RedisURL(parsing: url.text.trimmingCharacters(in: .whitespaces)))
            } catch {
                throw Self.redisURLError(error, label: url.label)
            }
        }
        let first = parsed[0]
        for (url, entry) in zip(urls, parsed).dropFirst() where entry.tls != first.tls {
            throw ConfigurationError(
                "\(url.label) and \(urls[0].label) differ in TLS (rediss:// against redis://); use one scheme for every seed."
            )
        }
        if cluster, let (url, entry) = zip(urls, parsed).first(where: { $0.1.database != 0 }) {
            throw ConfigurationError(
                "\(url.label) selects database \(entry.database), but a Redis Cluster has only database 0: remove /\(entry.database) from the URL."
            )
        }

        // An empty password in the URL (`redis://:@host`) is no password.
        var redis = WorkerConfiguration.Redis(
            host: first.host,
            port: first.port,
            username: first.username,
            password: first.password?.isEmpty == false ? first.password : nil,
            database: first.database,
            connectTimeout: .seconds(2),
            commandTimeout: .seconds(5)
        )
        if let password = try redisPassword(file) { redis.password = password }
        if let username = redis.username, redis.password == nil {
            throw ConfigurationError(
                "\(urls[0].label) names the user \(quoted(username)) but no password is set: add it to the "
                    + "URL or set \(ConfigurationSetting.redisPassword.names)."
            )
        }
        try file.read("connectTimeoutMs", .from(1, to: 600_000), .milliseconds(1), into: &redis.connectTimeout)
        try file.read("commandTimeoutMs", .from(1, to: 600_000), .milliseconds(1), into: &redis.commandTimeout)
        redis.tls = try buildRedisTLS(file, urlTLS: first.tls, urlLabel: urls[0].label)
        // Every seed is reached with the first one's credentials, timeouts and TLS settings.
        let moreSeeds = parsed.dropFirst().map { entry in
            var seed = redis
            seed.host = entry.host
            seed.port = entry.port
            return seed
        }
        return (redis, cluster, moreSeeds)
    }

    /// `redis.password` or the text of `redis.passwordFile`, from whichever source ranks higher
    /// (a flag over a variable over the file); `nil` when neither is set. One source giving
    /// both is refused.
    private func redisPassword(_ file: ConfigSection) throws(ConfigurationError) -> String? {
        let given = ["password", "passwordFile"].compactMap { key in file.value(key).map { (key, $0) } }
        let ranked = given.sorted { Self.sourceRank($0.1) > Self.sourceRank($1.1) }
        guard let (key, value) = ranked.first else { return nil }
        if ranked.count == 2, Self.sourceRank(ranked[1].1) == Self.sourceRank(value) {
            throw ConfigurationError(
                "\(ranked[0].1.label) and \(ranked[1].1.label) cannot both be set; give the Redis password one way only."
            )
        }
        if key == "passwordFile" { return try secretText(value, what: "the Redis password") }
        let password = try SettingParsing.string(value, allowEmpty: true)
        if password.isEmpty {
            throw ConfigurationError("\(value.label) must not be empty; leave it unset for no password.")
        }
        return password
    }

    /// Where a value was set, ranked as the sources override each other: 2 for a flag, 1 for
    /// an environment variable, 0 for the config file.
    private static func sourceRank(_ value: SettingValue) -> Int {
        if value.label.hasPrefix("--") { return 2 }
        return value.label.hasPrefix("APN_WORKER_") ? 1 : 0
    }

    /// The settings that only apply with TLS.
    private static let redisTLSKeys = ["caFile", "certFile", "keyFile", "serverName", "tlsVerify"]

    /// TLS is on with a `rediss://` URL or `redis.tls: true`; `redis.tls: false` with a
    /// `rediss://` URL, or a TLS setting without TLS, is a contradiction and refused.
    private func buildRedisTLS(
        _ file: ConfigSection,
        urlTLS: Bool,
        urlLabel: String
    ) throws(ConfigurationError) -> RedisTLS? {
        var on = urlTLS
        if let value = file.value("tls") {
            on = try SettingParsing.boolean(value)
            if urlTLS && !on {
                throw ConfigurationError(
                    "\(value.label) is false but \(urlLabel) is a rediss:// (TLS) URL; remove one of them."
                )
            }
        }
        guard on else {
            if let key = Self.redisTLSKeys.first(where: { file.value($0) != nil }) {
                throw ConfigurationError(
                    "\(file.value(key)!.label) only applies with TLS: use a rediss:// URL or set redis.tls to true."
                )
            }
            return nil
        }
        var tls = RedisTLS()
        if let value = file.value("caFile") { tls.caFile = try readableFile(value) }
        if let value = file.value("certFile") { tls.certFile = try readableFile(value) }
        if let value = file.value("keyFile") { tls.keyFile = try readableSecretFile(value) }
        if (tls.certFile == nil) != (tls.keyFile == nil) {
            throw ConfigurationError(
                "redis.certFile and redis.keyFile go together: set both for a client certificate, or neither."
            )
        }
        if let value = file.value("serverName") { tls.serverName = try SettingParsing.string(value) }
        try file.read("tlsVerify", into: &tls.verify)
        return tls
    }

    /// A sentence naming the setting for a URL that PushRedis's parser refused.
    private static func redisURLError(_ error: RedisURL.ParseError, label: String) -> ConfigurationError {
        let reason: String
        switch error.problem {
        case .missingScheme: reason = "the scheme is missing"
        case .unsupportedScheme: reason = "the scheme must be redis:// or rediss://"
        case .unixSocket: reason = "unix sockets are not supported"
        case .whitespace: reason = "it contains white space"
        case .queryOrFragment: reason = "query parameters and fragments are not supported"
        case .badPercentEncoding: reason = "the user name or password has bad percent-encoding"
        case .unclosedBracket: reason = "an IPv6 host has no closing ']'"
        case .textAfterBracket: reason = "there is text after the IPv6 host"
        case .unbracketedIPv6: reason = "an IPv6 host must be written in brackets"
        case .missingHost: reason = "the host is missing"
        case .invalidHostCharacter: reason = "the host has an invalid character"
        case .badPort: reason = "the port must be from 1 to 65535"
        case .badDatabase: reason = "the database must be a whole number of at least 0"
        }
        return ConfigurationError(
            "\(label) must be a Redis URL of the form \(RedisURL.form), not \(quoted(error.redactedURL)) (\(reason))."
        )
    }
}
