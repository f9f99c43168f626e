import APNSBinary
import APNSCore
import APNSHTTP2
import PushKafka
import PushRedis

/// Everything a ``Worker`` runs with, resolved and checked (credentials loaded).
/// PushConfiguration's `WorkerConfiguration.makeOptions()` builds it from the `run` configuration.
public struct WorkerOptions: Sendable {
    /// The worker's name in results and logs.
    public var workerId: String
    /// librdkafka properties shared by the consumer and the producer (bootstrap servers and
    /// any passthrough); the worker adds `group.id` and its own defaults.
    public var kafka: KafkaConfiguration
    public var groupId: String
    /// Static group membership (`group.instance.id`): a stable name per replica, so that a
    /// restarted worker takes its partitions back without a rebalance. `nil`: dynamic member.
    public var groupInstanceId: String?
    public var requestsTopic: String
    public var resultsTopic: String
    public var redis: RedisConfiguration
    /// Prefix of every Redis key.
    public var redisKeyPrefix = "apn:"
    public var apps: [String: AppOptions]

    /// Most messages taken from Kafka in one batch.
    public var batchSize = 500
    /// How long a batch may gather messages before it is processed.
    public var batchWindow: Duration = .milliseconds(10)
    /// Most notifications between consumption and a written result (backpressure).
    public var maxInFlight = 20_000
    /// Results are written at least this often...
    public var resultFlushInterval: Duration = .milliseconds(20)
    /// ...or as soon as this many are waiting.
    public var resultBatchSize = 2_000
    /// How long notification state is kept for dedupe.
    public var dedupeTTLSeconds = 86_400
    /// A worker incarnation whose liveness key is older than this counts as dead and its claims
    /// are taken over.
    public var livenessTTL: Duration = .seconds(5)
    /// How long a revoked partition's in-flight notifications may take to finish before the
    /// partition is handed back anyway.
    public var revokeTimeout: Duration = .seconds(20)
    /// How long a worker stopped before its first assignment waits for its join to finish, so
    /// that it can leave the group cleanly.
    public var joinWaitOnStop: Duration = .seconds(15)
    /// How long the commit of revoked partitions is retried while the coordinator is busy.
    public var revokeCommitTimeout: Duration = .seconds(1)
    /// Bound for a graceful shutdown.
    public var shutdownTimeout: Duration = .seconds(30)

    public init(
        workerId: String, kafka: KafkaConfiguration, groupId: String, requestsTopic: String = "apn.requests",
        resultsTopic: String = "apn.results", redis: RedisConfiguration, apps: [String: AppOptions]
    ) {
        self.workerId = workerId
        self.kafka = kafka
        self.groupId = groupId
        self.requestsTopic = requestsTopic
        self.resultsTopic = resultsTopic
        self.redis = redis
        self.apps = apps
    }
}

/// One configured app.
public struct AppOptions: Sendable {
    /// The environment used when a job has no `env`.
    public var defaultEnvironment: APNSEnvironment
    /// Sends per second over all workers; 0 means unlimited. Over it, sending waits.
    public var appPerSecond = 0
    /// Notifications per device per hour; 0 means unlimited. Over it, a notification fails with
    /// `rateLimited`.
    public var devicePerHour = 0
    public var environments: [APNSEnvironment: EnvironmentOptions]

    public init(defaultEnvironment: APNSEnvironment, environments: [APNSEnvironment: EnvironmentOptions]) {
        self.defaultEnvironment = defaultEnvironment
        self.environments = environments
    }
}

/// Which API a pool speaks, with its settings.
public enum DeliveryTransport: Sendable {
    /// The legacy binary protocol (§1).
    case binary(APNSBinaryConfiguration)
    /// The HTTP/2 provider API (§3).
    case http2(APNSHTTP2Configuration)

    /// `host:port` of the gateway, for logs.
    public var endpoint: String {
        switch self {
        case .binary(let c): "\(c.host):\(c.port)"
        case .http2(let c): "\(c.host):\(c.port)"
        }
    }

    public var name: String {
        switch self {
        case .binary: "binary"
        case .http2: "http2"
        }
    }
}

/// How to reach Apple for one app in one environment.
public struct EnvironmentOptions: Sendable {
    /// The pool of gateway connections (created on first use).
    public var transport: DeliveryTransport
    /// The feedback service; `nil` disables polling.
    public var feedback: APNSFeedbackClient.Configuration?
    /// How often one of the workers reads the feedback service.
    public var feedbackInterval: Duration = .seconds(300)

    public init(transport: DeliveryTransport, feedback: APNSFeedbackClient.Configuration? = nil) {
        self.transport = transport
        self.feedback = feedback
    }
}
