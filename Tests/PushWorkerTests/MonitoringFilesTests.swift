import Foundation
import PushTestSupport
import PushWorker
import Testing
import Yams

/// The operations files in `deploy/` and `docs/operations.md` against the metrics the worker
/// exports (`MetricCatalogue`): alert rules and dashboard use only those metrics, with their own
/// labels; every alert has a runbook; the Kubernetes manifests render with `kubectl kustomize`
/// and wire the status server; the compose stack's Prometheus and Grafana find their files.
@Suite struct MonitoringFilesTests {
    static func text(_ path: String) throws -> String {
        try String(contentsOfFile: Paths.root + "/" + path, encoding: .utf8)
    }

    static func yaml(_ path: String) throws -> Node {
        try #require(try Yams.compose(yaml: text(path)), "\(path) is empty")
    }

    // MARK: PromQL

    /// The labels Prometheus itself adds to every scraped series.
    static let targetLabels: Set<String> = ["instance", "job"]

    /// One use of a metric in an expression: the name as written and the label names its
    /// selector matches on, if it has one.
    struct MetricUse: Hashable {
        var name: String
        var labels: Set<String>
    }

    /// The metrics an expression names: identifiers starting `apn_worker_` or `process_`, with
    /// the label names of their `{…}` selector. String literals are dropped first, so that a
    /// label value is never read as a metric.
    static func metricUses(in expression: String) -> [MetricUse] {
        let withoutStrings = expression.replacingOccurrences(
            of: #""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"#,
            with: "\"\"",
            options: .regularExpression
        )
        // The character before a name is matched (not looked behind at), and whitespace only
        // together with a selector, so that the next name keeps its own preceding character.
        let pattern = #/(?:^|[^A-Za-z0-9_:])((?:apn_worker_|process_)[A-Za-z0-9_:]*)(?:\s*(\{[^}]*\}))?/#
        return withoutStrings.matches(of: pattern).map { match in
            var labels: Set<String> = []
            if let selector = match.output.2 {
                for label in selector.matches(of: #/([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)/#) {
                    labels.insert(String(label.output.1))
                }
            }
            return MetricUse(name: String(match.output.1), labels: labels)
        }
    }

    /// What is wrong with one use of a metric, or nil: the name must be in the catalogue (a
    /// histogram only with `_bucket`, `_sum` or `_count`, and `_bucket` may match on `le`), and its
    /// selector may only match on the metric's labels and the target's.
    static func problem(with use: MetricUse) -> String? {
        let catalogue = Dictionary(uniqueKeysWithValues: MetricCatalogue.all.map { ($0.name, $0) })
        var metric = catalogue[use.name]
        var allowed = targetLabels
        if let found = metric, found.kind == .histogram {
            return "\(use.name) is a histogram: use \(use.name)_bucket, _sum or _count"
        }
        if metric == nil {
            for suffix in ["_bucket", "_sum", "_count"] where use.name.hasSuffix(suffix) {
                let base = String(use.name.dropLast(suffix.count))
                guard let found = catalogue[base] else { continue }
                guard found.kind == .histogram else {
                    return "\(use.name): \(base) is a \(found.kind.rawValue), not a histogram"
                }
                metric = found
                if suffix == "_bucket" { allowed.insert("le") }
            }
        }
        guard let metric else { return "\(use.name) is not a metric the worker exports (MetricCatalogue.all)" }
        allowed.formUnion(metric.labels)
        let unknown = use.labels.subtracting(allowed)
        return unknown.isEmpty ? nil : "\(use.name) has no label \(unknown.sorted().joined(separator: ", "))"
    }

    /// The alert rules of `deploy/prometheus/alerts.yaml`.
    static func alertRules() throws -> [Node] {
        let groups = try #require(try yaml("deploy/prometheus/alerts.yaml")["groups"]?.array())
        return groups.flatMap { $0["rules"]?.array() ?? [] }
    }

