import Foundation
import PushLocalStack
import PushStatus
import PushTestSupport

/// A real Prometheus server (Debian's `prometheus`, which `scripts/test` unpacks into
/// `.build/tools`) on 127.0.0.1, scraping a list of targets with a rule file loaded, and a client
/// of its HTTP API (`/api/v1/...`).
final class PrometheusServer: Sendable {
    /// The job name of the scraped targets; `ApnWorkerDown` matches `job=~".*apn-worker.*"`.
    static let job = "apn-worker"

    let process: ChildProcess
    let client: StatusClient
    /// The file its log goes to.
    let logPath: String

    private init(process: ChildProcess, client: StatusClient, logPath: String) {
        self.process = process
        self.client = client
        self.logPath = logPath
    }

    /// `prometheus` on PATH, or in the project's `.build/tools`; nil when neither exists.
    static var executable: String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        let candidates =
            path.split(separator: ":").map { "\($0)/prometheus" } + [Paths.root + "/.build/tools/prometheus"]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// The configuration: every `scrapeInterval` each target's `/metrics`, every
    /// `evaluationInterval` the rules of `ruleFile`.
    static func configuration(
        targets: [String],
        ruleFile: String,
        scrapeInterval: String,
        evaluationInterval: String
    ) -> String {
        """
        global:
          scrape_interval: \(scrapeInterval)
          scrape_timeout: \(scrapeInterval)
          evaluation_interval: \(evaluationInterval)
        rule_files:
          - "\(ruleFile)"
        scrape_configs:
          - job_name: \(job)
            static_configs:
              - targets: [\(targets.map { "\"\($0)\"" }.joined(separator: ", "))]

        """
    }

    /// Writes `configuration` into `directory` and starts Prometheus with its storage there, on a
    /// free port of 127.0.0.1; returns once it answers `GET /-/ready` with 200.
    static func start(executable: String, configuration: String, directory: String) async throws -> PrometheusServer {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let configPath = directory + "/prometheus.yml"
        try configuration.write(toFile: configPath, atomically: true, encoding: .utf8)
        var failures: [String] = []
        // A port found free can be taken before Prometheus binds it: then it exits, and another is tried.
        for attempt in 1...3 {
            let port = try RedisServerProcess.freePort()
            let logPath = directory + "/prometheus-\(attempt).log"
            let process = try ChildProcess(
                executable,
                [
                    "--config.file=\(configPath)", "--storage.tsdb.path=\(directory)/data",
                    "--web.listen-address=127.0.0.1:\(port)", "--web.enable-lifecycle", "--log.level=info",
                ],
                stderrFile: logPath
            )
            let server = PrometheusServer(
                process: process,
                client: StatusClient(host: "127.0.0.1", port: port),
                logPath: logPath
            )
            let deadline = ContinuousClock.now + .seconds(30)
            while process.isRunning, ContinuousClock.now < deadline {
                if (try? await server.client.get("/-/ready"))?.status == .ok { return server }
                try await Task.sleep(for: .milliseconds(100))  // poll interval, not synchronisation
            }
            failures.append("attempt \(attempt) on port \(port):\n\(server.log)")
            await server.stop()
        }
        throw ServerError("Prometheus did not become ready:\n\(failures.joined(separator: "\n"))")
    }

