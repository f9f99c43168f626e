/// Settings given on the command line of `apn-worker run`; they override the config file and
/// the environment. `nil` (or an empty list) means the flag was not given.
public struct ConfigurationOverrides: Sendable, Hashable {
    /// `--config PATH`: the config file (wins over `APN_WORKER_CONFIG`).
    public var configPath: String?
    /// `--kafka-property k=v`, repeatable; merged over the file's and the environment's.
    public var kafkaProperties: [String]
    /// `--kafka-property-file k=path`, repeatable: the property's value is the file's text.
    public var kafkaPropertyFiles: [String]
    /// The flags of ``ConfigurationSetting``s given, by setting: their values as written (a
    /// whole number in decimal).
    public private(set) var values: [ConfigurationSetting: String]

    /// `configPath`, `kafkaProperties`, `kafkaPropertyFiles` and the settings' flags in `values`
    /// (`nil`: not given).
    ///
    /// - Precondition: every setting given a value has a flag.
    public init(
        configPath: String? = nil,
        kafkaProperties: [String] = [],
        kafkaPropertyFiles: [String] = [],
        _ values: [ConfigurationSetting: String?] = [:]
    ) {
        self.configPath = configPath
        self.kafkaProperties = kafkaProperties
        self.kafkaPropertyFiles = kafkaPropertyFiles
        self.values = [:]
        for (setting, value) in values { self[setting] = value }
    }

    /// The value of `setting`'s flag, `nil` when it was not given.
    ///
    /// - Precondition: a setting given a value has a flag.
    public subscript(setting: ConfigurationSetting) -> String? {
        get { values[setting] }
        set {
            precondition(newValue == nil || setting.flag != nil, "\(setting.path) has no flag")
            values[setting] = newValue
        }
    }
}
