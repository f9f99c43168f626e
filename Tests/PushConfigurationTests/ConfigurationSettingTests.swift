import ArgumentParser
import Foundation
import PushCommandLine
import PushConfiguration
import PushTestSupport
import Testing

/// Three values of one setting, one for each source, and how to read the setting back from a
/// configuration. `flag` is empty for a setting that has no flag.
private struct Sample: Sendable {
    var file: String
    var variable: String
    var flag: String
    var read: @Sendable (WorkerConfiguration) -> String
}

private func sample(
    _ file: String,
    _ variable: String,
    _ flag: String,
    _ read: @escaping @Sendable (WorkerConfiguration) -> String
) -> Sample {
    Sample(file: file, variable: variable, flag: flag, read: read)
}

/// Files for the samples of `redis.passwordFile`, readable by their owner only, each holding its
/// own path: the password read back names the file it came from, as the other samples' values do.
private let passwordFiles: (file: String, variable: String, flag: String) = {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
        "apn-worker-password-files-\(UUID().uuidString)"
    ).path
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let paths = ["file", "variable", "flag"].map { directory + "/" + $0 }
    for path in paths {
        _ = FileManager.default.createFile(
            atPath: path,
            contents: Data((path + "\n").utf8),
            attributes: [.posixPermissions: 0o600]
        )
    }
    return (paths[0], paths[1], paths[2])
}()

/// A sample for every setting of the table.
private let samples: [ConfigurationSetting: Sample] = [
    .workerId: sample("file-id", "env-id", "flag-id") { $0.worker.id },
    .batchSize: sample("11", "12", "13") { String($0.worker.batchSize) },
    .maxInFlight: sample("21", "22", "23") { String($0.worker.maxInFlight) },
    .shutdownTimeoutSeconds: sample("31", "32", "33") { String($0.worker.shutdownTimeout.components.seconds) },
    .logLevel: sample("debug", "notice", "error") { $0.worker.logLevel.rawValue },
    // Two values only: the flag's is the file's, so "flag over variable" is what shows.
    .logFormat: sample("text", "json", "text") { $0.worker.logFormat.rawValue },
    .dedupeTTLSeconds: sample("600", "700", "") { String($0.worker.dedupeTTLSeconds) },
    .statusAddress: sample("127.0.0.1:9401", "127.0.0.1:9402", "127.0.0.1:9403") { config in
        config.worker.statusAddress.map { "\($0.host):\($0.port)" } ?? "off"
    },
    .kafkaBootstrapServers: sample("file:9092", "env:9092", "flag:9092") { $0.kafka.bootstrapServers },
    .kafkaGroupId: sample("file-group", "env-group", "flag-group") { $0.kafka.groupId },
    .kafkaGroupInstanceId: sample("file-instance", "env-instance", "") { $0.kafka.groupInstanceId ?? "" },
    .kafkaRequestsTopic: sample("file.requests", "env.requests", "flag.requests") { $0.kafka.requestsTopic },
    .kafkaResultsTopic: sample("file.results", "env.results", "flag.results") { $0.kafka.resultsTopic },
    .redisURL: sample("redis://file-redis:6379", "redis://env-redis:6380", "redis://flag-redis:6381") {
        "redis://\($0.redis.host):\($0.redis.port)"
    },
    .redisPassword: sample("file-pass", "env-pass", "flag-pass") { $0.redis.password ?? "" },
    .redisPasswordFile: sample(passwordFiles.file, passwordFiles.variable, passwordFiles.flag) {
        $0.redis.password ?? ""
    },
    .limitsAppPerSecond: sample("5", "6", "") { String($0.limits.appPerSecond) },
    .limitsDevicePerHour: sample("7", "8", "") { String($0.limits.devicePerHour) },
]

/// A config file with one app whose credentials are placeholder files, readable by their owner only.
private final class SettingsFixture {
    let directory: String

