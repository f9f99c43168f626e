import Foundation

extension WorkerConfiguration {
    /// Environment variable naming the config file (`--config` wins over it).
    public static let configPathVariable = "APN_WORKER_CONFIG"

    /// Prefix of the environment variables that set librdkafka properties
    /// (`APN_WORKER_KAFKA_PROPERTY_SECURITY_PROTOCOL` sets `security.protocol`).
    public static let kafkaPropertyVariablePrefix = "APN_WORKER_KAFKA_PROPERTY_"

    /// Loads and validates the configuration of `apn-worker run`.
    ///
    /// The config file is `overrides.configPath`, else `APN_WORKER_CONFIG`; without either,
    /// every required setting must come from the environment and flags, which is impossible
    /// for `apps`, so the result is an error naming the missing file. Files referenced by apps
    /// (certificate, key, pfx, ca, passphraseFile) must exist and be readable now; relative
    /// paths are taken relative to the config file's directory.
    ///
    /// - Parameters:
    ///   - overrides: the command-line flags.
    ///   - environment: the environment variables to read (`APN_WORKER_*`); the executable
    ///     passes the process's, the library never reads it by itself.
    ///   - hostname, pid: used for the default worker id, `<hostname>-<pid>`.
    /// - Throws: ``ConfigurationError`` whose message names the setting and what is allowed.
    public static func load(
        overrides: ConfigurationOverrides = ConfigurationOverrides(),
        environment: [String: String],
        hostname: String = ProcessInfo.processInfo.hostName,
        pid: Int32 = ProcessInfo.processInfo.processIdentifier
    ) throws(ConfigurationError) -> WorkerConfiguration {
        var pathSource: (path: String, label: String)?
        if let path = overrides.configPath {
            pathSource = (path, "--config")
        } else if let path = environment[configPathVariable], !path.isEmpty {
            pathSource = (path, configPathVariable)
        }
        guard let (path, label) = pathSource else {
            return try resolve(
                file: nil,
                filePath: nil,
                overrides: overrides,
                environment: environment,
                hostname: hostname,
                pid: pid
            )
        }
        let contents = try readConfigFile(path, label: label)
        return try parse(
            fileContents: contents,
            path: path,
            overrides: overrides,
            environment: environment,
            hostname: hostname,
            pid: pid
        )
    }

    /// Validates the configuration given the text of a config file, as ``load(overrides:environment:hostname:pid:)``
    /// does after reading it.
    ///
    /// `path` picks the syntax (by extension), names the file in messages and is the base of
    /// relative paths in it. Unlike `load`, the process environment is not read unless passed.
    public static func parse(
        fileContents: String,
        path: String,
        overrides: ConfigurationOverrides = ConfigurationOverrides(),
        environment: [String: String] = [:],
        hostname: String = ProcessInfo.processInfo.hostName,
        pid: Int32 = ProcessInfo.processInfo.processIdentifier
    ) throws(ConfigurationError) -> WorkerConfiguration {
        let root = try ConfigFileParser.parse(fileContents, path: path)
        return try resolve(
            file: root,
            filePath: path,
            overrides: overrides,
            environment: environment,
            hostname: hostname,
            pid: pid
        )
    }

    /// Validates the configuration from an already-parsed file (or none).
    static func resolve(
        file: ConfigNode?,
        filePath: String?,
        overrides: ConfigurationOverrides,
        environment: [String: String],
        hostname: String,
        pid: Int32
    ) throws(ConfigurationError) -> WorkerConfiguration {
        var builder = try ConfigurationBuilder(
            file: file,
            filePath: filePath,
            overrides: overrides,
            environment: environment
        )
        return try builder.build(hostname: hostname, pid: pid)
    }

    private static func readConfigFile(_ path: String, label: String) throws(ConfigurationError) -> String {
        if path.isEmpty { throw ConfigurationError("\(label) must name a config file, not an empty path.") }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw ConfigurationError("\(label): \(path) is a directory; name the config file in it.")
        }
        if let size = (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber,
            size.intValue > ConfigLimits.maxFileBytes
        {
            throw ConfigurationError(
                "\(label): config file \(path) is larger than \(ConfigLimits.maxFileBytes / 1024 / 1024) MiB; "
                    + "check that it is the right file."
            )
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("\(label): cannot read \(path); check that the file exists and is readable.")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigurationError("config file \(path) is not UTF-8 text; save it as UTF-8.")
        }
        return text
    }
}
