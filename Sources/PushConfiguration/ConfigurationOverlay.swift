/// How the settings that environment variables and flags can set (``ConfigurationSetting``)
/// are laid over the config file's tree: flag over variable over file. What they set is
/// labelled with the variable or flag, so that an error names where the value came from.
enum ConfigurationOverlay {
    /// `root` (a mapping, or `nil` for no file) with the given flags and the non-empty
    /// variables laid over it. A section that is not a mapping is left for the reader to refuse.
    static func apply(
        to root: [ConfigEntry],
        overrides: ConfigurationOverrides,
        environment: [String: String]
    ) -> [ConfigEntry] {
        var root = root
        for setting in ConfigurationSetting.allCases {
            var value: ConfigScalar?
            if let flag = setting.flag, let given = overrides[setting] {
                value = ConfigScalar(text: given, kind: setting.kind == .integer ? .integer : .text, origin: flag)
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