    init() throws {
        directory = try Paths.temporaryDirectory()
        for name in ["cert.pem", "key.pem"] {
            _ = FileManager.default.createFile(
                atPath: directory + "/" + name,
                contents: Data("placeholder\n".utf8),
                attributes: [.posixPermissions: 0o600]
            )
        }
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    /// A YAML file with the required settings and `settings` written in their sections.
    func yaml(_ settings: [ConfigurationSetting: String] = [:]) -> String {
        var sections: [String: [(key: String, value: String)]] = [
            "kafka": [("bootstrapServers", "\"base:9092\"")],
            "redis": [("url", "\"redis://base-redis:6379\"")],
        ]
        for (setting, value) in settings {
            let written = setting.kind == .integer ? value : "\"\(value)\""
            sections[setting.section, default: []].removeAll { $0.key == setting.key }
            sections[setting.section, default: []].append((setting.key, written))
        }
        var text = ""
        for (name, entries) in sections.sorted(by: { $0.key < $1.key }) {
            text += "\(name):\n" + entries.map { "  \($0.key): \($0.value)\n" }.joined()
        }
        return text + """
            apps:
              com.example.app:
                environments:
                  production:
                    certificate: \(directory)/cert.pem
                    key: \(directory)/key.pem

            """
    }

    func load(
        file: [ConfigurationSetting: String] = [:],
        environment: [String: String] = [:],
        overrides: ConfigurationOverrides = .init()
    ) throws -> WorkerConfiguration {
        try WorkerConfiguration.parse(
            fileContents: yaml(file),
            path: directory + "/config.yaml",
            overrides: overrides,
            environment: environment,
            hostname: "host",
            pid: 1
        )
    }
}

@Test func everySettingHasASample() {
    #expect(Set(samples.keys) == Set(ConfigurationSetting.allCases))
    for setting in ConfigurationSetting.allCases {
        #expect((samples[setting]?.flag.isEmpty ?? true) == (setting.flag == nil), "\(setting.path)")
    }
}

@Test func theTableNamesEachFileKeyVariableAndFlagOnce() {
    let settings = ConfigurationSetting.allCases
    #expect(Set(settings.map(\.path)).count == settings.count)
    #expect(Set(settings.map(\.variable)).count == settings.count)
    let flags = settings.compactMap(\.flag)
    #expect(Set(flags).count == flags.count)
    for setting in settings {
        #expect(setting.variable.hasPrefix("APN_WORKER_"), "\(setting.path)")
        if let flag = setting.flag {
            #expect(flag.hasPrefix("--") && setting.flagName == String(flag.dropFirst(2)), "\(flag)")
        }
    }
}

@Test(arguments: ConfigurationSetting.allCases)
func theFileKeyTheVariableAndTheFlagSetTheSameField(_ setting: ConfigurationSetting) throws {
    let fixture = try SettingsFixture()
    let sample = try #require(samples[setting])
    let fromFile = try fixture.load(file: [setting: sample.file])
    #expect(sample.read(fromFile) == sample.file)
    let fromVariable = try fixture.load(environment: [setting.variable: sample.variable])
    #expect(sample.read(fromVariable) == sample.variable)
    #expect(fromVariable.warnings.isEmpty)
    if setting.flag != nil {
        let fromFlag = try fixture.load(overrides: ConfigurationOverrides([setting: sample.flag]))
        #expect(sample.read(fromFlag) == sample.flag)
    }
}

@Test(arguments: ConfigurationSetting.allCases)
func theFlagBeatsTheVariableWhichBeatsTheFile(_ setting: ConfigurationSetting) throws {
    let fixture = try SettingsFixture()
    let sample = try #require(samples[setting])
    let environment = [setting.variable: sample.variable]
    let variableAndFile = try fixture.load(file: [setting: sample.file], environment: environment)
    #expect(sample.read(variableAndFile) == sample.variable)
    if setting.flag != nil {
        let all = try fixture.load(
            file: [setting: sample.file],
            environment: environment,
            overrides: ConfigurationOverrides([setting: sample.flag])
        )
        #expect(sample.read(all) == sample.flag)
    }
}

@Test(arguments: ConfigurationSetting.allCases.filter { $0.flag != nil })
func everyFlagOfTheTableIsAcceptedByRunAndReachesTheConfiguration(_ setting: ConfigurationSetting) throws {
    let fixture = try SettingsFixture()
    let sample = try #require(samples[setting])
    let flag = try #require(setting.flag)
    for arguments in [[flag, sample.flag], ["\(flag)=\(sample.flag)"]] {
        let overrides = try ConfigurationFlags.parse(arguments).overrides
        #expect(overrides == ConfigurationOverrides([setting: sample.flag]))
        let config = try fixture.load(file: [setting: sample.file], overrides: overrides)
        #expect(sample.read(config) == sample.flag)
    }
    // The flag takes what the table says: an integer setting's refuses other text.
    if setting.kind == .integer {
        #expect(throws: (any Error).self) { try ConfigurationFlags.parse([flag, "x1"]) }
    } else {
        #expect(try ConfigurationFlags.parse([flag, "x1"]).overrides[setting] == "x1")
    }
}

@Test func configAndKafkaPropertyFlags() throws {
    let flags = try ConfigurationFlags.parse([
        "--config", "/etc/apn.yaml", "--kafka-property", "a=1", "--kafka-property", "b=2",
        "--kafka-property-file", "sasl.password=/secrets/kafka",
    ])
    #expect(
        flags.overrides
            == ConfigurationOverrides(
                configPath: "/etc/apn.yaml",
                kafkaProperties: ["a=1", "b=2"],
                kafkaPropertyFiles: ["sasl.password=/secrets/kafka"]
            )
    )
    #expect(try ConfigurationFlags.parse([]).overrides == ConfigurationOverrides())
}

