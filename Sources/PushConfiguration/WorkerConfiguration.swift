import APNSCore
import Foundation
import PushRedis

/// The complete, validated settings of `apn-worker run`.
///
/// Values come from, lowest to highest precedence: built-in defaults, the config file (YAML or
/// JSON), `APN_WORKER_*` environment variables and command-line flags. Every value here has
/// already been checked against its allowed range, every referenced file exists and is
/// readable, and defaults are filled in. Build one with
/// ``load(overrides:environment:hostname:pid:)``.
public struct WorkerConfiguration: Sendable, Hashable {
    /// Worker-wide behaviour (`worker.*`).
    public var worker: Worker
    /// The Kafka cluster and topics (`kafka.*`).
    public var kafka: Kafka
    /// The Redis server holding claims, results and rate-limit state (`redis.*`); with
    /// ``redisCluster``, the first seed node of the Redis Cluster.
    public var redis: Redis
    /// Whether Redis is a Redis Cluster (`redis.cluster: true`, or several `redis.urls`).
    public var redisCluster: Bool = false
    /// Further seed nodes of the cluster after ``redis`` (the rest of `redis.urls`), each with
    /// ``redis``'s password, timeouts and TLS settings.
    public var redisMoreSeeds: [Redis] = []
    /// Default rate limits for apps that set none of their own (`limits.*`).
    public var limits: Limits
    /// The apps this worker sends for, keyed by the app name that jobs use (`apps.*`).
    public var apps: [String: App]
    /// The config file the settings were read from, or `nil` when none was given.
    public var configFile: String?
    /// Things that did not stop loading but deserve a log line, such as an `APN_WORKER_*`
    /// environment variable that is not a setting (most likely a misspelt one).
    public var warnings: [String]

    public init(
        worker: Worker,
        kafka: Kafka,
        redis: Redis,
        limits: Limits,
        apps: [String: App],
        configFile: String? = nil,
        warnings: [String] = []
    ) {
        self.worker = worker
        self.kafka = kafka
        self.redis = redis
        self.limits = limits
        self.apps = apps
        self.configFile = configFile
        self.warnings = warnings
    }
}

extension WorkerConfiguration {
    /// How the worker polls, batches, logs and shuts down.
    public struct Worker: Sendable, Hashable {
        /// Identifies this worker in claims and logs: 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
        /// Defaults to `<hostname>-<pid>`.
        public var id: String
        /// Most Kafka messages taken in one poll, 1...100000.
        public var batchSize: Int
        /// How long a batch may keep gathering messages after its first, 0...10000 ms
        /// (`batchWindowMs`; 0: take only what has already arrived).
        public var batchWindow: Duration
        /// Most notifications claimed but without a written result, 1...1000000.
        public var maxInFlight: Int
        /// The result writer flushes at least this often, 1...10000 ms (`resultFlushMs`).
        public var resultFlushInterval: Duration
        /// ...or as soon as this many results are pending, 1...100000.
        public var resultBatchSize: Int
        /// Upper bound on a graceful shutdown, 1...3600 s (`shutdownTimeoutSeconds`).
        public var shutdownTimeout: Duration
        /// Least severe level that is logged.
        public var logLevel: LogLevel
        /// How log lines are written.
        public var logFormat: LogFormat
        /// How long a job id is remembered to drop duplicates, 60...31536000 s (`dedupeTTLSeconds`).
        public var dedupeTTL: Duration
        /// Redis hashes per ``dedupeTTL`` that hold the notifications' claims and remember them,
        /// 1...4294967296 (`dedupeBuckets`): about 100 notifications a bucket per ``dedupeTTL``
        /// keep each hash small and compact in Redis, up to 400 with `hash-max-listpack-entries`
        /// raised to 512 (`docs/capacity.md`).
        public var dedupeBuckets: Int = Worker.defaultDedupeBuckets
        /// How long Apple's permanent verdict on a token is remembered at least (at most twice
        /// as long), 1...3650 days (`invalidTokenTTLDays`).
        public var invalidTokenTTL: Duration = Worker.defaultInvalidTokenTTL
        /// Where the status server listens (`/metrics`, `/health/live`, `/health/ready`,
        /// `/status`); `nil` turns it off. Port 0 picks a free port.
        public var statusAddress: HostPort?
        /// A message that workers stopped this many times while processing it (a crash, not a
        /// graceful stop) is answered with an `invalidJob` result and skipped, 2...100; 0 turns
        /// the guard off (`docs/operations.md`, "Messages that stop workers").
        public var maxStopsPerMessage: Int = Worker.defaultMaxStopsPerMessage
        /// Whether a file holding a secret (a private key, a `.p8` key, a PKCS#12 bundle, a
        /// password or passphrase file) that users other than its owner can read stops the
        /// worker from starting (`strictFilePermissions: true`), rather than being a warning.
        public var strictFilePermissions = false
        /// With ``Kafka/parkedTopic``: once this many notifications of one (app, environment)
        /// wait for a gateway that cannot be reached, they move aside to that topic,
        /// 1...1000000 (`moveAsideAfter`; `docs/delivery.md`, "Moving an app aside").
        public var moveAsideAfter: Int = Worker.defaultMoveAsideAfter

