extension ConfigurationBuilder {
    /// The app settings jobs refer to: `topics` (the bundle IDs a job may name in `topic`) and
    /// `dryRun`, and `environmentFallback` (which needs both environments).
    func readJobSettings(_ section: ConfigSection, into app: inout WorkerConfiguration.App) throws(ConfigurationError) {
        try section.read("dryRun", into: &app.dryRun)
        try section.read("environmentFallback", into: &app.environmentFallback)
        if app.environmentFallback && app.environments.count < 2 {
            throw ConfigurationError(
                "\(section.label("environmentFallback")) needs both environments: configure "
                    + "environments.production and environments.sandbox, or remove environmentFallback."
            )
        }
        app.topics = [app.bundleId]
        guard let node = section.node("topics") else { return }
        let label = section.label("topics")
        guard case .list(let items) = node, !items.isEmpty else {
            throw ConfigurationError("\(label) must be a list of bundle IDs, not \(node.shown).")
        }
        var topics: [String] = []
        for (index, item) in items.enumerated() {
            let text = try SettingParsing.string(SettingValue(label: "\(label)[\(index)]", node: item))
                .trimmingCharacters(in: .whitespaces)
            guard !text.isEmpty, text.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 0x20 && $0.value < 0x7F })
            else {
                throw ConfigurationError(
                    "\(label)[\(index)] must be a bundle ID such as com.example.app, not \(item.shown)."
                )
            }
            if !topics.contains(text) { topics.append(text) }
        }
        if app.transport != .http2 && topics != [app.bundleId] {
            throw ConfigurationError(
                "\(label) needs transport http2 with signingKey: the binary protocol sends to the certificate's "
                    + "one topic (bundleId \(app.bundleId)); remove topics or set the app's transport to http2."
            )
        }
        app.topics = topics
    }
}
