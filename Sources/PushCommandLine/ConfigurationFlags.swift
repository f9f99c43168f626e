import ArgumentParser
import PushConfiguration

/// The flags of `apn-worker run` that set its configuration: `--config`, `--kafka-property`,
/// `--kafka-property-file` and one for each ``ConfigurationSetting`` with a flag, named and
/// explained by that table (the help text ends with the setting's environment variable).
public struct ConfigurationFlags: ParsableArguments {
    @Option(help: .variable(WorkerConfiguration.configPathVariable, "Configuration file (YAML or JSON)."))
    var config: String?
    @Option(name: .setting(.workerId), help: .setting(.workerId))
    var workerId: String?
    @Option(name: .setting(.kafkaBootstrapServers), help: .setting(.kafkaBootstrapServers))
    var brokers: String?
    @Option(name: .setting(.kafkaGroupId), help: .setting(.kafkaGroupId))
    var group: String?
    @Option(name: .setting(.kafkaRequestsTopic), help: .setting(.kafkaRequestsTopic))
    var requestsTopic: String?
    @Option(name: .setting(.kafkaResultsTopic), help: .setting(.kafkaResultsTopic))
    var resultsTopic: String?
    @Option(
        name: .customLong("kafka-property"),
        help: .variable(
            WorkerConfiguration.kafkaPropertyVariablePrefix + "<NAME>",
            "A librdkafka property, KEY=VALUE (repeatable); the value is visible in the process list: give "
                + "secrets (sasl.password) with --kafka-property-file or the variable."
        )
    )
    var kafkaProperties: [String] = []
    @Option(
        name: .customLong("kafka-property-file"),
        help: ArgumentHelp(
            "A librdkafka property whose value is read from a file, KEY=PATH (repeatable), for secrets such as "
                + "sasl.password; a trailing newline is dropped (kafka.propertyFiles in the config file)."
        )
    )
    var kafkaPropertyFiles: [String] = []
    @Option(name: .setting(.redisURL), help: .setting(.redisURL))
    var redis: String?
    @Option(name: .setting(.redisPassword), help: .setting(.redisPassword))
    var redisPassword: String?
    @Option(name: .setting(.redisPasswordFile), help: .setting(.redisPasswordFile))
    var redisPasswordFile: String?
    @Option(name: .setting(.batchSize), help: .setting(.batchSize))
    var batchSize: Int?
    @Option(name: .setting(.maxInFlight), help: .setting(.maxInFlight))
    var maxInFlight: Int?
    @Option(name: .setting(.logLevel), help: .setting(.logLevel))
    var logLevel: String?
    @Option(name: .setting(.logFormat), help: .setting(.logFormat))
    var logFormat: String?
    @Option(name: .setting(.shutdownTimeoutSeconds), help: .setting(.shutdownTimeoutSeconds))
    var shutdownTimeout: Int?
    @Option(name: .setting(.statusAddress), help: .setting(.statusAddress))
    var statusAddress: String?

    public init() {}

    /// The flags given, as the configuration takes them.
    public var overrides: ConfigurationOverrides {
        var overrides = ConfigurationOverrides(
            configPath: config,
            kafkaProperties: kafkaProperties,
            kafkaPropertyFiles: kafkaPropertyFiles
        )
        overrides[.workerId] = workerId
        overrides[.kafkaBootstrapServers] = brokers
        overrides[.kafkaGroupId] = group
        overrides[.kafkaRequestsTopic] = requestsTopic
        overrides[.kafkaResultsTopic] = resultsTopic
        overrides[.redisURL] = redis
        overrides[.redisPassword] = redisPassword
        overrides[.redisPasswordFile] = redisPasswordFile
        overrides[.batchSize] = batchSize.map { String($0) }
        overrides[.maxInFlight] = maxInFlight.map { String($0) }
        overrides[.logLevel] = logLevel
        overrides[.logFormat] = logFormat
        overrides[.shutdownTimeoutSeconds] = shutdownTimeout.map { String($0) }
        overrides[.statusAddress] = statusAddress
        return overrides
    }
}

extension NameSpecification {
    /// The long flag of `setting`, from ``ConfigurationSetting``.
    fileprivate static func setting(_ setting: ConfigurationSetting) -> NameSpecification {
        guard let name = setting.flagName else { preconditionFailure("\(setting.path) has no flag") }
        return .customLong(name)
    }
}

extension ArgumentHelp {
    /// The help text of `setting`, from ``ConfigurationSetting``, with its variable.
    fileprivate static func setting(_ setting: ConfigurationSetting) -> ArgumentHelp {
        variable(setting.variable, setting.help)
    }

    /// `text`, then the environment variable that gives the same setting.
    fileprivate static func variable(_ variable: String, _ text: String) -> ArgumentHelp {
        ArgumentHelp("\(text) [env: \(variable)]")
    }
}