        /// ``dedupeTTL`` in whole seconds, as Redis takes it.
        public var dedupeTTLSeconds: Int { Int(dedupeTTL.components.seconds) }

        public static let defaultBatchSize = 500
        public static let defaultBatchWindow: Duration = .milliseconds(10)
        public static let defaultMaxInFlight = 20_000
        public static let defaultResultFlushInterval: Duration = .milliseconds(20)
        public static let defaultResultBatchSize = 2_000
        public static let defaultShutdownTimeout: Duration = .seconds(30)
        public static let defaultDedupeTTL: Duration = .seconds(86_400)
        public static let defaultDedupeBuckets = 65_536
        public static let defaultInvalidTokenTTL: Duration = .seconds(30 * 86_400)
        public static let defaultStatusAddress: HostPort? = HostPort(host: "0.0.0.0", port: 9400)
        public static let defaultMaxStopsPerMessage = 3
        public static let defaultMoveAsideAfter = 1_000

        public init(
            id: String,
            batchSize: Int = Worker.defaultBatchSize,
            batchWindow: Duration = Worker.defaultBatchWindow,
            maxInFlight: Int = Worker.defaultMaxInFlight,
            resultFlushInterval: Duration = Worker.defaultResultFlushInterval,
            resultBatchSize: Int = Worker.defaultResultBatchSize,
            shutdownTimeout: Duration = Worker.defaultShutdownTimeout,
            logLevel: LogLevel = .info,
            logFormat: LogFormat = .json,
            dedupeTTL: Duration = Worker.defaultDedupeTTL,
            statusAddress: HostPort? = Worker.defaultStatusAddress
        ) {
            self.id = id
            self.batchSize = batchSize
            self.batchWindow = batchWindow
            self.maxInFlight = maxInFlight
            self.resultFlushInterval = resultFlushInterval
            self.resultBatchSize = resultBatchSize
            self.shutdownTimeout = shutdownTimeout
            self.logLevel = logLevel
            self.logFormat = logFormat
            self.dedupeTTL = dedupeTTL
            self.statusAddress = statusAddress
        }

        /// The default worker id, `<hostname>-<pid>`: characters outside `A-Z a-z 0-9 . _ -`
        /// become `-` and the host name is shortened so that the id fits in 64 characters.
        public static func defaultId(hostname: String, pid: Int32) -> String {
            let suffix = "-\(pid)"
            var host = String(hostname.unicodeScalars.map { isIdCharacter($0) ? Character($0) : "-" })
            if host.isEmpty { host = "apn-worker" }
            return String(host.prefix(64 - suffix.count)) + suffix
        }

        /// Whether `id` is 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
        public static func isValidId(_ id: String) -> Bool {
            (1...64).contains(id.unicodeScalars.count) && id.unicodeScalars.allSatisfy(isIdCharacter)
        }

        static func isIdCharacter(_ scalar: Unicode.Scalar) -> Bool {
            switch scalar {
            case "A"..."Z", "a"..."z", "0"..."9", ".", "_", "-": true
            default: false
            }
        }
    }

