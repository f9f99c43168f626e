import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// Per-app settings through `apn-worker run`, the embedded Kafka, redis-server and both
/// simulators: `mdmTopic`, `defaultExpiry`, credentials from the config file's text and from
/// environment variables, and the connection settings.
@Suite("Config features end to end", .serialized, .timeLimit(.minutes(3)))
struct ConfigFeaturesEndToEndTests {
    static let binaryApp = WorkerStack.app
    static let http2App = WorkerStack.http2App

    static func job(_ id: String, app: String, token: DeviceToken, _ fields: String) -> [UInt8] {
        Array(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token.hex)",\#(fields)}"#.utf8)
    }

    /// Reads results until every id in `ids` has one; returns them by result id.
    static func results(
        _ stack: WorkerStack,
        for ids: [(String, DeviceToken)]
    ) async throws -> [String: [String: JSONValue]] {
        let wanted = Set(ids.map { WorkerResult.notificationId(jobId: $0.0, token: $0.1.hex) })
        try await stack.readResults(timeout: .seconds(60)) { results in
            wanted.isSubset(of: Set(results.compactMap { $0["resultId"]?.stringValue }))
        }
        var byJob: [String: [String: JSONValue]] = [:]
        for (job, token) in ids {
            byJob[job] = stack.resultsById[WorkerResult.notificationId(jobId: job, token: token.hex)]
        }
        return byJob
    }