@Test func helpListsEveryFlagWithItsTextAndVariable() {
    let help = ConfigurationFlags.helpMessage(columns: 1_000)
    for setting in ConfigurationSetting.allCases {
        guard let flag = setting.flag else {
            #expect(!help.contains(setting.variable), "\(setting.variable)")
            continue
        }
        #expect(help.contains("\(flag) <"), "\(flag)")
        #expect(help.contains("\(setting.help) [env: \(setting.variable)]"), "\(flag)")
    }
    #expect(help.contains("--config <config>"))
    #expect(help.contains("[env: \(WorkerConfiguration.configPathVariable)]"))
    #expect(help.contains("--kafka-property <kafka-property>"))
    #expect(help.contains("[env: \(WorkerConfiguration.kafkaPropertyVariablePrefix)<NAME>]"))
    #expect(help.contains("--kafka-property-file <kafka-property-file>"))
}

/// The flags that take a secret say that it is visible in the process list, and name the flag
/// that reads it from a file.
@Test func helpPointsSecretFlagsToTheirFileForms() {
    let help = ConfigurationFlags.helpMessage(columns: 1_000)
    /// The flag's entry: from its name to the next flag's.
    func line(_ flag: String) -> String {
        guard let start = help.range(of: "  \(flag) <") else { return "" }
        let rest = help[start.upperBound...]
        return String(rest[..<(rest.range(of: "\n  --")?.lowerBound ?? rest.endIndex)])
    }
    for (flag, fileForm) in [
        ("--redis-password", "--redis-password-file"), ("--kafka-property", "--kafka-property-file"),
        ("--redis", "--redis-password-file"),
    ] {
        #expect(line(flag).contains("visible in the process list"), "\(flag): \(line(flag))")
        #expect(line(flag).contains(fileForm), "\(flag): \(line(flag))")
    }
    #expect(line("--redis-password-file").contains("A file holding the Redis password"))
    #expect(line("--kafka-property-file").contains("read from a file"))
}

/// docs/configuration.md's tables of variables and flags list those of the table, each with
/// its setting, and no others.
@Test func theDocumentationListsEveryVariableAndFlag() throws {
    let text = try String(contentsOfFile: Paths.root + "/docs/configuration.md", encoding: .utf8)
    let rows = text.split(separator: "\n").filter { $0.hasPrefix("| `") }
    func cells(_ row: Substring) -> [String] {
        row.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
    }
    var variables: [String: String] = [:]
    var flags: [String: String] = [:]
    for row in rows {
        let cells = cells(row)
        guard cells.count >= 2 else { continue }
        let name = cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
        if name.hasPrefix("APN_WORKER_") { variables[name] = cells[1] }
        if name.hasPrefix("--") { flags[String(name.prefix { $0 != " " })] = cells[1] }
    }
    for setting in ConfigurationSetting.allCases {
        #expect(variables[setting.variable]?.hasPrefix("`\(setting.path)`") == true, "\(setting.variable)")
        if let flag = setting.flag {
            #expect(flags[flag]?.hasPrefix("`\(setting.path)`") == true, "\(flag)")
        }
    }
    let others = Set([
        WorkerConfiguration.configPathVariable, WorkerConfiguration.kafkaPropertyVariablePrefix + "<NAME>",
    ])
    #expect(Set(variables.keys) == Set(ConfigurationSetting.allCases.map(\.variable)).union(others))
    #expect(
        Set(flags.keys)
            == Set(ConfigurationSetting.allCases.compactMap(\.flag)).union([
                "--config", "--kafka-property", "--kafka-property-file",
            ])
    )
}
