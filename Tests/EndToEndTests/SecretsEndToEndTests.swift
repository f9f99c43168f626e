import APNSCore
import APNSSimulator
import Foundation
import PushLocalStack
import PushStatus
import PushTestSupport
import PushWorker
import Testing

/// Secrets and unsafe settings as `apn-worker run` meets them: passwords in URLs and librdkafka
/// values never echoed by a failed start, a text log that a job cannot forge lines in, and an
/// app environment that does not verify Apple's certificate warned of and exported.
@Suite("Secrets end to end", .serialized, .timeLimit(.minutes(4)))
struct SecretsEndToEndTests {
    /// Runs `apn-worker` with `arguments` and `environment` (no proxy variables of the test run's).
    static func run(
        _ arguments: [String],
        environment: [String: String] = [:]
    ) async throws -> (
        status: Int32, stderr: String
    ) {
        let child = try ChildProcess(
            Paths.executable,
            arguments,
            environment: ["https_proxy": "", "HTTPS_PROXY": ""].merging(environment) { $1 }
        )
        let result = await child.finish(killAfter: .seconds(60))
        return (result.status, result.stderr)
    }

    /// A directory with a config file for one binary app whose credentials are `credentials`
    /// (placeholder files when `nil`), and `worker` settings.
    static func configDirectory(worker: String = "", credentials: TestCertificates? = nil) throws -> String {
        let directory = try Paths.temporaryDirectory()
        if let credentials {
            try credentials.write(to: directory)
        } else {
            for name in ["client.pem", "client-key.pem"] {
                _ = FileManager.default.createFile(
                    atPath: directory + "/" + name,
                    contents: Data("placeholder\n".utf8),
                    attributes: [.posixPermissions: 0o600]
                )
            }
        }
        let text = """
            worker:
              statusAddress: off
            \(worker)
            kafka: {bootstrapServers: "127.0.0.1:1"}
            redis: {url: "redis://127.0.0.1:1"}
            apps:
              com.example.app:
                environments:
                  production: {certificate: client.pem, key: client-key.pem}

            """
        _ = FileManager.default.createFile(atPath: directory + "/worker.yaml", contents: Data(text.utf8))
        return directory
    }

    @Test("A refused Redis or proxy URL stops run with one sentence that masks the password with / ? # @ whole")
    func urlPasswordsAreNotEchoed() async throws {
        let url = "redis://app:Zq9/Secret?x#y@redis.internal:notaport/0"
        for (arguments, environment) in [
            (["run", "--brokers", "127.0.0.1:9092", "--redis", url], [String: String]()),
            (["run", "--brokers", "127.0.0.1:9092"], ["APN_WORKER_REDIS_URL": url]),
        ] {
            let result = try await Self.run(arguments, environment: environment)
            #expect(result.status == 2)
            #expect(result.stderr.split(separator: "\n").count == 1, "one sentence: \(result.stderr)")
            #expect(result.stderr.contains("\"redis://app:***@redis.internal:notaport/0\""), "\(result.stderr)")
            #expect(!result.stderr.contains("Zq9") && !result.stderr.contains("Secret"), "\(result.stderr)")
        }

        let directory = try Self.configDirectory(worker: #"  proxy: "http://alice:Pw/Secret7@proxy.internal:port""#)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let proxy = try await Self.run(["run", "--config", directory + "/worker.yaml"])
        #expect(proxy.status == 2)
        #expect(proxy.stderr.contains("\"http://alice:***@proxy.internal:port\""), "\(proxy.stderr)")
        #expect(!proxy.stderr.contains("Secret7"), "\(proxy.stderr)")
    }

    @Test("A misspelt sasl.password, from a flag or a file, stops run naming the property without its value")
    func kafkaPropertyValuesAreNotEchoed() async throws {
        let directory = try Self.configDirectory(credentials: try TestCertificates())
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let secretFile = directory + "/kafka-password"
        _ = FileManager.default.createFile(
            atPath: secretFile,
            contents: Data("Hunter2-FileSecret\n".utf8),
            attributes: [.posixPermissions: 0o600]
        )
        let config = ["run", "--config", directory + "/worker.yaml"]
        for arguments in [
            config + ["--kafka-property", "sasl.pasword=Hunter2-FlagSecret"],
            config + ["--kafka-property-file", "sasl.pasword=\(secretFile)"],
        ] {
            let result = try await Self.run(arguments)
            #expect(result.status != 0, "\(result.stderr)")
            #expect(result.stderr.contains("'sasl.pasword'"), "\(result.stderr)")
            #expect(!result.stderr.contains("Hunter2"), "\(result.stderr)")
        }
        let variable = try await Self.run(
            config,
            environment: ["APN_WORKER_KAFKA_PROPERTY_SASL_PASWORD": "Hunter2-Env"]
        )
        #expect(
            variable.stderr.contains("'sasl.pasword'") && !variable.stderr.contains("Hunter2"),
            "\(variable.stderr)"
        )
    }