    /// Log levels, least to most severe (the names swift-log uses).
    public enum LogLevel: String, Sendable, Hashable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical
    }

    /// Log line formats.
    public enum LogFormat: String, Sendable, Hashable, CaseIterable {
        /// One JSON object per line.
        case json
        /// Human-readable text.
        case text
    }

    /// Where jobs are read from and results written to.
    public struct Kafka: Sendable, Hashable {
        /// librdkafka `bootstrap.servers`: comma-separated `host:port` list.
        public var bootstrapServers: String
        /// Consumer group id.
        public var groupId: String
        /// The topics the jobs are read from, in priority order (`kafka.requestsTopics`, or the one
        /// topic of `kafka.requestsTopic`): a worker serves a topic's jobs ahead of those of the
        /// topics after it (`docs/configuration.md`, "Priority lanes").
        public var requestsTopics: [String]
        /// The highest priority lane when there are several (its jobs go first); `nil` with one topic.
        public var highestLane: String? { requestsTopics.count > 1 ? requestsTopics[0] : nil }
        /// The first of ``requestsTopics``; setting it makes it the only one.
        public var requestsTopic: String {
            get { requestsTopics[0] }
            set { requestsTopics = [newValue] }
        }
        /// Topic the results are written to.
        public var resultsTopic: String
        /// Where the notifications of an app whose gateway cannot be reached move aside, so that
        /// they neither hold memory nor stop the other apps' jobs, and whence they come back when
        /// it can (`kafka.parkedTopic`; `docs/delivery.md`, "Moving an app aside"). `nil`: they
        /// wait in memory, under `maxInFlight`.
        public var parkedTopic: String?
        /// The topics the worker reads: the lanes, then the parked topic.
        public var consumedTopics: [String] { requestsTopics + (parkedTopic.map { [$0] } ?? []) }
        /// Extra librdkafka properties, passed through as they are; each overrides the same
        /// property of ``clientDefaults``.
        public var properties: [String: String]
        /// Static membership (`group.instance.id`): a stable name per replica; `nil` for none.
        public var groupInstanceId: String?
        /// The librdkafka properties the worker sets unless ``properties`` does.
        public var clientDefaults = KafkaClientDefaults()

        public static let defaultGroupId = "apn-worker"
        public static let defaultRequestsTopic = "apn.requests"
        public static let defaultResultsTopic = "apn.results"

        public init(
            bootstrapServers: String,
            groupId: String = Kafka.defaultGroupId,
            requestsTopic: String = Kafka.defaultRequestsTopic,
            resultsTopic: String = Kafka.defaultResultsTopic,
            properties: [String: String] = [:]
        ) {
            self.bootstrapServers = bootstrapServers
            self.groupId = groupId
            self.requestsTopics = [requestsTopic]
            self.resultsTopic = resultsTopic
            self.properties = properties
        }
    }

    /// The Redis server, from `redis.url` (`redis://[[user]:password@]host[:port][/db]`) with
    /// `redis.password`, `redis.connectTimeoutMs` (2 s unless set) and `redis.commandTimeoutMs`
    /// (5 s unless set): the connection settings PushRedis takes.
    public typealias Redis = RedisConfiguration

    /// Where the worker finds Redis: ``redis`` then ``redisMoreSeeds``.
    public var redisSeeds: [Redis] { [redis] + redisMoreSeeds }

    /// Default rate limits; 0 means unlimited.
    public struct Limits: Sendable, Hashable {
        /// Notifications per second for one app; over it, sending is throttled.
        public var appPerSecond: Int
        /// Notifications per hour for one device; over it, notifications are rejected.
        public var devicePerHour: Int

        public init(appPerSecond: Int = 0, devicePerHour: Int = 0) {
            self.appPerSecond = appPerSecond
            self.devicePerHour = devicePerHour
        }
    }

    /// Which wire protocol an app's connections use.
    public enum Transport: String, Sendable, Hashable, CaseIterable {
        /// The legacy binary interface (gateway port 2195).
        case binary
        /// The HTTP/2 API.
        case http2
    }

    /// A host name (or IP address, IPv6 without brackets) and a TCP port.
    public struct HostPort: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// `host:port`, with an IPv6 host in brackets.
        public var description: String {
            host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        }
    }

    /// One app: its bundle id, connection pool, cache, limits and environments.
    public struct App: Sendable, Hashable {
        /// The name jobs use for the app (its key under `apps`).
        public var name: String
        /// The bundle id (APNs topic); defaults to ``name``.
        public var bundleId: String
        /// The environment used for jobs that do not name one.
        public var defaultEnvironment: APNSEnvironment
        /// Wire protocol.
        public var transport: Transport
        /// Connections per environment, 1...64.
        public var poolSize: Int
        /// Most sent notifications kept for resending, at least 1.
        public var cacheMaxCount: Int
        /// Most bytes of sent notifications kept for resending, at least 4096.
        public var cacheMaxBytes: Int
        /// How long a connection must stay quiet before its sends count as delivered,
        /// 1...60000 ms (`confirmationWindowMs`).
        public var confirmationWindow: Duration
        /// Whether notifications whose fate is unknown after a connection loss are sent again.
        public var resendOnUnknown: Bool
        /// Failed connects in a row after which queued notifications fail with 515
        /// `connectionFailed`; 0 (the default): they wait for the gateway however long it takes.
        public var connectRetryLimit = 0
        /// Notifications per second for this app (0 = unlimited), resolved against
        /// ``Limits/appPerSecond``.
        public var appPerSecond: Int
        /// Notifications per hour for one device of this app (0 = unlimited), resolved against
        /// ``Limits/devicePerHour``.
        public var devicePerHour: Int
        /// HTTP/2: priority-10 updates per hour for one Live Activity whose jobs say
        /// `"priority": "auto"`; past it they go at priority 5 (0: no budget, always 10).
        public var liveActivityHighPriorityPerHour = 0
        /// Time between feedback-service polls (`feedbackIntervalSeconds`); zero turns polling off.
        public var feedbackInterval: Duration
        /// HTTP/2 only: the `apns-topic` of MDM notifications, the topic of the MDM push
        /// certificate (`com.apple.mgmt.External.<UUID>`); `nil`: MDM jobs for the app are invalid.
        public var mdmTopic: String?
        /// The expiry of jobs that give none (`defaultExpiry`): ``APNSExpiry/immediately`` (0: do
        /// not store, the default) or ``APNSExpiry/after(_:)``, counted from when a notification
        /// is sent.
        public var defaultExpiry = APNSExpiry.immediately
        /// The `staleAfter` of jobs that give none: a notification consumed or about to be sent
        /// later than this after its job was produced is reported `expired` (521) and not sent.
        /// `nil` (the default): jobs without one are sent however late.
        public var staleAfter: Duration? = nil
        /// How the app's connections are opened, kept and retried.
        public var connection = Connection()
        /// The configured environments: at least one.
        public var environments: [APNSEnvironment: AppEnvironment]
        /// `http2` with token authentication: the bundle IDs a job may name in `topic`, served by
        /// the app's one pool and provider token. The ``bundleId`` is always allowed; `topics`
        /// defaults to it alone.
        public var topics: [String] = []
        /// Every job of the app is a dry run: parsed, claimed and rate-counted, never written to
        /// Apple, answered with `dryRun` results.
        public var dryRun = false
        /// `environmentFallback`: a notification refused with `BadDeviceToken` (binary status 8)
        /// in one environment is sent once in the other, and the environment that delivered it
        /// is remembered for the token. Only for an app that configures both environments.
        public var environmentFallback = false

        /// Whether a job may name `topic`: the bundle ID or one of ``topics``.
        public func allowsTopic(_ topic: String) -> Bool { topic == bundleId || topics.contains(topic) }

        public static let defaultPoolSize = 4
        public static let defaultCacheMaxCount = 50_000
        public static let defaultCacheMaxBytes = 33_554_432
        public static let defaultConfirmationWindow: Duration = .seconds(1)
        public static let defaultFeedbackInterval: Duration = .seconds(300)

        public init(
            name: String,
            bundleId: String,
            defaultEnvironment: APNSEnvironment,
            transport: Transport = .binary,
            poolSize: Int = App.defaultPoolSize,
            cacheMaxCount: Int = App.defaultCacheMaxCount,
            cacheMaxBytes: Int = App.defaultCacheMaxBytes,
            confirmationWindow: Duration = App.defaultConfirmationWindow,
            resendOnUnknown: Bool = true,
            appPerSecond: Int = 0,
            devicePerHour: Int = 0,
            feedbackInterval: Duration = App.defaultFeedbackInterval,
            environments: [APNSEnvironment: AppEnvironment]
        ) {
            self.name = name
            self.bundleId = bundleId
            self.defaultEnvironment = defaultEnvironment
            self.transport = transport
            self.poolSize = poolSize
            self.cacheMaxCount = cacheMaxCount
            self.cacheMaxBytes = cacheMaxBytes
            self.confirmationWindow = confirmationWindow
            self.resendOnUnknown = resendOnUnknown
            self.appPerSecond = appPerSecond
            self.devicePerHour = devicePerHour
            self.feedbackInterval = feedbackInterval
            self.environments = environments
            if transport == .http2 { connection.idleTimeout = Connection.defaultHTTP2IdleTimeout }
        }

        /// The settings of the environment used for jobs that name none.
        public var defaultEnvironmentSettings: AppEnvironment? { environments[defaultEnvironment] }

        /// An app's connection settings; the defaults are the delivery clients' own.
        public struct Connection: Sendable, Hashable {
            /// Connections per environment opened when the worker starts and kept open while
            /// idle, 0...``App/poolSize``.
            public var minConnections = 0
            /// TCP connect plus TLS handshake (`connectTimeoutMs`).
            public var connectTimeout: Duration = .seconds(10)
            /// Binary only: a connection whose written frames do not leave within this long is
            /// closed (`writeTimeoutMs`).
            public var writeTimeout: Duration = .seconds(30)
            /// A connection with nothing to do for this long is closed (`idleTimeoutMs`); `nil`
            /// keeps it open. Default: `nil` for binary apps, 300 s for HTTP/2 apps.
            public var idleTimeout: Duration?
            /// First delay before reconnecting after a failed connect, doubled per failure
            /// (`reconnectBaseDelayMs`)...
            public var reconnectBaseDelay: Duration = .milliseconds(100)
            /// ...up to this (`reconnectMaxDelayMs`).
            public var reconnectMaxDelay: Duration = .seconds(5)
            /// HTTP/2 only: retries of a notification answered 429 or 5xx, for jobs without
            /// `retryLimit`.
            public var retryLimit = 3
            /// HTTP/2 only: first delay before such a retry, doubled per retry (`retryBaseDelayMs`)...
            public var retryBaseDelay: Duration = .seconds(1)
            /// ...up to this (`retryMaxDelayMs`).
            public var retryMaxDelay: Duration = .seconds(60)

            public static let defaultHTTP2IdleTimeout: Duration = .seconds(300)

            public init() {}
        }
    }

    /// Where an app's client certificate and key come from: each document a file, text given
    /// in the config file, or the value of an environment variable (a ``CredentialSource`` whose
    /// data is never printed, only its label).
    public enum Credentials: Sendable, Hashable {
        /// A PEM certificate (chain) and a PEM private key.
        case pem(certificate: CredentialSource, key: CredentialSource)
        /// A PKCS#12 bundle holding both.
        case pkcs12(CredentialSource)
        /// HTTP/2 only: a provider-token signing key (`.p8`), its 10-character key ID and the
        /// 10-character team ID (§4).
        case token(signingKey: CredentialSource, keyId: String, teamId: String)
    }

    /// How one app connects to one of Apple's environments.
    ///
    /// File paths are absolute: a relative path in the config file is taken relative to the
    /// directory of the config file. Each file existed and was readable when loaded, and each
    /// environment variable named was set; the contents are not checked here.
    ///
    /// Printed or dumped, it shows where its credentials came from and whether a passphrase is
    /// set, never the credentials or the passphrase.
    public struct AppEnvironment: Sendable, Hashable, CustomReflectable {
        /// Which environment this is.
        public var name: APNSEnvironment
        /// The client certificate and key.
        public var credentials: Credentials
        /// The passphrase of the key or PKCS#12 file: `passphrase`, the contents of
        /// `passphraseFile` without trailing line breaks, or the value of `passphraseEnv`.
        public var passphrase: String?
        /// A PEM CA bundle that signs the gateway's certificate; `nil` uses the system's roots.
        public var ca: String?
        /// Whether the gateway's certificate is verified.
        public var verifyServer: Bool
        /// The push gateway.
        public var gateway: HostPort
        /// The feedback service.
        public var feedback: HostPort
        /// Apple's broadcast channel management API (`channelManagement`, §7.1).
        public var channelManagement: HostPort
        /// HTTP/2: where broadcasts go (`broadcastGateway`, §7.3) when not to ``gateway``;
        /// `nil`: to ``gateway``, as Apple's broadcast page says in its text. With one set,
        /// the environment's broadcasts have a pool of their own.
        public var broadcastGateway: HostPort?
        /// The proxy the connections to Apple go through; `nil`: directly.
        public var proxy: ProxyRoute?

        public init(
            name: APNSEnvironment,
            credentials: Credentials,
            passphrase: String? = nil,
            ca: String? = nil,
            verifyServer: Bool = true,
            gateway: HostPort? = nil,
            feedback: HostPort? = nil,
            channelManagement: HostPort? = nil
        ) {
            self.name = name
            self.credentials = credentials
            self.passphrase = passphrase
            self.ca = ca
            self.verifyServer = verifyServer
            self.gateway = gateway ?? name.defaultGateway
            self.feedback = feedback ?? name.defaultFeedback
            self.channelManagement = channelManagement ?? name.defaultChannelManagement
        }

        public var customMirror: Mirror {
            Mirror(
                self,
                children: [
                    "name": name, "credentials": credentials,
                    "passphrase": passphrase == nil ? "none" : "(set, not shown)",
                    "ca": ca as Any, "verifyServer": verifyServer, "gateway": gateway, "feedback": feedback,
                    "channelManagement": channelManagement,
                    "broadcastGateway": broadcastGateway.map { "\($0)" } ?? "gateway",
                    "proxy": proxy.map { "\($0)" } ?? "none",
                ],
                displayStyle: .struct
            )
        }

        /// The PEM certificate file, when ``credentials`` is `.pem` from a file.
        public var certificate: String? {
            if case .pem(.file(let certificate), _) = credentials { return certificate }
            return nil
        }

        /// The PEM private key file, when ``credentials`` is `.pem` from a file.
        public var key: String? {
            if case .pem(_, .file(let key)) = credentials { return key }
            return nil
        }

        /// The PKCS#12 file, when ``credentials`` is `.pkcs12` from a file.
        public var pfx: String? {
            if case .pkcs12(.file(let path)) = credentials { return path }
            return nil
        }
    }
}

extension APNSEnvironment {
    /// Apple's binary-interface gateway for this environment.
    public var defaultGateway: WorkerConfiguration.HostPort {
        switch self {
        case .production: .init(host: "gateway.push.apple.com", port: 2195)
        case .sandbox: .init(host: "gateway.sandbox.push.apple.com", port: 2195)
        }
    }

    /// Apple's broadcast channel management API (§7.1).
    public var defaultChannelManagement: WorkerConfiguration.HostPort {
        switch self {
        case .production: .init(host: "api-manage-broadcast.push.apple.com", port: 2196)
        case .sandbox: .init(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)
        }
    }

    /// The HTTP/2 provider API (§3.1).
    public var defaultHTTP2Gateway: WorkerConfiguration.HostPort {
        switch self {
        case .production: .init(host: "api.push.apple.com", port: 443)
        case .sandbox: .init(host: "api.sandbox.push.apple.com", port: 443)
        }
    }

    /// Apple's feedback service for this environment.
    public var defaultFeedback: WorkerConfiguration.HostPort {
        switch self {
        case .production: .init(host: "feedback.push.apple.com", port: 2196)
        case .sandbox: .init(host: "feedback.sandbox.push.apple.com", port: 2196)
        }
    }
}
