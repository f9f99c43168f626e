/// `kafka.requestsTopics`: the priority lanes.
extension ConfigurationBuilder {
    /// The most lanes a worker reads.
    static let maximumLanes = 8

    /// `kafka.requestsTopics`, topics in priority order, or `nil` when it is not set.
    func requestsTopics(_ file: ConfigSection, resultsTopic: String) throws(ConfigurationError) -> [String]? {
        guard let node = file.node("requestsTopics") else { return nil }
        let label = file.label("requestsTopics")
        if file.value("requestsTopic") != nil {
            throw ConfigurationError(
                "\(file.label("requestsTopic")) and \(label) are both set: give one topic in requestsTopic, or the "
                    + "priority lanes, highest first, in requestsTopics."
            )
        }
        guard case .list(let items) = node, (1...Self.maximumLanes).contains(items.count) else {
            throw ConfigurationError(
                "\(label) must be a list of 1 to \(Self.maximumLanes) Kafka topics, highest priority first "
                    + "(for example [apn.requests.urgent, apn.requests]), not \(node.shown)."
            )
        }
        var topics: [String] = []
        for (index, item) in items.enumerated() {
            let topic = try Self.topic(SettingValue(label: "\(label)[\(index)]", node: item))
            guard !topics.contains(topic) else {
                throw ConfigurationError("\(label) names \(topic) twice; each lane is a topic of its own.")
            }
            guard topic != resultsTopic else {
                throw ConfigurationError(
                    "\(label)[\(index)] is \(topic), the results topic: the worker would read its own results as jobs."
                )
            }
            topics.append(topic)
        }
        return topics
    }
}