    @Test("logFormat text: a job id with a line break gives one log line, with the break escaped")
    func textLogEscapesJobIds() async throws {
        let stack = try await WorkerStack.start()
        do {
            try await stack.startWorker("w1", environment: ["APN_WORKER_LOG_FORMAT": "text"])
            // In the job's JSON, \\n is a line break in its id; the app is not configured, so the
            // job is rejected with a warning that names it.
            let token = DeviceToken.numbered(1)
            let forged = "2026-01-01T00:00:00.000Z critical apn-worker: [PushWorker] FORGED by a job"
            let jobId = "evil\n" + forged
            let json = #"{"id":"evil\n\#(forged)","app":"com.example.unknown","token":"\#(token.hex)","alert":"x"}"#
            try await stack.produce([Array(json.utf8)])
            let resultId = WorkerResult.notificationId(jobId: jobId, token: token.hex)
            try await stack.readResults(timeout: .seconds(60)) {
                $0.contains { $0["resultId"]?.stringValue == resultId }
            }
            let lines = stack.fullLog(of: "w1").split(separator: "\n")
            let forging = lines.filter { $0.contains("FORGED by a job") }
            #expect(forging.count == 1, "\(forging)")
            #expect(
                forging.first?.contains(#"Rejected job evil\n2026-01-01T00:00:00.000Z critical"#) == true,
                "\(forging)"
            )
            #expect(!lines.contains { $0.hasPrefix("2026-01-01T00:00:00.000Z critical") })
            #expect(lines.contains { $0.contains(" warning apn-worker: ") }, "not text lines: \(lines.prefix(3))")
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("verifyServer false: a warning at start and at the pool's opening, and apn_worker_insecure_tls at 1")
    func unverifiedGatewayIsWarnedOfAndExported() async throws {
        let stack = try await WorkerStack.start()
        do {
            // The binary app's production environment stops verifying the simulator's certificate.
            let config = try String(contentsOfFile: stack.configPath, encoding: .utf8)
            let caLine = "        ca: \(stack.directory)/certs/ca.pem\n"
            #expect(config.contains(caLine))
            try config.replacingOccurrences(of: caLine, with: caLine + "        verifyServer: false\n")
                .write(toFile: stack.configPath, atomically: false, encoding: .utf8)
            try await stack.startWorker("w1")
            let token = DeviceToken.numbered(2)
            try await stack.produce([WorkerStack.job(id: "insecure-1", tokens: [token])])
            let resultId = WorkerResult.notificationId(jobId: "insecure-1", token: token.hex)
            let results = try await stack.readResults(timeout: .seconds(60)) {
                $0.contains { $0["resultId"]?.stringValue == resultId }
            }
            #expect(results.first { $0["resultId"]?.stringValue == resultId }?["type"] == "transmitted")
            let warning = "apps.\(WorkerStack.app).environments.production.verifyServer is false: "
            let warnings = stack.fullLog(of: "w1").split(separator: "\n").compactMap {
                (try? JSONValue.parse(String($0)))?.objectValue
            }.filter { $0["level"] == "warning" && $0["message"]?.stringValue?.hasPrefix(warning) == true }
            #expect(warnings.count == 2, "the start's and the pool's: \(warnings)")
            #expect(warnings.contains { $0["gateway"] != nil && $0["app"]?.stringValue == WorkerStack.app })
            let server = try #require(stack.statusServers["w1"])
            let samples = MetricSamples(parsing: try await server.get("/metrics").text)
            #expect(samples.total("apn_worker_insecure_tls", ["app": WorkerStack.app, "env": "production"]) == 1)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}
