/// Settings given on the command line of `apn-worker run`; they override the config file and
/// the environment. `nil` (or an empty list) means the flag was not given.
public struct ConfigurationOverrides: Sendable, Hashable {
    /// `--config PATH`: the config file (wins over `APN_WORKER_CONFIG`).
    public var configPath: String?
    /// `--worker-id`
    public var workerId: String?
    /// `--brokers`: Kafka bootstrap servers.
    public var brokers: String?
    /// `--group`: Kafka consumer group id.
    public var group: String?
    /// `--requests-topic`
    public var requestsTopic: String?
    /// `--results-topic`
    public var resultsTopic: String?
    /// `--kafka-property k=v`, repeatable; merged over the file's and the environment's.
    public var kafkaProperties: [String]
    /// `--redis URL`
    public var redisURL: String?
    /// `--redis-password`
    public var redisPassword: String?
    /// `--batch-size`
    public var batchSize: Int?
    /// `--max-in-flight`
    public var maxInFlight: Int?
    /// `--log-level`
    public var logLevel: String?
    /// `--log-format`
    public var logFormat: String?
    /// `--shutdown-timeout`, in seconds.
    public var shutdownTimeoutSeconds: Int?
    /// `--status-address HOST:PORT`, or `off`.
    public var statusAddress: String?

    /// No flags given.
    public init() {
        kafkaProperties = []
    }

    /// Sets any of the flags by name.
    public init(
        configPath: String? = nil,
        workerId: String? = nil,
        brokers: String? = nil,
        group: String? = nil,
        requestsTopic: String? = nil,
        resultsTopic: String? = nil,
        kafkaProperties: [String] = [],
        redisURL: String? = nil,
        redisPassword: String? = nil,
        batchSize: Int? = nil,
        maxInFlight: Int? = nil,
        logLevel: String? = nil,
        logFormat: String? = nil,
        shutdownTimeoutSeconds: Int? = nil,
        statusAddress: String? = nil
    ) {
        self.configPath = configPath
        self.workerId = workerId
        self.brokers = brokers
        self.group = group
        self.requestsTopic = requestsTopic
        self.resultsTopic = resultsTopic
        self.kafkaProperties = kafkaProperties
        self.redisURL = redisURL
        self.redisPassword = redisPassword
        self.batchSize = batchSize
        self.maxInFlight = maxInFlight
        self.logLevel = logLevel
        self.logFormat = logFormat
        self.shutdownTimeoutSeconds = shutdownTimeoutSeconds
        self.statusAddress = statusAddress
    }
}
