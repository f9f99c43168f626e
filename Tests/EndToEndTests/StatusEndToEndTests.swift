import APNSCore
import Foundation
import PushLocalStack
import PushStatus
import PushTestSupport
import Testing

/// A running worker's status server, scraped over HTTP as Prometheus and Kubernetes do.
@Suite("Status server end to end", .serialized, .timeLimit(.minutes(4)))
struct StatusEndToEndTests {
    /// The sum of every series of `name` whose labels include `matching`.
    static func total(_ name: String, _ matching: [String: String] = [:], in text: String) -> Double {
        MetricSamples(parsing: text).total(name, matching)
    }

    @Test("After N jobs the worker's counters equal the results read back from apn.results, per outcome and status")
    func countersMatchResults() async throws {
        let bad = Set((0..<600).filter { $0 % 50 == 7 }.map { DeviceToken.numbered($0) })
        let stack = try await WorkerStack.start(badTokens: bad)
        do {
            try await stack.startWorker("w1")
            let server = try #require(stack.statusServers["w1"])
            var messages = (0..<600).map { WorkerStack.job(id: "metrics-\($0)", tokens: [.numbered($0)]) }
            messages += (0..<20).map { _ in Array("{not json".utf8) }
            messages += (0..<10).map {
                Array(#"{"id":"bad-\#($0)","app":"\#(WorkerStack.app)","token":"12zz","alert":"x"}"#.utf8)
            }
            // 1,000 scrapes, 10 connections at a time, while the jobs are delivered. One address
            // holds at most 16 of the status server's connections; beyond them, /metrics gets 503.
            async let scrapes: Int = withTaskGroup(of: Int.self) { group in
                for _ in 0..<10 {
                    group.addTask {
                        var answered = 0
                        for _ in 0..<100 where (try? await server.get("/metrics"))?.status == .ok { answered += 1 }
                        return answered
                    }
                }
                return await group.reduce(0, +)
            }
            try await stack.produce(messages)
            let results = try await stack.readResults { $0.count >= messages.count }
            #expect(await scrapes == 1000)
            #expect(results.count == messages.count)

            var expected: [String: Int] = [:]
            for result in results {
                expected[
                    "\(result["type"]?.stringValue ?? "")/\(result["statusName"]?.stringValue ?? "")",
                    default: 0
                ] += 1
            }
            #expect(expected["transmitted/"] == 600 - bad.count)
            #expect(expected["transmissionError/invalidToken"] == bad.count)
            // The counters are raised once a batch is acknowledged, just after its results can be read.
            var scraped = ""
            let agree = await eventually("the counters agreeing with the results", within: .seconds(10)) {
                scraped = (try? await server.get("/metrics").text) ?? ""
                return expected.allSatisfy { key, count in
                    let parts = key.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
                    return Self.total(
                        "apn_worker_notifications_total",
                        ["type": parts[0], "status": parts[1]],
                        in: scraped
                    )
                        == Double(count)
                } && Self.total("apn_worker_notifications_total", in: scraped) == Double(results.count)
            }
            #expect(
                agree,
                "results \(expected); metrics:\n\(scraped.split(separator: "\n").filter { $0.contains("notifications_total") })"
            )
            #expect(Self.total("apn_worker_results_produced_total", in: scraped) == Double(results.count))
            #expect(Self.total("apn_worker_invalid_jobs_total", in: scraped) == 20)
            #expect(Self.total("apn_worker_messages_consumed_total", in: scraped) == Double(messages.count))
            #expect(Self.total("apn_worker_end_to_end_latency_seconds_count", in: scraped) == 600)
            #expect(
                Self.total(
                    "apn_worker_notifications_total",
                    ["app": WorkerStack.app, "env": "production", "transport": "binary"],
                    in: scraped
                )
                    == 610
            )
            #expect(Self.total("apn_worker_assigned_partitions", in: scraped) == 12)
            #expect(Self.total("process_resident_memory_bytes", in: scraped) > 0)
            #expect(Self.total("apn_worker_redis_round_trips_total", in: scraped) > 0)
            #expect(Self.total("apn_worker_redis_latency_seconds_count", in: scraped) > 0)
            #expect(try await stack.waitForAllCommitted())
            let committed = await eventually("an offset commit counted", within: .seconds(10)) {
                Self.total("apn_worker_offsets_committed_total", in: (try? await server.get("/metrics").text) ?? "") > 0
            }
            #expect(committed)
            // The pool, read at scrape time.
            let binary = ["app": WorkerStack.app, "env": "production", "transport": "binary"]
            #expect(Self.total("apn_worker_delivery_attempts_total", binary, in: scraped) >= 600)
            // Whether anything was retransmitted depends on where the bad tokens fell in the
            // connections' windows; the pool's series is exported either way.
            #expect(
                MetricSamples(parsing: scraped).samples.contains { sample in
                    sample.name == "apn_worker_retransmissions_total"
                        && binary.allSatisfy { sample.labels[$0.key] == $0.value }
                },
                "no apn_worker_retransmissions_total series for the binary pool"
            )
            #expect(Self.total("apn_worker_connections_opened_total", binary, in: scraped) >= 1)
            #expect(
                Self.total(
                    "apn_worker_connections_closed_total",
                    binary.merging(["reason": "errorResponse"]) { $1 },
                    in: scraped
                )
                    == Double(bad.count)
            )
            #expect(
                Self.total("apn_worker_pool_connections", binary.merging(["state": "open"]) { $1 }, in: scraped) >= 1
            )
            #expect(Self.total("apn_worker_delivery_latency_seconds_count", binary, in: scraped) == 600)
            let status = try await server.status()
            #expect(status.worker == "w1" && status.ready && status.partitions.count == 12 && status.redis.state == .up)
            #expect(
                status.pools.count == 1 && status.pools.first?.transport == "binary"
                    && (status.pools.first?.open ?? 0) >= 1
            )
            #expect(status.pools.first?.cachedNotifications != nil && status.pools.first?.streamsInUse == nil)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test(
        "Redis killed: readiness 503 within 5 s and lag rises to what was produced; Redis back: 200 and lag 0; liveness 200 throughout; SIGTERM: 503 before the worker is gone"
    )
    func readinessLivenessAndLag() async throws {
        let stack = try await WorkerStack.start()
        do {
            try await stack.startWorker("w1", environment: ["APN_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "3"])
            let server = try #require(stack.statusServers["w1"])
            func ready() async -> (Int, String)? {
                guard let response = try? await server.get("/health/ready") else { return nil }
                return (Int(response.status.code), response.text)
            }
            func live() async -> Int? { (try? await server.get("/health/live")).map { Int($0.status.code) } }
            func lag() async -> Double {
                Self.total("apn_worker_consumer_lag", in: (try? await server.get("/metrics").text) ?? "")
            }
            await eventually("ready", within: .seconds(30)) { await ready()?.0 == 200 }
            try await stack.produce((0..<200).map { WorkerStack.job(id: "before-\($0)", tokens: [.numbered($0)]) })
            try await stack.readResults { $0.count >= 200 }
            #expect(try await stack.waitForAllCommitted())
            await eventually("the lag at 0", within: .seconds(10)) { await lag() == 0 }

            // No time is promised for the change (docs/operations.md: 503 "while Redis does not
            // answer"); the deadlines leave room for a loaded machine.
            await stack.redis.stop()
            await eventually("not ready while Redis is down", within: .seconds(15)) { await ready()?.0 == 503 }
            let body = await ready()?.1
            #expect(body == #"{"ready":false,"reason":"redis unreachable"}"# + "\n", "\(body ?? "no answer")")
            #expect(await live() == 200)
            try await stack.produce(
                (0..<300).map { WorkerStack.job(id: "during-\($0)", tokens: [.numbered(1000 + $0)]) }
            )
            let lagRose = await eventually("the lag at 300", within: .seconds(20)) { await lag() == 300 }
            #expect(lagRose)
            #expect(await live() == 200)

            try await stack.redis.start()
            await eventually("ready again once Redis is back", within: .seconds(15)) { await ready()?.0 == 200 }
            try await stack.readResults(timeout: .seconds(60)) { $0.count >= 500 }
            let lagFell = await eventually("the lag back to 0", within: .seconds(20)) { await lag() == 0 }
            #expect(lagFell)
            #expect(await live() == 200)

            // SIGTERM with notifications in flight: readiness answers 503 while the worker
            // drains (delivers, writes results, commits, leaves the group); the status server is
            // the last service to stop. Kafka goes away once Apple has the notifications, so the
            // drain cannot write their results and lasts its bound (shutdownTimeoutSeconds, 3 s
            // here): long enough to be seen on a loaded machine, where a drain that finishes at
            // once can end between two answers.
            try await stack.produce(
                (0..<200).map { WorkerStack.job(id: "after-\($0)", tokens: [.numbered(2000 + $0)]) }
            )
            let accepted = await eventually("the 200 sent to Apple", within: .seconds(30)) {
                (2000..<2200).allSatisfy { stack.acceptedByToken[.numbered($0), default: 0] > 0 }
            }
            #expect(accepted)
            try stack.kafka.setBrokerDown(1)
            let process = try #require(stack.workers["w1"])
            process.signal(SIGTERM)
            // A request that gets no answer (a loaded machine) is asked again while the worker
            // runs; once it has exited, no answer can come.
            var sawShuttingDown = false
            let deadline = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < deadline {
                if let (code, body) = await ready() {
                    if code == 503 && body.contains("shutting down") {
                        sawShuttingDown = true
                        break
                    }
                } else if !process.isRunning {
                    break
                }
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(sawShuttingDown)
            #expect(await stack.stopWorker("w1") == 0)
            #expect(stack.fullLog(of: "w1").contains("Worker stopped"))
            try stack.kafka.setBrokerUp(1)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test(
        "/metrics has the binary app's certificate notAfter, and once the HTTP/2 app delivers, the iat of its accepted provider token"
    )
    func credentialTimes() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        do {
            let started = Date().timeIntervalSince1970.rounded(.down)
            try await stack.startWorker("w1")
            let server = try #require(stack.statusServers["w1"])
            let certificate = try APNSCredentials(
                certificate: .file(stack.directory + "/certs/client.pem"),
                key: .file(stack.directory + "/certs/client-key.pem"),
                environment: .production
            )
            let expiry = "apn_worker_credential_expiry_timestamp_seconds"
            let refreshed = "apn_worker_provider_token_refreshed_timestamp_seconds"
            let binary = ["app": WorkerStack.app, "env": "production"]
            let http2 = ["app": WorkerStack.http2App, "env": "production"]
            // Before any notification: the certificate's end, and no provider token yet.
            let before = try await server.get("/metrics").text
            #expect(
                MetricSamples(parsing: before).samples.filter { $0.name == expiry }.map(\.labels) == [
                    binary.merging(["kind": "certificate"]) { $1 }
                ]
            )
            #expect(Self.total(expiry, binary, in: before) == certificate.notValidAfter.timeIntervalSince1970)
            #expect(!before.contains(refreshed))

            let job = WorkerStack.job(id: "h2-token", tokens: [.numbered(1)], app: WorkerStack.http2App)
            try await stack.produce([job])
            let results = try await stack.readResults { $0.count >= 1 }
            #expect(results.first?["type"]?.stringValue == "transmitted")
            var scraped = ""
            let shown = await eventually("the refreshed provider token in the metrics", within: .seconds(10)) {
                scraped = (try? await server.get("/metrics").text) ?? ""
                return scraped.contains(refreshed)
            }
            #expect(shown)
            let issuedAt = Self.total(refreshed, http2, in: scraped)
            #expect(issuedAt >= started - 1 && issuedAt <= Date().timeIntervalSince1970, "\(issuedAt)")
            #expect(Self.total(expiry, binary, in: scraped) == certificate.notValidAfter.timeIntervalSince1970)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("A status port that is taken stops the worker with exit code 1 and a sentence naming the address")
    func takenStatusPortStopsTheWorker() async throws {
        let stack = try await WorkerStack.start()
        let taken = try RefusingPort()
        let process = try ChildProcess(
            Paths.executable,
            ["run", "--config", stack.configPath, "--status-address", "127.0.0.1:\(taken.port)"],
            stderrFile: "\(stack.directory)/taken.log"
        )
        let result = await process.finish()
        let log = (try? String(contentsOfFile: "\(stack.directory)/taken.log", encoding: .utf8)) ?? ""
        #expect(result.status == 1)
        #expect(!result.stdout.contains("\"ready\""))
        #expect(log.contains("127.0.0.1:\(taken.port)"), "\(log.suffix(2000))")
        await stack.shutdown()
    }
}