    /// The dashboard's panels, those inside rows included, as JSON objects.
    static func dashboardPanels(_ dashboard: [String: Any]) -> [[String: Any]] {
        let top = dashboard["panels"] as? [[String: Any]] ?? []
        return top + top.flatMap { $0["panels"] as? [[String: Any]] ?? [] }
    }

    static func dashboard() throws -> [String: Any] {
        let data = Data(try text("deploy/grafana/apn-worker.json").utf8)
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// Every PromQL expression of the dashboard: its panels' targets and its variables' queries.
    static func dashboardExpressions() throws -> [String] {
        let dashboard = try dashboard()
        let targets = dashboardPanels(dashboard).flatMap { $0["targets"] as? [[String: Any]] ?? [] }.compactMap {
            $0["expr"] as? String
        }
        let variables = ((dashboard["templating"] as? [String: Any])?["list"] as? [[String: Any]] ?? []).compactMap {
            $0["definition"] as? String
        }
        return targets + variables
    }

    @Test("The metric extraction reads names, histogram suffixes and selector labels, never label values")
    func extraction() {
        let uses = Self.metricUses(
            in: #"sum by (le) (rate(apn_worker_redis_latency_seconds_bucket{instance=~"$instance"}[5m])) / "#
                + #"rate(process_cpu_seconds_total[1m]) + up{job="apn_worker_fake_total"} + x_apn_worker_in_flight"#
        )
        #expect(
            uses == [
                MetricUse(name: "apn_worker_redis_latency_seconds_bucket", labels: ["instance"]),
                MetricUse(name: "process_cpu_seconds_total", labels: []),
            ]
        )
        #expect(Self.problem(with: MetricUse(name: "apn_worker_redis_latency_seconds_bucket", labels: ["le"])) == nil)
        #expect(Self.problem(with: MetricUse(name: "apn_worker_redis_latency_seconds", labels: [])) != nil)
        #expect(Self.problem(with: MetricUse(name: "apn_worker_redis_latency_seconds_sum", labels: ["le"])) != nil)
        #expect(Self.problem(with: MetricUse(name: "apn_worker_results_produced_total_count", labels: [])) != nil)
        #expect(
            Self.problem(with: MetricUse(name: "apn_worker_notifications_total", labels: ["app", "status"])) == nil
        )
        #expect(Self.problem(with: MetricUse(name: "apn_worker_redis_up", labels: ["app"])) != nil)
        #expect(Self.problem(with: MetricUse(name: "apn_worker_nonexistent_total", labels: [])) != nil)
    }

    @Test("deploy/prometheus/alerts.yaml uses only exported metrics, with their labels")
    func alertMetrics() throws {
        let rules = try Self.alertRules()
        #expect(rules.count >= 8)
        for rule in rules {
            let name = rule["alert"]?.string ?? "?"
            let expression = try #require(rule["expr"]?.string, "\(name) has no expr")
            let uses = Self.metricUses(in: expression)
            #expect(!uses.isEmpty || expression.contains("up{"), "\(name) uses no apn-worker metric")
            for use in uses {
                if let problem = Self.problem(with: use) { Issue.record("\(name): \(problem)") }
            }
        }
    }

    @Test("deploy/grafana/apn-worker.json uses only exported metrics, and shows every one of them")
    func dashboardMetrics() throws {
        let dashboard = try Self.dashboard()
        let variables = (dashboard["templating"] as? [String: Any])?["list"] as? [[String: Any]] ?? []
        #expect(variables.contains { $0["type"] as? String == "datasource" && $0["query"] as? String == "prometheus" })
        var shown: Set<String> = []
        for expression in try Self.dashboardExpressions() {
            for use in Self.metricUses(in: expression) {
                if let problem = Self.problem(with: use) { Issue.record("\(problem) in \(expression)") }
                shown.insert(
                    use.name.replacingOccurrences(of: #"_(bucket|sum|count)$"#, with: "", options: .regularExpression)
                )
            }
        }
        let missing = MetricCatalogue.all.map(\.name).filter { !shown.contains($0) }
        #expect(missing.isEmpty, "not on the dashboard: \(missing)")
        // Every panel that queries asks the data source variable.
        for panel in Self.dashboardPanels(dashboard) where panel["targets"] != nil {
            #expect(
                (panel["datasource"] as? [String: Any])?["uid"] as? String == "${datasource}",
                "\(panel["title"] ?? "?")"
            )
        }
    }

    // MARK: Runbooks and docs/operations.md

    /// The anchors GitHub gives the headings of a Markdown file: lowercased, punctuation other
    /// than `-` and `_` dropped, spaces turned into `-`.
    static func anchors(_ markdown: String) -> Set<String> {
        var anchors: Set<String> = []
        var inCode = false
        for line in markdown.components(separatedBy: "\n") {
            if line.hasPrefix("```") { inCode.toggle() }
            guard !inCode, let heading = line.firstMatch(of: #/^#{1,6}\s+(.+?)\s*$/#) else { continue }
            let slug = heading.output.1.lowercased().unicodeScalars.compactMap { scalar -> Character? in
                if scalar == " " { return "-" }
                if scalar == "-" || scalar == "_" || CharacterSet.alphanumerics.contains(scalar) {
                    return Character(scalar)
                }
                return nil
            }
            anchors.insert(String(slug))
        }
        return anchors
    }

    @Test("Every alert has a summary, a description and a runbook_url into a heading of docs/operations.md")
    func runbooks() throws {
        let anchors = Self.anchors(try Self.text("docs/operations.md"))
        #expect(anchors.contains("reading-status"))
        for rule in try Self.alertRules() {
            let name = try #require(rule["alert"]?.string)
            let annotations = rule["annotations"]
            #expect(annotations?["summary"]?.string?.isEmpty == false, "\(name) has no summary")
            #expect(annotations?["description"]?.string?.isEmpty == false, "\(name) has no description")
            #expect(rule["labels"]?["severity"]?.string != nil, "\(name) has no severity")
            let url = try #require(annotations?["runbook_url"]?.string, "\(name) has no runbook_url")
            let parts = url.split(separator: "#", maxSplits: 1).map(String.init)
            #expect(parts.first == "docs/operations.md", "\(name): \(url)")
            #expect(
                parts.count == 2 && anchors.contains(parts[1]),
                "\(name): no heading for \(url) in docs/operations.md"
            )
        }
    }

    @Test("docs/operations.md documents every exported metric, with its kind and labels")
    func operationsDocumentsEveryMetric() throws {
        let rows = try Self.text("docs/operations.md").components(separatedBy: "\n").filter { $0.hasPrefix("| `") }
        for metric in MetricCatalogue.all {
            let row = rows.first { $0.hasPrefix("| `\(metric.name)` |") }
            #expect(row != nil, "\(metric.name) is not in docs/operations.md's metric table")
            guard let row else { continue }
            let cells = row.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            #expect(cells.count >= 4 && cells[1] == metric.kind.rawValue, "\(metric.name): kind")
            let labels = metric.labels.isEmpty ? "—" : metric.labels.map { "`\($0)`" }.joined(separator: ", ")
            #expect(cells.count >= 4 && cells[2] == labels, "\(metric.name): labels")
        }
    }

    // MARK: promtool

    /// An executable on PATH, or at one of `alternatives`.
    static func executable(_ name: String, alternatives: [String] = []) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        let candidates = path.split(separator: ":").map { "\($0)/\(name)" } + alternatives
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    @Test("promtool accepts the rules and the compose stack's Prometheus configuration, and the rules' unit tests pass")
    func promtool() async throws {
        let promtool = try #require(
            Self.executable("promtool", alternatives: [Paths.root + "/.build/tools/promtool"]),
            "promtool is not installed (scripts/test unpacks it into .build/tools)"
        )
        let directory = Paths.root + "/deploy/prometheus"
        for arguments in [
            ["check", "rules", directory + "/alerts.yaml"], ["check", "config", directory + "/prometheus.yml"],
            ["test", "rules", directory + "/alerts.test.yaml"],
        ] {
            let result = try await run(promtool, arguments)
            #expect(
                result.status == 0,
                "promtool \(arguments.joined(separator: " ")):\n\(result.stdout)\(result.stderr)"
            )
        }
    }

    // MARK: Kubernetes

    /// The objects `kubectl kustomize deploy/k8s` renders, by kind.
    static func renderedKustomization() async throws -> [String: [Node]] {
        let directory = Paths.root + "/deploy/k8s"
        let result: (status: Int32, stdout: String, stderr: String)
        if let kubectl = executable("kubectl") {
            result = try await run(kubectl, ["kustomize", directory])
        } else {
            let kustomize = try #require(
                executable("kustomize"),
                "neither kubectl nor kustomize is installed (scripts/test installs kubernetes-client)"
            )
            result = try await run(kustomize, ["build", directory])
        }
        try #require(result.status == 0, "kustomize failed: \(result.stderr)")
        var objects: [String: [Node]] = [:]
        for document in try Yams.compose_all(yaml: result.stdout) {
            objects[document["kind"]?.string ?? "", default: []].append(document)
        }
        return objects
    }

    static func env(_ container: Node, _ name: String) -> Node? {
        container["env"]?.array().first { $0["name"]?.string == name }
    }

    @Test(
        "kubectl kustomize deploy/k8s renders the StatefulSet with its probes, Service, PodMonitor, PDB and ScaledObject"
    )
    func kustomization() async throws {
        let objects = try await Self.renderedKustomization()
        for kind in [
            "Namespace", "ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget", "PodMonitor", "ScaledObject",
            "NetworkPolicy",
        ] {
            #expect(objects[kind]?.isEmpty == false, "no \(kind)")
        }
        #expect(
            objects["HorizontalPodAutoscaler"] == nil,
            "hpa.yaml is the fallback for ScaledObject, not used with it"
        )
        for (kind, list) in objects where kind != "Namespace" {
            for object in list { #expect(object["metadata"]?["namespace"]?.string == "apn-worker", "\(kind)") }
        }

        let statefulSet = try #require(objects["StatefulSet"]?.first)
        let name = try #require(statefulSet["metadata"]?["name"]?.string)
        #expect(statefulSet["spec"]?["replicas"] == nil, "the autoscaler owns the replica count")
        let template = try #require(statefulSet["spec"]?["template"])
        let podLabels = try #require(template["metadata"]?["labels"]?.mapping)
        let annotations = template["metadata"]?["annotations"]
        #expect(annotations?["prometheus.io/scrape"]?.string == "true")
        #expect(annotations?["prometheus.io/port"]?.string == "9400")
        #expect(annotations?["prometheus.io/path"]?.string == "/metrics")
        let container = try #require(template["spec"]?["containers"]?.array().first)
        let port = try #require(container["ports"]?.array().first { $0["name"]?.string == "status" })
        #expect(port["containerPort"]?.int == 9400)
        #expect(Self.env(container, "APN_WORKER_STATUS_ADDRESS")?["value"]?.string?.hasSuffix(":9400") == true)
        for variable in ["APN_WORKER_ID", "APN_WORKER_INSTANCE_ID"] {
            #expect(
                Self.env(container, variable)?["valueFrom"]?["fieldRef"]?["fieldPath"]?.string == "metadata.name",
                "\(variable)"
            )
        }
        for (probe, path) in [("livenessProbe", "/health/live"), ("readinessProbe", "/health/ready")] {
            #expect(container[probe]?["httpGet"]?["path"]?.string == path, "\(probe)")
            #expect(container[probe]?["httpGet"]?["port"]?.string == "status", "\(probe)")
            #expect(container[probe]?["exec"] == nil, "\(probe)")
        }

        /// A selector's `matchLabels` (or a Service's plain selector) select the worker pods.
        func selectsWorkers(_ selector: Node?, _ what: String) {
            let labels = selector?["matchLabels"]?.mapping ?? selector?.mapping
            #expect(
                labels != nil && labels!.allSatisfy { podLabels[$0.key] == $0.value },
                "\(what) does not select the workers"
            )
        }
        let service = try #require(
            objects["Service"]?.first { $0["metadata"]?["name"]?.string == statefulSet["spec"]?["serviceName"]?.string }
        )
        #expect(service["spec"]?["clusterIP"]?.string == "None")
        #expect(
            service["spec"]?["ports"]?.array().contains { $0["name"]?.string == "status" && $0["port"]?.int == 9400 }
                == true
        )
        selectsWorkers(service["spec"]?["selector"], "the Service")

        let podMonitor = try #require(objects["PodMonitor"]?.first)
        #expect(podMonitor["apiVersion"]?.string == "monitoring.coreos.com/v1")
        let endpoint = try #require(podMonitor["spec"]?["podMetricsEndpoints"]?.array().first)
        #expect(endpoint["port"]?.string == "status" && endpoint["path"]?.string == "/metrics")
        selectsWorkers(podMonitor["spec"]?["selector"], "the PodMonitor")

        let budget = try #require(objects["PodDisruptionBudget"]?.first)
        #expect(budget["spec"]?["maxUnavailable"]?.int == 1)
        selectsWorkers(budget["spec"]?["selector"], "the PodDisruptionBudget")

        // The ScaledObject scales this StatefulSet on the lag of the workers' own group and topic,
        // up to the partitions the compose stack creates the topic with.
        let configMaps = objects["ConfigMap"] ?? []
        let environment = try #require(
            configMaps.first { $0["metadata"]?["name"]?.string == "apn-worker-env" }?["data"]
        )
        let fileText = try #require(
            configMaps.first { $0["metadata"]?["name"]?.string == "apn-worker-config" }?["data"]?["config.yaml"]?.string
        )
        let file = try #require(try Yams.compose(yaml: fileText))
        let scaled = try #require(objects["ScaledObject"]?.first)
        #expect(scaled["apiVersion"]?.string == "keda.sh/v1alpha1")
        let spec = try #require(scaled["spec"])
        #expect(
            spec["scaleTargetRef"]?["kind"]?.string == "StatefulSet" && spec["scaleTargetRef"]?["name"]?.string == name
        )
        let trigger = try #require(spec["triggers"]?.array().first)
        #expect(trigger["type"]?.string == "kafka")
        #expect(trigger["metadata"]?["topic"]?.string == file["kafka"]?["requestsTopic"]?.string)
        #expect(trigger["metadata"]?["consumerGroup"]?.string == file["kafka"]?["groupId"]?.string)
        #expect(
            trigger["metadata"]?["bootstrapServers"]?.string
                == environment["APN_WORKER_KAFKA_BOOTSTRAP_SERVERS"]?.string
        )
        // KEDA's trigger metadata are strings.
        #expect((trigger["metadata"]?["lagThreshold"]?.string.flatMap { Int($0) } ?? 0) > 0)
        let partitions = try Self.composePartitions()
        #expect(spec["maxReplicaCount"]?.int == partitions)
        #expect((spec["minReplicaCount"]?.int ?? 0) >= 1 && spec["minReplicaCount"]!.int! <= partitions)

        // The HPA fallback (outside the kustomization) targets the same StatefulSet and bounds.
        let hpa = try Self.yaml("deploy/k8s/hpa.yaml")
        #expect(hpa["kind"]?.string == "HorizontalPodAutoscaler")
        #expect(hpa["spec"]?["scaleTargetRef"]?["name"]?.string == name)
        #expect(hpa["spec"]?["maxReplicas"]?.int == partitions)
        #expect(hpa["spec"]?["minReplicas"]?.int == spec["minReplicaCount"]?.int)
    }

    /// The partitions deploy/docker-compose.yml creates apn.requests with.
    static func composePartitions() throws -> Int {
        let compose = try text("deploy/docker-compose.yml")
        let match = try #require(
            compose.firstMatch(of: #/--partitions (\d+)/#),
            "no --partitions in docker-compose.yml"
        )
        return Int(match.output.1)!
    }

    // MARK: Docker Compose

    @Test(
        "docker-compose.yml: Prometheus scrapes the workers' status port with the rules; Grafana (profile) gets the dashboard"
    )
    func compose() throws {
        let compose = try Self.yaml("deploy/docker-compose.yml")
        let services = try #require(compose["services"])
        /// The bind mounts of a service: target → source, relative to deploy/.
        func binds(_ service: String) -> [String: String] {
            var binds: [String: String] = [:]
            for volume in services[service]?["volumes"]?.array() ?? [] where volume["type"]?.string == "bind" {
                if let source = volume["source"]?.string, let target = volume["target"]?.string {
                    binds[target] = source
                }
            }
            return binds
        }
        func exists(_ relative: String) -> Bool {
            FileManager.default.fileExists(atPath: Paths.root + "/deploy/" + relative)
        }

        let worker = try #require(services["apn-worker"])
        let address = try #require(worker["environment"]?["APN_WORKER_STATUS_ADDRESS"]?.string)
        let port = try #require(address.split(separator: ":").last.flatMap { Int($0) })

        // Prometheus: its configuration and rules mounted side by side, scraping the worker
        // service's name on the status port.
        #expect(services["prometheus"]?["profiles"] == nil, "Prometheus runs by default")
        let prometheusBinds = binds("prometheus")
        let configSource = try #require(prometheusBinds["/etc/prometheus/prometheus.yml"])
        #expect(exists(configSource))
        let config = try Self.yaml("deploy/" + configSource.replacingOccurrences(of: "./", with: ""))
        for rules in config["rule_files"]?.array().compactMap(\.string) ?? [] {
            let source = try #require(
                prometheusBinds["/etc/prometheus/" + rules],
                "\(rules) is not mounted beside prometheus.yml"
            )
            #expect(exists(source))
        }
        #expect(config["rule_files"]?.array().isEmpty == false)
        let job = try #require(config["scrape_configs"]?.array().first { $0["job_name"]?.string == "apn-worker" })
        let discovery = try #require(job["dns_sd_configs"]?.array().first)
        #expect(discovery["names"]?.array().compactMap(\.string) == ["apn-worker"])
        #expect(discovery["port"]?.int == port)
        #expect(job["metrics_path"]?.string == "/metrics")

        // Grafana, only with its profile: provisioned data source and dashboard.
        let grafana = try #require(services["grafana"])
        #expect(grafana["profiles"]?.array().compactMap(\.string) == ["grafana"])
        let grafanaBinds = binds("grafana")
        let provisioning = try #require(grafanaBinds["/etc/grafana/provisioning"])
        let dashboardTarget = try #require(grafanaBinds.first { $0.value.hasSuffix("grafana/apn-worker.json") }?.key)
        let provider = try Self.yaml(
            "deploy/" + provisioning.replacingOccurrences(of: "./", with: "") + "/dashboards/apn-worker.yaml"
        )
        let providerPath = try #require(provider["providers"]?.array().first?["options"]?["path"]?.string)
        #expect(dashboardTarget.hasPrefix(providerPath + "/"))
        let datasources = try Self.yaml(
            "deploy/" + provisioning.replacingOccurrences(of: "./", with: "") + "/datasources/prometheus.yaml"
        )
        let datasource = try #require(datasources["datasources"]?.array().first)
        #expect(datasource["type"]?.string == "prometheus")
        #expect(datasource["url"]?.string?.contains("prometheus:9090") == true)
    }
}
