/// The settings that environment variables and flags can set, and how they are laid over the
/// config file's tree: flag over variable over file. What they set is labelled with the
/// variable or flag, so that an error names where the value came from.
enum ConfigurationOverlay {
    /// One overridable setting: its section and key in the file, its variable and its flag.
    struct Setting {
        var section: String
        var key: String
        var variable: String
        var flag: String?
    }

    static let settings: [Setting] = [
        Setting(section: "worker", key: "id", variable: "APN_WORKER_ID", flag: "--worker-id"),
        Setting(section: "worker", key: "batchSize", variable: "APN_WORKER_BATCH_SIZE", flag: "--batch-size"),
        Setting(section: "worker", key: "maxInFlight", variable: "APN_WORKER_MAX_IN_FLIGHT", flag: "--max-in-flight"),
        Setting(
            section: "worker",
            key: "shutdownTimeoutSeconds",
            variable: "APN_WORKER_SHUTDOWN_TIMEOUT_SECONDS",
            flag: "--shutdown-timeout"
        ),
        Setting(section: "worker", key: "logLevel", variable: "APN_WORKER_LOG_LEVEL", flag: "--log-level"),
        Setting(section: "worker", key: "logFormat", variable: "APN_WORKER_LOG_FORMAT", flag: "--log-format"),
        Setting(section: "worker", key: "dedupeTTLSeconds", variable: "APN_WORKER_DEDUPE_TTL_SECONDS"),
        Setting(
            section: "worker",
            key: "statusAddress",
            variable: "APN_WORKER_STATUS_ADDRESS",
            flag: "--status-address"
        ),
        Setting(
            section: "kafka",
            key: "bootstrapServers",
            variable: "APN_WORKER_KAFKA_BOOTSTRAP_SERVERS",
            flag: "--brokers"
        ),
        Setting(section: "kafka", key: "groupId", variable: "APN_WORKER_KAFKA_GROUP_ID", flag: "--group"),
        Setting(section: "kafka", key: "groupInstanceId", variable: "APN_WORKER_INSTANCE_ID"),
        Setting(
            section: "kafka",
            key: "requestsTopic",
            variable: "APN_WORKER_KAFKA_REQUESTS_TOPIC",
            flag: "--requests-topic"
        ),
        Setting(
            section: "kafka",
            key: "resultsTopic",
            variable: "APN_WORKER_KAFKA_RESULTS_TOPIC",
            flag: "--results-topic"
        ),
        Setting(section: "redis", key: "url", variable: "APN_WORKER_REDIS_URL", flag: "--redis"),
        Setting(section: "redis", key: "password", variable: "APN_WORKER_REDIS_PASSWORD", flag: "--redis-password"),
        Setting(section: "limits", key: "appPerSecond", variable: "APN_WORKER_LIMITS_APP_PER_SECOND"),
        Setting(section: "limits", key: "devicePerHour", variable: "APN_WORKER_LIMITS_DEVICE_PER_HOUR"),
    ]

    /// `root` (a mapping, or `nil` for no file) with the given flags and the non-empty
    /// variables laid over it. A section that is not a mapping is left for the reader to refuse.
    static func apply(
        to root: [ConfigEntry],
        overrides: ConfigurationOverrides,
        environment: [String: String]
    ) -> [ConfigEntry] {
        let flags = overrides.givenFlags
        var root = root
        for setting in settings {
            var value: ConfigScalar?
            if let flag = setting.flag, let given = flags[flag] {
                value = given
            } else if let text = environment[setting.variable], !text.isEmpty {
                value = ConfigScalar(text: text, kind: .text, origin: setting.variable)
            }
            guard let value else { continue }
            var section: [ConfigEntry]
            switch root.first(where: { $0.key == setting.section })?.value {
            case nil, .null?: section = []
            case .map(let entries)?: section = entries
            case .scalar?, .list?: continue
            }
            section.set(setting.key, .scalar(value))
            root.set(setting.section, .map(section))
        }
        return root
    }
}

extension [ConfigEntry] {
    /// Replaces the value of `key`, or adds it at the end.
    fileprivate mutating func set(_ key: String, _ value: ConfigNode) {
        if let index = firstIndex(where: { $0.key == key }) {
            self[index].value = value
        } else {
            append(ConfigEntry(key: key, value: value))
        }
    }
}

extension ConfigurationOverrides {
    /// The flags given, by name, as the values they set.
    fileprivate var givenFlags: [String: ConfigScalar] {
        var flags: [String: ConfigScalar] = [:]
        func add(_ name: String, _ text: String?) {
            if let text { flags[name] = ConfigScalar(text: text, kind: .text, origin: name) }
        }
        func add(_ name: String, _ number: Int?) {
            if let number { flags[name] = ConfigScalar(text: String(number), kind: .integer, origin: name) }
        }
        add("--worker-id", workerId)
        add("--batch-size", batchSize)
        add("--max-in-flight", maxInFlight)
        add("--shutdown-timeout", shutdownTimeoutSeconds)
        add("--status-address", statusAddress)
        add("--log-level", logLevel)
        add("--log-format", logFormat)
        add("--brokers", brokers)
        add("--group", group)
        add("--requests-topic", requestsTopic)
        add("--results-topic", resultsTopic)
        add("--redis", redisURL)
        add("--redis-password", redisPassword)
        return flags
    }
}
