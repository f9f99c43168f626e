/// The samples of a Prometheus text exposition (`GET /metrics`), for the programs that read a
/// worker's figures back: `apn-worker demo` and the tests.
public struct MetricSamples: Sendable {
    public struct Sample: Sendable, Hashable {
        public var name: String
        public var labels: [String: String]
        public var value: Double
    }

    public var samples: [Sample]

    /// Reads every sample line (`name{label="value",...} number`); comments and lines that are
    /// not samples are skipped. Label values with escaped quotes are not supported: the worker
    /// writes none.
    public init(parsing text: String) {
        samples = text.split(separator: "\n").compactMap { line in
            guard !line.hasPrefix("#"), let space = line.lastIndex(of: " "),
                let value = Double(line[line.index(after: space)...])
            else { return nil }
            let series = line[..<space]
            guard let open = series.firstIndex(of: "{"), series.last == "}" else {
                return Sample(name: String(series), labels: [:], value: value)
            }
            var labels: [String: String] = [:]
            for pair in series[series.index(after: open)..<series.index(before: series.endIndex)].split(
                separator: "\","
            ) {
                guard let equals = pair.firstIndex(of: "=") else { continue }
                var value = pair[pair.index(after: equals)...]
                if value.first == "\"" { value = value.dropFirst() }
                if value.last == "\"" { value = value.dropLast() }
                labels[String(pair[..<equals])] = String(value)
            }
            return Sample(name: String(series[..<open]), labels: labels, value: value)
        }
    }

    /// The sum of every series of `name` whose labels include `matching`.
    public func total(_ name: String, _ matching: [String: String] = [:]) -> Double {
        samples.filter { sample in
            sample.name == name && matching.allSatisfy { key, value in sample.labels[key] == value }
        }.reduce(0) { $0 + $1.value }
    }
}
