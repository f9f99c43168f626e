import Foundation

/// The librdkafka properties: from the config file (`kafka.properties`, and `kafka.propertyFiles`
/// for values read from files), the environment (`APN_WORKER_KAFKA_PROPERTY_*`) and the flags
/// (`--kafka-property`, `--kafka-property-file`). A value is never repeated in a message: it may
/// be a secret (`sasl.password`), misspelt names included.
extension ConfigurationBuilder {
    /// The properties of every source, each overriding the same property from the one before:
    /// file, then environment, then flags.
    func kafkaProperties(file: ConfigSection) throws(ConfigurationError) -> [String: String] {
        var properties: [String: String] = [:]
        for source in [try fileKafkaProperties(file), try variableKafkaProperties(), try flagKafkaProperties()] {
            properties.merge(source) { _, higher in higher }
        }
        return properties
    }

    /// One property as a source gives it: its value, the label messages name it by, and whether
    /// the value was read from a file.
    private typealias Given = [String: (value: String, label: String, fromFile: Bool)]

    /// Adds `name` to `given`, refusing a property that has a setting of its own, and one that
    /// one source gives both as a value and from a file (`properties` and `propertyFiles`, or
    /// both flags). Given twice the same way, the later wins.
    private func add(
        _ name: String,
        _ value: String,
        label: String,
        fromFile: Bool = false,
        to given: inout Given
    ) throws(ConfigurationError) {
        if let instead = Self.reservedKafkaProperties[name] {
            throw ConfigurationError("\(label): set \(instead) instead of the librdkafka property \(name).")
        }
        if let earlier = given[name], earlier.fromFile != fromFile {
            throw ConfigurationError(
                "\(earlier.label) and \(label) both set the librdkafka property \(name); give it one way only."
            )
        }
        given[name] = (value, label, fromFile)
    }

    /// `kafka.properties`, and `kafka.propertyFiles` whose values are the text of files.
    private func fileKafkaProperties(_ file: ConfigSection) throws(ConfigurationError) -> [String: String] {
        var given: Given = [:]
        let inline = try file.section("properties")
        for entry in inline.entries {
            let label = inline.label(entry.key)
            try add(
                try Self.propertyName(entry.key, label: label),
                try Self.propertyText(entry, label: label),
                label: label,
                to: &given
            )
        }
        let files = try file.section("propertyFiles")
        for entry in files.entries {
            let label = files.label(entry.key)
            guard case .scalar = entry.value else {
                throw ConfigurationError(
                    "\(label) must be the path of a file holding the property's value, not \(entry.value.shown)."
                )
            }
            let value = try secretText(SettingValue(label: label, node: entry.value), what: "the property's value")
            try add(try Self.propertyName(entry.key, label: label), value, label: label, fromFile: true, to: &given)
        }
        return given.mapValues(\.value)
    }

    /// `APN_WORKER_KAFKA_PROPERTY_<NAME>`: `<NAME>` lowercased, `_` turned into `.`.
    private func variableKafkaProperties() throws(ConfigurationError) -> [String: String] {
        var given: Given = [:]
        for name in environment.keys.sorted() where name.hasPrefix(Self.kafkaPropertyPrefix) {
            guard let value = environment[name], !value.isEmpty else { continue }
            let suffix = name.dropFirst(Self.kafkaPropertyPrefix.count)
            guard !suffix.isEmpty, !suffix.allSatisfy({ $0 == "_" }) else {
                throw ConfigurationError(
                    "\(name) needs a librdkafka property name after the prefix, for example "
                        + "APN_WORKER_KAFKA_PROPERTY_SECURITY_PROTOCOL=SSL."
                )
            }
            try add(suffix.lowercased().replacingOccurrences(of: "_", with: "."), value, label: name, to: &given)
        }
        return given.mapValues(\.value)
    }

    /// `--kafka-property NAME=VALUE` and `--kafka-property-file NAME=PATH`.
    private func flagKafkaProperties() throws(ConfigurationError) -> [String: String] {
        var given: Given = [:]
        for argument in overrides.kafkaProperties {
            let (name, value) = try Self.nameAndValue(
                argument,
                flag: "--kafka-property",
                example: "security.protocol=SSL"
            )
            try add(name, value, label: "--kafka-property \(name)", to: &given)
        }
        for argument in overrides.kafkaPropertyFiles {
            let (name, path) = try Self.nameAndValue(
                argument,
                flag: "--kafka-property-file",
                example: "sasl.password=/secrets/kafka-password"
            )
            let label = "--kafka-property-file \(name)"
            let value = try secretText(
                SettingValue(label: label, node: .scalar(ConfigScalar(text: path, kind: .text, origin: label))),
                what: "the property's value"
            )
            try add(name, value, label: label, fromFile: true, to: &given)
        }
        return given.mapValues(\.value)
    }

    /// `NAME=VALUE` split at its first `=`. What was given is not repeated when it has no `=`:
    /// it may be a secret written without its name.
    private static func nameAndValue(
        _ argument: String,
        flag: String,
        example: String
    ) throws(ConfigurationError) -> (name: String, value: String) {
        guard let equals = argument.firstIndex(of: "="),
            !argument[..<equals].trimmingCharacters(in: .whitespaces).isEmpty
        else {
            throw ConfigurationError(
                "\(flag) must be written name=value (for example \(example)); what was given has no name before "
                    + "an = and is not shown, in case it is a secret."
            )
        }
        return (
            argument[..<equals].trimmingCharacters(in: .whitespaces), String(argument[argument.index(after: equals)...])
        )
    }

    private static func propertyName(_ key: String, label: String) throws(ConfigurationError) -> String {
        if key.trimmingCharacters(in: .whitespaces).isEmpty {
            throw ConfigurationError("\(label): a librdkafka property name must not be empty.")
        }
        return key
    }

    /// A property's value in the file as librdkafka takes it: YAML's numbers and booleans as
    /// their plain text.
    private static func propertyText(_ entry: ConfigEntry, label: String) throws(ConfigurationError) -> String {
        guard case .scalar(let scalar) = entry.value else {
            throw ConfigurationError(
                "\(label) must be a string, number or boolean (librdkafka properties are "
                    + "name: value pairs with dotted names), not \(entry.value.shown)."
            )
        }
        switch scalar.kind {
        case .boolean:
            return (try? SettingParsing.boolean(SettingValue(label: label, node: entry.value)))
                .map { $0 ? "true" : "false" } ?? scalar.text
        case .integer:
            return SettingParsing.yamlInteger(scalar.text).map(String.init) ?? scalar.text
        case .float, .string, .text:
            return scalar.text
        }
    }
}
