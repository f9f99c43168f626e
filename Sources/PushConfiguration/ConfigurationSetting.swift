/// The settings of `apn-worker run` that environment variables, and most also flags, can set:
/// one declaration each gives the setting's section and key in the config file, its variable,
/// its flag, the flag's help text and the kind of value the flag takes.
///
/// The config file is read with these laid over it (flag over variable over file), the
/// command line's flags are named and explained from here, and so are the messages that name
/// a setting's sources.
public enum ConfigurationSetting: CaseIterable, Sendable {
    case workerId
    case batchSize
    case maxInFlight
    case shutdownTimeoutSeconds
    case logLevel
    case logFormat
    case dedupeTTLSeconds
    case statusAddress
    case kafkaBootstrapServers
    case kafkaGroupId
    case kafkaGroupInstanceId
    case kafkaRequestsTopic
    case kafkaResultsTopic
    case redisURL
    case redisPassword
    case redisPasswordFile
    case limitsAppPerSecond
    case limitsDevicePerHour

    /// What a flag takes: any text, or a whole number.
    public enum Kind: Sendable, Hashable {
        case text
        case integer
    }

    /// Where one setting is written and what its flag takes.
    public struct Declaration: Sendable, Hashable {
        /// The section of the config file (`worker`, `kafka`, `redis`, `limits`).
        public var section: String
        /// The key in that section.
        public var key: String
        /// The environment variable.
        public var variable: String
        /// The long flag of `apn-worker run`, with its dashes; `nil` for a setting no flag sets.
        public var flag: String?
        /// What the setting is, one sentence for `--help`.
        public var help: String
        /// What the flag takes.
        public var kind: Kind

        init(_ section: String, _ key: String, variable: String, flag: String?, _ kind: Kind, help: String) {
            self.section = section
            self.key = key
            self.variable = variable
            self.flag = flag
            self.help = help
            self.kind = kind
        }
    }

