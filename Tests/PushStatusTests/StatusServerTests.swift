import CoreMetrics
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import PushStatus
import ServiceLifecycle
import ServiceLifecycleTestKit
import Testing

@Suite("StatusServer: routes over real HTTP")
struct StatusServerRouteTests {
    @Test func metricsEmitsTheRegistryWithThePrometheusContentType() async throws {
        let registry = PrometheusCollectorRegistry()
        let counter = registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "apn_worker",
                metricName: "results_produced",
                unitName: "total",
                helpText: "Result messages produced."
            )
        )
        counter.increment(by: Int64(3))
        // The swift-metrics path the worker uses: a PrometheusMetricsFactory over the same registry.
        let factory = PrometheusMetricsFactory(registry: registry)
        CoreMetrics.Counter(
            label: "apn_worker_messages_consumed_total",
            dimensions: [("app", "com.example")],
            factory: factory
        )
        .increment(by: 5)
        let scrapes = CallCounter()
        try await withStatusServer(registry: registry, beforeScrape: { scrapes.increment() }) { _, client in
            let response = try await client.get("/metrics")
            #expect(response.status == .ok)
            #expect(response.headers.first(name: "Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
            #expect(response.text == registry.emitToString())
            #expect(response.text.contains("# TYPE apn_worker_results_produced_total counter\n"))
            #expect(response.text.contains("\napn_worker_results_produced_total 3\n"))
            #expect(response.text.contains("apn_worker_messages_consumed_total{app=\"com.example\"} 5\n"))
            #expect(scrapes.value == 1)

            counter.increment()
            let again = try await client.get("/metrics?ignored=query")
            #expect(again.text.contains("\napn_worker_results_produced_total 4\n"))
            #expect(scrapes.value == 2)
        }
    }

    @Test func livenessAnswers200WhileOKAnd503WithTheReason() async throws {
        let provider = FakeStatusProvider()
        try await withStatusServer(provider: provider) { _, client in
            let live = try await client.get("/health/live")
            #expect(live.status == .ok)
            #expect(live.headers.first(name: "Content-Type") == "application/json")
            #expect(live.text == "{\"live\":true}\n")

            provider.state.withLock { $0.liveness = .failing(reason: "result writer stuck for 61 s") }
            let stuck = try await client.get("/health/live")
            #expect(stuck.status == .serviceUnavailable)
            #expect(stuck.headers.first(name: "Content-Type") == "application/json")
            #expect(stuck.text == "{\"live\":false,\"reason\":\"result writer stuck for 61 s\"}\n")
        }
    }

    @Test func readinessAnswers200WhileOKAnd503WithAOneLineJSONReason() async throws {
        let provider = FakeStatusProvider()
        try await withStatusServer(provider: provider) { _, client in
            let ready = try await client.get("/health/ready")
            #expect(ready.status == .ok)
            #expect(ready.text == "{\"ready\":true}\n")

            provider.state.withLock { $0.readiness = .failing(reason: "redis unreachable") }
            let down = try await client.get("/health/ready")
            #expect(down.status == .serviceUnavailable)
            #expect(down.headers.first(name: "Content-Type") == "application/json")
            #expect(down.text == "{\"ready\":false,\"reason\":\"redis unreachable\"}\n")

            // A reason with a line break and quotes is still one line of valid JSON.
            provider.state.withLock { $0.readiness = .failing(reason: "shutting \"down\"\nnow") }
            let odd = try await client.get("/health/ready")
            #expect(odd.text.split(separator: "\n").count == 1)
            let decoded = try JSONSerialization.jsonObject(with: Data(odd.text.utf8)) as? [String: Any]
            #expect(decoded?["reason"] as? String == "shutting \"down\"\nnow")
        }
    }

    @Test func statusIsTheProvidersWorkerStatusAsJSON() async throws {
        let provider = FakeStatusProvider()
        try await withStatusServer(provider: provider) { _, client in
            let response = try await client.get("/status")
            #expect(response.status == .ok)
            #expect(response.headers.first(name: "Content-Type") == "application/json")
            #expect(try JSONDecoder().decode(WorkerStatus.self, from: Data(response.text.utf8)) == WorkerStatus.sample)
            // Keys a script reads, with null for values not known.
            #expect(response.text.contains("\"readyReason\":\"redis unreachable\""))
            #expect(response.text.contains("\"redis\":{\"state\":\"down\"}"))
            #expect(response.text.contains("{\"lag\":null,\"partition\":1,\"topic\":\"apn.requests\"}"))
            #expect(response.text.contains("\"streamsInUse\":null"))
            #expect(try await client.status() == WorkerStatus.sample)
        }
    }

    @Test func unknownPathsAre404AndOtherMethods405() async throws {
        try await withStatusServer { _, client in
            let missing = try await client.get("/nope")
            #expect(missing.status == .notFound)
            #expect(missing.headers.first(name: "Content-Type") == "text/plain; charset=utf-8")
            #expect(missing.text.contains("/metrics"))

            let post = try await client.withConnection { try await $0.get("/metrics", method: .POST) }
            #expect(post.status == .methodNotAllowed)
            #expect(post.headers.first(name: "Allow") == "GET, HEAD")
            let delete = try await client.withConnection { try await $0.get("/status", method: .DELETE) }
            #expect(delete.status == .methodNotAllowed)
        }
    }

    @Test func headAnswersLikeGetWithoutABody() async throws {
        try await withStatusServer { _, client in
            let response = try await client.withConnection { connection in
                let head = try await connection.get("/health/live", method: .HEAD)
                // The same connection still serves the next request: nothing of a body was left.
                let get = try await connection.get("/health/live")
                return (head, get)
            }
            #expect(response.0.status == .ok)
            #expect(response.0.body.readableBytes == 0)
            #expect(response.0.headers.first(name: "Content-Length") == String(response.1.body.readableBytes))
            #expect(response.1.text == "{\"live\":true}\n")
        }
    }

    @Test func keepAliveServesManyRequestsOnOneConnectionAndConnectionCloseIsHonoured() async throws {
        try await withStatusServer { _, client in
            let statuses = try await client.withConnection { connection in
                var statuses: [UInt] = []
                for path in ["/metrics", "/health/live", "/health/ready", "/status", "/metrics"] {
                    let response = try await connection.get(path)
                    #expect(response.headers.first(name: "Connection") == nil)
                    statuses.append(response.status.code)
                }
                let last = try await connection.get("/health/live", keepAlive: false)
                #expect(last.headers.first(name: "Connection") == "close")
                return statuses
            }
            #expect(statuses == [200, 200, 200, 200, 200])

            // HTTP/1.0 without keep-alive: answered, then closed by the server.
            let outcome = try await RawConnection.exchange(
                port: client.port,
                chunks: ["GET /health/live HTTP/1.0\r\n\r\n".bytes]
            )
            #expect(outcome.received.hasPrefix("HTTP/1.0 200 OK\r\n"))
            #expect(outcome.received.hasSuffix("{\"live\":true}\n"))
        }
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        try await withStatusServer { _, client in
            let requests =
                "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                + "GET /health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            let outcome = try await RawConnection.exchange(port: client.port, chunks: [requests.bytes])
            // Head lines end in CR LF and bodies in LF: split on both.
            let statusLines = outcome.received.split(whereSeparator: \.isNewline).filter { $0.hasPrefix("HTTP/1.1 ") }
            #expect(statusLines == ["HTTP/1.1 200 OK", "HTTP/1.1 404 Not Found", "HTTP/1.1 200 OK"])
        }
    }
}