    @Test(
        "An MDM job goes out on the binary transport, and on HTTP/2 with the app's mdmTopic; without one it is invalid (517)"
    )
    func mdmOnBothTransports() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        do {
            try stack.copyApp(Self.http2App, as: "com.example.h2-no-mdm")
            try stack.addSettings(["mdmTopic: com.apple.mgmt.External.e2e-1"], app: Self.http2App)
            try await stack.startWorker("w1")
            let binary = DeviceToken.numbered(1), http2 = DeviceToken.numbered(2), missing = DeviceToken.numbered(3)
            let magic = #""mdm":"3F2504E0-4F89-11D3-9A0C-0305E82C3301""#
            try await stack.produce([
                Self.job("mdm-binary", app: Self.binaryApp, token: binary, magic),
                Self.job("mdm-http2", app: Self.http2App, token: http2, magic),
                Self.job("mdm-no-topic", app: "com.example.h2-no-mdm", token: missing, magic),
            ])
            let results = try await Self.results(
                stack,
                for: [("mdm-binary", binary), ("mdm-http2", http2), ("mdm-no-topic", missing)]
            )
            #expect(results["mdm-binary"]?["type"] == "transmitted")
            #expect(stack.simulator.acceptedByToken[binary] == 1)
            #expect(results["mdm-http2"]?["type"] == "transmitted")
            let accepted = try #require(stack.http2Simulator?.accepted.first { $0.token == http2 })
            #expect(accepted.topic == "com.apple.mgmt.External.e2e-1")
            #expect(accepted.pushType == "mdm")
            let refused = try #require(results["mdm-no-topic"])
            #expect(refused["type"] == "transmissionError")
            #expect(refused["status"] == .int(517))
            #expect(
                refused["reason"]?.stringValue?.contains(
                    "set apps.com.example.h2-no-mdm.mdmTopic to the topic of the MDM push certificate"
                )
                    == true
            )
            #expect(stack.http2Simulator?.acceptedByToken[missing] == nil)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("A job without expiry gets its app's defaultExpiry on both transports; a job's own expiry wins")
    func defaultExpiryOnBothTransports() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        do {
            try stack.addSettings(["defaultExpiry: 1d"], app: Self.binaryApp)
            try stack.addSettings(["defaultExpiry: 2h"], app: Self.http2App)
            try await stack.startWorker("w1")
            let tokens = (10..<14).map { DeviceToken.numbered($0) }
            let before = Int(Date().timeIntervalSince1970)
            try await stack.produce([
                Self.job("expiry-binary-default", app: Self.binaryApp, token: tokens[0], #""alert":"a""#),
                Self.job("expiry-binary-own", app: Self.binaryApp, token: tokens[1], #""alert":"a","expiry":0"#),
                Self.job("expiry-http2-default", app: Self.http2App, token: tokens[2], #""alert":"a""#),
                Self.job("expiry-http2-own", app: Self.http2App, token: tokens[3], #""alert":"a","expiry":"30m""#),
            ])
            let results = try await Self.results(
                stack,
                for: [
                    ("expiry-binary-default", tokens[0]), ("expiry-binary-own", tokens[1]),
                    ("expiry-http2-default", tokens[2]),
                    ("expiry-http2-own", tokens[3]),
                ]
            )
            let after = Int(Date().timeIntervalSince1970)
            #expect(results.values.allSatisfy { $0["type"] == "transmitted" }, "\(results)")
            let binary = stack.simulator.expiryByToken
            let http2 = Dictionary(
                (stack.http2Simulator?.accepted ?? []).compactMap { a in a.expiration.map { (a.token, $0) } },
                uniquingKeysWith: { a, _ in a }
            )
            #expect(binary[tokens[0]].map { (before + 86_400...after + 86_400).contains(Int($0)) } == true, "\(binary)")
            #expect(binary[tokens[1]] == 0)
            #expect(http2[tokens[2]].map { (before + 7_200...after + 7_200).contains($0) } == true, "\(http2)")
            #expect(http2[tokens[3]].map { (before + 1_800...after + 1_800).contains($0) } == true, "\(http2)")
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("Credentials from environment variables and from the config file's text deliver, and no log line shows them")
    func credentialsWithoutFiles() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        do {
            let certs = stack.directory + "/certs"
            let certificate = try String(contentsOfFile: certs + "/client.pem", encoding: .utf8)
            let key = try String(contentsOfFile: certs + "/client-key.pem", encoding: .utf8)
            let signingKey = try String(contentsOfFile: certs + "/AuthKey.p8", encoding: .utf8)
            try stack.replaceInConfig("certificate: \(certs)/client.pem", with: "certificatePemEnv: E2E_CERTIFICATE")
            try stack.replaceInConfig("key: \(certs)/client-key.pem", with: "keyPemEnv: E2E_KEY")
            let block = signingKey.split(separator: "\n").map { "          \($0)" }.joined(separator: "\n")
            try stack.replaceInConfig("signingKey: \(certs)/AuthKey.p8", with: "signingKeyPem: |\n\(block)")
            try stack.replaceInConfig("logLevel: info", with: "logLevel: trace")
            // The files are gone: the worker can only have the credentials from the variables and the text.
            for name in ["client.pem", "client-key.pem", "AuthKey.p8"] {
                try FileManager.default.removeItem(atPath: certs + "/" + name)
            }
            try await stack.startWorker("w1", environment: ["E2E_CERTIFICATE": certificate, "E2E_KEY": key])
            let binary = DeviceToken.numbered(20), http2 = DeviceToken.numbered(21)
            try await stack.produce([
                Self.job("inline-binary", app: Self.binaryApp, token: binary, #""alert":"a""#),
                Self.job("inline-http2", app: Self.http2App, token: http2, #""alert":"a""#),
            ])
            let results = try await Self.results(stack, for: [("inline-binary", binary), ("inline-http2", http2)])
            #expect(results["inline-binary"]?["type"] == "transmitted")
            #expect(results["inline-http2"]?["type"] == "transmitted")
            #expect(stack.simulator.acceptedByToken[binary] == 1)
            #expect(stack.http2Simulator?.acceptedByToken[http2] == 1)
            await stack.stopWorker("w1")
            let log = stack.fullLog(of: "w1")
            #expect(log.contains("Opened a delivery pool"), "the log was read")
            for secret in [key, signingKey] {
                for line in secret.split(separator: "\n") where !line.hasPrefix("-----") {
                    #expect(!log.contains(line), "a line of a secret is in the log")
                }
            }
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("A key given inline that cannot be loaded stops run with a sentence naming the setting, not showing the key")
    func unloadableInlineKeyIsNamedNotShown() async throws {
        let directory = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/worker.yaml"
        let text = """
            kafka: {bootstrapServers: "127.0.0.1:1"}
            redis: {url: "redis://127.0.0.1:1"}
            apps:
              com.example.app:
                environments:
                  production:
                    certificatePem: "-----BEGIN CERTIFICATE-----\\nTk9UQUNFUlRJRklDQVRF\\n-----END CERTIFICATE-----\\n"
                    keyPem: "-----BEGIN PRIVATE KEY-----\\nU0VDUkVUS0VZTUFURVJJQUw=\\n-----END PRIVATE KEY-----\\n"
            """
        _ = FileManager.default.createFile(atPath: config, contents: Data(text.utf8))
        let result = try await run(Paths.executable, ["run", "--config", config])
        #expect(result.status == 2)
        #expect(
            result.stderr.hasPrefix(
                "apn-worker: apps.com.example.app.environments.production: the certificate given in "
                    + "apps.com.example.app.environments.production.certificatePem "
            ),
            "\(result.stderr)"
        )
        #expect(!result.stderr.contains("U0VDUkVUS0VZTUFURVJJQUw") && !result.stderr.contains("Tk9UQUNFUlRJRklDQVRF"))
    }

    @Test("minConnections are open before the first job on both transports, and the idle timeout closes the others")
    func warmConnectionsAndIdleTimeout() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        do {
            for app in [Self.binaryApp, Self.http2App] {
                try stack.addSettings(["minConnections: 1", "idleTimeoutMs: 500"], app: app)
            }
            try await stack.startWorker("w1")
            let http2Simulator = try #require(stack.http2Simulator)
            let warm = await eventually("one connection open on each before any job", every: .milliseconds(50)) {
                stack.simulator.openConnections == 1 && http2Simulator.openConnections == 1
            }
            #expect(
                warm,
                "open before any job: binary \(stack.simulator.openConnections), http2 \(http2Simulator.openConnections)"
            )
            #expect(stack.simulator.statistics.accepted == 0 && http2Simulator.statistics.requests == 0)

            // A job for each: with notifications queued each pool opens its second connection.
            let binaryTokens = (100..<400).map { DeviceToken.numbered($0) }
            let http2Tokens = (400..<700).map { DeviceToken.numbered($0) }
            try await stack.produce([
                WorkerStack.job(id: "busy-binary", tokens: binaryTokens),
                WorkerStack.job(id: "busy-http2", tokens: http2Tokens, app: Self.http2App),
            ])
            try await stack.readResults(timeout: .seconds(60)) { $0.count >= 600 }
            #expect(
                stack.simulator.statistics.connections == 2,
                "binary connections: \(stack.simulator.statistics.connections)"
            )
            #expect(
                http2Simulator.statistics.connections == 2,
                "http2 connections: \(http2Simulator.statistics.connections)"
            )
            // Idle for 500 ms: back to the one kept warm, on both.
            let idled = await eventually("back to one connection on each after idling", every: .milliseconds(50)) {
                stack.simulator.openConnections == 1 && http2Simulator.openConnections == 1
            }
            #expect(
                idled,
                "after idling: binary \(stack.simulator.openConnections), http2 \(http2Simulator.openConnections)"
            )
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test("An HTTP/2 app's retryLimit decides how often a 429 is retried (with its retry delays shortened)")
    func retrySettingsDecideHowA429IsRetried() async throws {
        // Every request is refused: each notification is written once and retried retryLimit times.
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]), http2Status429Every: 1)
        do {
            try stack.addSettings(["retryLimit: 2", "retryBaseDelayMs: 20", "retryMaxDelayMs: 40"], app: Self.http2App)
            try await stack.startWorker("w1")
            let tokens = (0..<20).map { DeviceToken.numbered($0, salt: 41) }
            try await stack.produce([WorkerStack.job(id: "refused", tokens: tokens, app: Self.http2App)])
            // With the defaults (3 retries, 1 s doubling) this takes 7 s per notification; the
            // settings make it well under the wait below.
            _ = try await Self.results(stack, for: tokens.map { ("refused", $0) })
            let results = tokens.compactMap {
                stack.resultsById[WorkerResult.notificationId(jobId: "refused", token: $0.hex)]
            }
            #expect(results.count == 20)
            #expect(
                results.allSatisfy { $0["status"] == .int(429) && $0["attempts"] == .int(3) },
                "\(results.first ?? [:])"
            )
            let http2Simulator = try #require(stack.http2Simulator)
            #expect(
                http2Simulator.statistics.tooManyRequests == 60,
                "429s: \(http2Simulator.statistics.tooManyRequests)"
            )
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}

extension WorkerStack {
    /// Adds `lines` to the settings of `app` in the worker's config file (before a worker starts).
    func addSettings(_ lines: [String], app: String) throws {
        try replaceInConfig("\n  \(app):\n", with: "\n  \(app):\n" + lines.map { "    \($0)\n" }.joined())
    }

    /// Adds a copy of `app` (the last app of the config file) under another name.
    func copyApp(_ app: String, as name: String) throws {
        let text = try String(contentsOfFile: configPath, encoding: .utf8)
        let start = try #require(text.range(of: "\n  \(app):\n"))
        let copy = text[start.lowerBound...].replacingOccurrences(of: "\n  \(app):\n", with: "\n  \(name):\n")
        try (text + copy).write(toFile: configPath, atomically: false, encoding: .utf8)
    }

    /// Replaces the one occurrence of `old` in the worker's config file.
    func replaceInConfig(_ old: String, with new: String) throws {
        let text = try String(contentsOfFile: configPath, encoding: .utf8)
        #expect(text.components(separatedBy: old).count == 2, "\(old) occurs once in the config")
        try text.replacingOccurrences(of: old, with: new).write(toFile: configPath, atomically: false, encoding: .utf8)
    }
}