    /// The table.
    public var declaration: Declaration {
        switch self {
        case .workerId:
            Declaration(
                "worker",
                "id",
                variable: "APN_WORKER_ID",
                flag: "--worker-id",
                .text,
                help: "Worker id used in results and logs (default: HOSTNAME-PID)."
            )
        case .batchSize:
            Declaration(
                "worker",
                "batchSize",
                variable: "APN_WORKER_BATCH_SIZE",
                flag: "--batch-size",
                .integer,
                help: "Most Kafka messages per batch."
            )
        case .maxInFlight:
            Declaration(
                "worker",
                "maxInFlight",
                variable: "APN_WORKER_MAX_IN_FLIGHT",
                flag: "--max-in-flight",
                .integer,
                help: "Most notifications in flight."
            )
        case .shutdownTimeoutSeconds:
            Declaration(
                "worker",
                "shutdownTimeoutSeconds",
                variable: "APN_WORKER_SHUTDOWN_TIMEOUT_SECONDS",
                flag: "--shutdown-timeout",
                .integer,
                help: "Seconds a graceful shutdown may take."
            )
        case .logLevel:
            Declaration(
                "worker",
                "logLevel",
                variable: "APN_WORKER_LOG_LEVEL",
                flag: "--log-level",
                .text,
                help: "Log level: trace, debug, info, notice, warning, error or critical."
            )
        case .logFormat:
            Declaration(
                "worker",
                "logFormat",
                variable: "APN_WORKER_LOG_FORMAT",
                flag: "--log-format",
                .text,
                help: "Log format: json or text."
            )
        case .dedupeTTLSeconds:
            Declaration(
                "worker",
                "dedupeTTLSeconds",
                variable: "APN_WORKER_DEDUPE_TTL_SECONDS",
                flag: nil,
                .integer,
                help: "Seconds claims, outcomes and job ids are kept in Redis."
            )
        case .statusAddress:
            Declaration(
                "worker",
                "statusAddress",
                variable: "APN_WORKER_STATUS_ADDRESS",
                flag: "--status-address",
                .text,
                help: "Where the status server listens (host:port), or off."
            )
        case .kafkaBootstrapServers:
            Declaration(
                "kafka",
                "bootstrapServers",
                variable: "APN_WORKER_KAFKA_BOOTSTRAP_SERVERS",
                flag: "--brokers",
                .text,
                help: "Kafka bootstrap servers."
            )
        case .kafkaGroupId:
            Declaration(
                "kafka",
                "groupId",
                variable: "APN_WORKER_KAFKA_GROUP_ID",
                flag: "--group",
                .text,
                help: "Kafka consumer group."
            )
        case .kafkaGroupInstanceId:
            Declaration(
                "kafka",
                "groupInstanceId",
                variable: "APN_WORKER_INSTANCE_ID",
                flag: nil,
                .text,
                help: "Static group membership (group.instance.id): a name that stays with one replica."
            )
        case .kafkaRequestsTopic:
            Declaration(
                "kafka",
                "requestsTopic",
                variable: "APN_WORKER_KAFKA_REQUESTS_TOPIC",
                flag: "--requests-topic",
                .text,
                help: "Topic to consume jobs from."
            )
        case .kafkaResultsTopic:
            Declaration(
                "kafka",
                "resultsTopic",
                variable: "APN_WORKER_KAFKA_RESULTS_TOPIC",
                flag: "--results-topic",
                .text,
                help: "Topic to write results to."
            )
        case .redisURL:
            Declaration(
                "redis",
                "url",
                variable: "APN_WORKER_REDIS_URL",
                flag: "--redis",
                .text,
                help: "Redis URL, redis://[user:password@]host[:port][/db], or rediss:// for TLS; a password in it "
                    + "is visible in the process list: give it with --redis-password-file instead."
            )
        case .redisPassword:
            Declaration(
                "redis",
                "password",
                variable: "APN_WORKER_REDIS_PASSWORD",
                flag: "--redis-password",
                .text,
                help: "Redis password (overrides one in the URL); visible in the process list: prefer "
                    + "--redis-password-file or the variable."
            )
        case .redisPasswordFile:
            Declaration(
                "redis",
                "passwordFile",
                variable: "APN_WORKER_REDIS_PASSWORD_FILE",
                flag: "--redis-password-file",
                .text,
                help: "A file holding the Redis password (a trailing newline is dropped), instead of --redis-password."
            )
        case .limitsAppPerSecond:
            Declaration(
                "limits",
                "appPerSecond",
                variable: "APN_WORKER_LIMITS_APP_PER_SECOND",
                flag: nil,
                .integer,
                help: "Notifications per second for one app, for apps that set none; 0 is unlimited."
            )
        case .limitsDevicePerHour:
            Declaration(
                "limits",
                "devicePerHour",
                variable: "APN_WORKER_LIMITS_DEVICE_PER_HOUR",
                flag: nil,
                .integer,
                help: "Notifications per hour for one device, for apps that set none; 0 is unlimited."
            )
        }
    }

    /// The section of the config file.
    public var section: String { declaration.section }
    /// The key in ``section``.
    public var key: String { declaration.key }
    /// The dotted path in the config file, `section.key`.
    public var path: String { "\(section).\(key)" }
    /// The environment variable.
    public var variable: String { declaration.variable }
    /// The long flag with its dashes (`--batch-size`), or `nil`.
    public var flag: String? { declaration.flag }
    /// The long flag without its dashes (`batch-size`), or `nil`.
    public var flagName: String? { flag.map { String($0.drop(while: { $0 == "-" })) } }
    /// What the setting is, one sentence.
    public var help: String { declaration.help }
    /// What the flag takes.
    public var kind: Kind { declaration.kind }

    /// The setting with its sources for messages: `kafka.groupId (APN_WORKER_KAFKA_GROUP_ID, --group)`.
    var withSources: String {
        "\(path) (\([variable, flag].compactMap { $0 }.joined(separator: ", ")))"
    }

    /// Where the setting can be given, for messages: `the config file, VARIABLE or --flag`.
    var sourcesInWords: String {
        guard let flag else { return "the config file or \(variable)" }
        return "the config file, \(variable) or \(flag)"
    }

    /// The setting's names, for messages: `redis.password, APN_WORKER_REDIS_PASSWORD or --redis-password`.
    var names: String {
        guard let flag else { return "\(path) or \(variable)" }
        return "\(path), \(variable) or \(flag)"
    }
}
