import APNSCore
import Foundation
import PushLocalStack
import PushTestSupport
import Testing

/// The monitoring files against a real Prometheus: it scrapes two workers of the embedded stack
/// with deploy/prometheus/alerts.yaml loaded, and its HTTP API is asked what it sees.
@Suite("Prometheus end to end", .serialized, .timeLimit(.minutes(4)))
struct PrometheusEndToEndTests {
    /// The alert whose `for` is shortened, so that it fires within the test.
    static let redisAlert = "ApnWorkerRedisUnreachable"

    /// The text of deploy/prometheus/alerts.yaml with the `for:` of `alert` set to `duration`;
    /// every other line, the alert's expression included, as it is. Nil when the alert has no
    /// `for:`.
    static func rules(_ text: String, shortening alert: String, to duration: String) -> String? {
        var lines = text.components(separatedBy: "\n")
        guard let start = lines.firstIndex(where: { $0.trimmingCharacters(in: .whitespaces) == "- alert: \(alert)" })
        else { return nil }
        var index = start + 1
        while index < lines.count, !lines[index].trimmingCharacters(in: .whitespaces).hasPrefix("- alert:") {
            let line = lines[index]
            let trimmed = line.drop { $0 == " " }
            if trimmed.hasPrefix("for:") {
                lines[index] = String(line.prefix(line.count - trimmed.count)) + "for: \(duration)"
                return lines.joined(separator: "\n")
            }
            index += 1
        }
        return nil
    }