    /// The end of its log, for failure messages.
    var log: String {
        String(((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "(no log)").suffix(4000))
    }

    /// Asks Prometheus to quit (`POST /-/quit`) and waits until it has exited; kills it if it
    /// has not within 10 s.
    func stop() async {
        guard process.isRunning else { return }
        let asked = try? await client.withConnection { connection in
            try await connection.get("/-/quit", method: .POST, keepAlive: false)
        }
        if asked?.status != .ok { process.signal(SIGKILL) }
        _ = await process.finish(killAfter: .seconds(10))
    }

    // MARK: The HTTP API

    /// An answer of the HTTP API: `{"status":"success","data":…}` or an error.
    struct Answer<Payload: Decodable>: Decodable {
        var status: String
        var data: Payload?
        var errorType: String?
        var error: String?
    }

    /// `GET path`, decoded as an answer whose data is a `Payload`.
    func api<Payload: Decodable>(_ path: String, as type: Payload.Type = Payload.self) async throws -> Payload {
        let response = try await client.get(path)
        let answer: Answer<Payload>
        do {
            answer = try JSONDecoder().decode(Answer<Payload>.self, from: Data(response.body.readableBytesView))
        } catch {
            throw ServerError("GET \(path) answered \(response.status.code) \(response.text.prefix(500)): \(error)")
        }
        guard answer.status == "success", let data = answer.data else {
            throw ServerError(
                "GET \(path) answered \(response.status.code): \(answer.errorType ?? "") \(answer.error ?? "")"
            )
        }
        return data
    }

    /// One scrape target of `/api/v1/targets`.
    struct Target: Decodable {
        var scrapePool: String
        var scrapeUrl: String
        var health: String
        var lastError: String
        var labels: [String: String]
    }

    struct Targets: Decodable {
        var activeTargets: [Target]
    }

    /// The active targets.
    func targets() async throws -> [Target] {
        try await api("/api/v1/targets?state=active", as: Targets.self).activeTargets
    }

    /// One rule of `/api/v1/rules`.
    struct Rule: Decodable {
        var name: String
        var query: String
        var type: String
        var health: String
        var lastError: String?
        /// An alerting rule's `for`, in seconds.
        var duration: Double?
        /// An alerting rule's state: inactive, pending or firing.
        var state: String?
    }

    struct RuleGroup: Decodable {
        var name: String
        var file: String
        var rules: [Rule]
    }

    struct RuleGroups: Decodable {
        var groups: [RuleGroup]
    }

    /// Every loaded rule, in order.
    func rules() async throws -> [Rule] {
        try await api("/api/v1/rules", as: RuleGroups.self).groups.flatMap(\.rules)
    }

    /// One alert of `/api/v1/alerts`: an alerting rule's instance that is pending or firing.
    struct Alert: Decodable {
        var labels: [String: String]
        var state: String
    }

    struct Alerts: Decodable {
        var alerts: [Alert]
    }

    /// The pending and firing alerts.
    func alerts() async throws -> [Alert] {
        try await api("/api/v1/alerts", as: Alerts.self).alerts
    }

    /// One series of an instant vector: its labels and its value.
    struct Sample: Decodable {
        var metric: [String: String]
        var value: Double

        enum CodingKeys: String, CodingKey {
            case metric
            case value
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            metric = try container.decodeIfPresent([String: String].self, forKey: .metric) ?? [:]
            // `[unix time, "value"]`, the value a string so that NaN and infinities fit.
            var pair = try container.nestedUnkeyedContainer(forKey: .value)
            _ = try pair.decode(Double.self)
            let text = try pair.decode(String.self)
            guard let value = Double(text) else {
                throw DecodingError.dataCorruptedError(in: pair, debugDescription: "not a sample value: \(text)")
            }
            self.value = value
        }
    }

    struct Vector: Decodable {
        var resultType: String
        var result: [Sample]
    }

    /// Evaluates `expression` now (`/api/v1/query`); it must give an instant vector.
    func query(_ expression: String) async throws -> [Sample] {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let encoded = expression.addingPercentEncoding(withAllowedCharacters: allowed) ?? expression
        let vector = try await api("/api/v1/query?query=\(encoded)", as: Vector.self)
        guard vector.resultType == "vector" else {
            throw ServerError("\(expression) gives a \(vector.resultType), not an instant vector")
        }
        return vector.result
    }

    /// The value of an expression that gives one series, or nil when it gives none (or fails).
    func value(_ expression: String) async -> Double? {
        guard let samples = try? await query(expression), samples.count == 1 else { return nil }
        return samples[0].value
    }
}
