/// One mapping of the config file, addressed by its dotted path (`apps.com.example.app`).
///
/// A missing or `null` section reads as empty, so `worker:` with nothing under it is the
/// same as leaving `worker` out.
struct ConfigSection {
    /// Dotted path of this mapping; empty for the top level.
    let path: String
    let entries: [ConfigEntry]

    /// The top level of a config file, which must be a mapping (or empty).
    static func rootEntries(of node: ConfigNode?, filePath: String) throws(ConfigurationError) -> [ConfigEntry] {
        switch node {
        case nil, .null?:
            return []
        case .map(let entries)?:
            return entries
        case let other?:
            throw ConfigurationError(
                "config file \(filePath): the top level must be a mapping of settings "
                    + "(worker, kafka, redis, limits, apps), not \(other.shown)."
            )
        }
    }

    /// The top level.
    init(root entries: [ConfigEntry]) {
        path = ""
        self.entries = entries
    }

    private init(node: ConfigNode?, path: String) throws(ConfigurationError) {
        self.path = path
        switch node {
        case nil, .null?:
            entries = []
        case .map(let entries)?:
            self.entries = entries
        case let other?:
            throw ConfigurationError("\(path) must be a mapping of settings, not \(other.shown).")
        }
    }

    /// The dotted path of `key` in this section.
    func label(_ key: String) -> String {
        path.isEmpty ? key : "\(path).\(key)"
    }

    /// The value of `key`, or `nil` when it is absent or `null`.
    func node(_ key: String) -> ConfigNode? {
        guard let entry = entries.first(where: { $0.key == key }) else { return nil }
        if case .null = entry.value { return nil }
        return entry.value
    }

    /// Whether `key` is written with the value `null` (as opposed to left out).
    func isNull(_ key: String) -> Bool {
        guard let entry = entries.first(where: { $0.key == key }), case .null = entry.value else { return false }
        return true
    }

    /// The value of `key` as a ``SettingValue`` labelled with the variable or flag that set
    /// it, else its dotted path.
    func value(_ key: String) -> SettingValue? {
        guard let node = node(key) else { return nil }
        if case .scalar(let scalar) = node, let origin = scalar.origin {
            return SettingValue(label: origin, node: node)
        }
        return SettingValue(label: label(key), node: node)
    }

    /// Sets `target` to the whole number `key` holds, if it is set, checked against `rule`.
    func read(_ key: String, _ rule: IntegerRule, into target: inout Int) throws(ConfigurationError) {
        if let value = value(key) { target = try SettingParsing.integer(value, rule) }
    }

    /// Sets `target` to the whole number of `unit`s that `key` holds, if it is set, checked
    /// against `rule`.
    func read(
        _ key: String,
        _ rule: IntegerRule,
        _ unit: Duration,
        into target: inout Duration
    ) throws(ConfigurationError) {
        if let value = value(key) { target = unit * (try SettingParsing.integer(value, rule)) }
    }

    /// Sets `target` to the choice `key` holds, if it is set.
    func read<Choice: RawRepresentable & CaseIterable>(
        _ key: String,
        into target: inout Choice
    ) throws(ConfigurationError) where Choice.RawValue == String {
        if let value = value(key) { target = try SettingParsing.choice(value) }
    }

    /// Sets `target` to the boolean `key` holds, if it is set.
    func read(_ key: String, into target: inout Bool) throws(ConfigurationError) {
        if let value = value(key) { target = try SettingParsing.boolean(value) }
    }

    /// The mapping under `key` (empty when absent or `null`).
    func section(_ key: String) throws(ConfigurationError) -> ConfigSection {
        try ConfigSection(node: node(key), path: label(key))
    }

    /// Rejects any key not in `known`, naming the first one found and listing the known ones.
    func checkKnown(_ known: [String]) throws(ConfigurationError) {
        for entry in entries where !known.contains(entry.key) {
            let name = entry.key.isEmpty ? label("\"\"") : label(entry.key)
            throw ConfigurationError(
                "\(name): unknown setting; known settings here are \(known.joined(separator: ", "))."
            )
        }
    }
}