    /// Polls `body` every 100 ms until it returns true or `timeout` passes; returns whether it did.
    @Test(
        "Prometheus scrapes two workers: both targets up, every rule healthy, results counted as read from apn.results, lag back to 0, ApnWorkerRedisUnreachable firing while redis-server is stopped"
    )
    func prometheusScrapesTwoWorkers() async throws {
        let executable = try #require(
            PrometheusServer.executable,
            "prometheus is not installed: scripts/test unpacks it from Debian's prometheus package into .build/tools (scripts/lib/common.sh, ensure_prometheus_tools)"
        )
        let alertsFile = try String(contentsOfFile: Paths.root + "/deploy/prometheus/alerts.yaml", encoding: .utf8)
        let alertNames = alertsFile.components(separatedBy: "\n").compactMap { line -> String? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            return trimmed.hasPrefix("- alert: ") ? String(trimmed.dropFirst("- alert: ".count)) : nil
        }
        let testRules = try #require(
            Self.rules(alertsFile, shortening: Self.redisAlert, to: "2s"),
            "deploy/prometheus/alerts.yaml has no \(Self.redisAlert) with a `for:`"
        )

        let bad = Set((0..<1000).filter { $0 % 50 == 7 }.map { DeviceToken.numbered($0) })
        let stack = try await WorkerStack.start(badTokens: bad)
        var prometheus: PrometheusServer?
        do {
            try await stack.startWorker("w1")
            try await stack.startWorker("w2")
            let instances = Set(try ["w1", "w2"].map { try #require(stack.statusServers[$0]).address })

            let directory = stack.directory + "/prometheus"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let ruleFile = directory + "/alerts.yaml"
            try testRules.write(toFile: ruleFile, atomically: true, encoding: .utf8)
            let server = try await PrometheusServer.start(
                executable: executable,
                configuration: PrometheusServer.configuration(
                    targets: instances.sorted(),
                    ruleFile: ruleFile,
                    scrapeInterval: "500ms",
                    evaluationInterval: "1s"
                ),
                directory: directory
            )
            prometheus = server

            // Both targets up, as the targets API and the `up` series say.
            var targets: [PrometheusServer.Target] = []
            let up = await eventually("both targets up", within: .seconds(20)) {
                targets = (try? await server.targets()) ?? []
                return Set(targets.map { $0.labels["instance"] ?? "" }) == instances
                    && targets.allSatisfy { $0.health == "up" && $0.scrapePool == PrometheusServer.job }
            }
            #expect(up, "targets: \(targets.map { "\($0.scrapeUrl) \($0.health) \($0.lastError)" })")
            #expect(await server.value(#"sum(up{job="\#(PrometheusServer.job)"})"#) == 2)

            // Every rule of alerts.yaml loaded and evaluated without error, and none firing once
            // both workers are up (one still joining the group may hold an alert pending briefly).
            var rules: [PrometheusServer.Rule] = []
            let healthy = await eventually("every rule healthy and inactive", within: .seconds(30)) {
                rules = (try? await server.rules()) ?? []
                return rules.count == alertNames.count
                    && rules.allSatisfy { $0.health == "ok" && $0.state == "inactive" }
            }
            #expect(
                healthy,
                "rules: \(rules.map { "\($0.name) \($0.health) \($0.state ?? "") \($0.lastError ?? "")" }); expected \(alertNames)"
            )
            #expect(rules.map(\.name) == alertNames)
            #expect(rules.allSatisfy { $0.type == "alerting" && $0.state == "inactive" })
            #expect(rules.first { $0.name == Self.redisAlert }?.duration == 2)

            // Both workers consuming, each with its share of the 12 partitions.
            let assigned = await eventually("the 12 partitions assigned over both workers", within: .seconds(30)) {
                let perWorker = (try? await server.query("sum by (instance) (apn_worker_assigned_partitions)")) ?? []
                return Set(perWorker.map { $0.metric["instance"] ?? "" }) == instances
                    && perWorker.allSatisfy { $0.value > 0 } && perWorker.map(\.value).reduce(0, +) == 12
            }
            #expect(assigned, "the workers did not share the 12 partitions")

            // redis-server stopped: the alert fires for both workers once its `for` has passed,
            // and the jobs produced meanwhile wait, as the lag says.
            await stack.redis.stop()
            var alerts: [PrometheusServer.Alert] = []
            func firing() -> Set<String> {
                Set(
                    alerts.filter { $0.labels["alertname"] == Self.redisAlert && $0.state == "firing" }
                        .map { $0.labels["instance"] ?? "" }
                )
            }
            let fired = await eventually("ApnWorkerRedisUnreachable firing for both", within: .seconds(30)) {
                alerts = (try? await server.alerts()) ?? []
                return firing() == instances
            }
            #expect(fired, "alerts: \(alerts.map { "\($0.labels) \($0.state)" })")
            #expect(await server.value("sum(apn_worker_redis_up)") == 0)

            var messages = (0..<1000).map { WorkerStack.job(id: "prometheus-\($0)", tokens: [.numbered($0)]) }
            messages += (0..<10).map { _ in Array("{not json".utf8) }
            try await stack.produce(messages)
            let lag = "sum(max by (topic, partition) (apn_worker_consumer_lag))"
            var lastLag: Double?
            let lagRose = await eventually("the lag at the messages waiting", within: .seconds(20)) {
                lastLag = await server.value(lag)
                return lastLag == Double(messages.count)
            }
            #expect(lagRose, "lag \(lastLag.map { "\($0)" } ?? "none") with \(messages.count) messages waiting")

            // redis-server back: the alert resolves, every message gets its result, and the
            // workers' counters, scraped by Prometheus, agree with the results read back.
            try await stack.redis.start()
            let resolved = await eventually("the alerts resolved", within: .seconds(30)) {
                alerts = (try? await server.alerts()) ?? []
                return firing().isEmpty && !alerts.contains { $0.labels["alertname"] == Self.redisAlert }
            }
            #expect(resolved, "alerts: \(alerts.map { "\($0.labels) \($0.state)" })")
            let results = try await stack.readResults(timeout: .seconds(60)) { $0.count >= messages.count }
            #expect(results.count == messages.count)
            #expect(Set(results.compactMap { $0["resultId"]?.stringValue }).count == messages.count)
            #expect(try await stack.waitForAllCommitted())

            var produced: [PrometheusServer.Sample] = []
            var readBack = 0
            let counted = await eventually("the results produced counted as read back", within: .seconds(20)) {
                // A result written late (a second copy) would be counted by the workers too.
                readBack = (try? await stack.readAllResults(timeout: .seconds(5)))?.count ?? readBack
                produced = (try? await server.query("sum by (instance) (apn_worker_results_produced_total)")) ?? []
                return Set(produced.map { $0.metric["instance"] ?? "" }) == instances
                    && produced.map(\.value).reduce(0, +) == Double(readBack)
            }
            #expect(
                counted,
                "apn_worker_results_produced_total by instance \(produced.map { "\($0.metric) \($0.value)" }); \(readBack) results read from apn.results"
            )
            #expect(await server.value("sum(apn_worker_results_produced_total)") == Double(readBack))
            #expect(produced.allSatisfy { $0.value > 0 }, "each worker produced results")
            lastLag = nil
            let lagFell = await eventually("the lag back to 0", within: .seconds(20)) {
                lastLag = await server.value(lag)
                return lastLag == 0
            }
            #expect(lagFell, "lag \(lastLag.map { "\($0)" } ?? "none") after every result was read")
            #expect((try? await server.query("apn_worker_consumer_lag"))?.isEmpty == false)
        } catch {
            Issue.record(
                "\(error)\nprometheus: \(prometheus?.log ?? "(not started)")\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))"
            )
        }
        await prometheus?.stop()
        await stack.shutdown()
    }
}
