import Foundation
import PushLocalStack
import PushTestSupport
import Testing

/// The `apn-worker` commands as a user runs them: real processes, TLS material from
/// `scripts/gen-test-certs`, the simulator on free ports of 127.0.0.1.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct CommandLineTests {
    static func makeCertificates(in dir: String) async throws -> String {
        let certs = dir + "/certs"
        let result = try await run("/bin/bash", [Paths.root + "/scripts/gen-test-certs", certs])
        #expect(result.status == 0, "gen-test-certs failed: \(result.stderr)")
        return certs
    }

    static func tokenLine(_ i: Int) -> String {
        "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5" + String(format: "%08x", i)
    }

    @Test func simulatePushAndFeedbackWorkTogether() async throws {
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let certs = try await Self.makeCertificates(in: dir)
        let tokens = (0..<1000).map(Self.tokenLine)
        let bad = tokens.enumerated().filter { $0.offset % 100 == 7 }.map(\.element)
        let feedback = ["1700000000 " + tokens[3], tokens[4]]
        try tokens.joined(separator: "\n").write(toFile: dir + "/tokens.txt", atomically: false, encoding: .utf8)
        try bad.joined(separator: "\n").write(toFile: dir + "/bad.txt", atomically: false, encoding: .utf8)
        try feedback.joined(separator: "\n").write(toFile: dir + "/feedback.txt", atomically: false, encoding: .utf8)

        let simulator = try ChildProcess(
            Paths.executable,
            [
                "simulate", "--cert", certs + "/server.pem", "--key", certs + "/server-key.pem",
                "--client-ca", certs + "/ca.pem", "--bad-tokens", dir + "/bad.txt",
                "--feedback-tokens", dir + "/feedback.txt", "--error-delay-ms", "50", "--record", dir + "/record.jsonl",
            ]
        )
        let readyLine = await simulator.readLine()
        let ready = try #require(readyLine.flatMap(jsonObject))
        #expect(ready["event"] as? String == "ready")
        let binaryPort = try #require(ready["binaryPort"] as? Int)
        let feedbackPort = try #require(ready["feedbackPort"] as? Int)

        let push = try await run(
            Paths.executable,
            [
                "push", "--gateway", "127.0.0.1:\(binaryPort)", "--cert", certs + "/client.pem",
                "--key", certs + "/client-key.pem", "--ca", certs + "/ca.pem", "--tokens", dir + "/tokens.txt",
                "--count", "3000", "--connections", "2", "--payload-bytes", "200",
            ]
        )
        #expect(push.status == 0, "push failed: \(push.stderr)")
        let summary = try #require(jsonObject(push.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        // 3000 notifications cycle three times over 1000 tokens, 10 of which are bad.
        #expect(summary["notifications"] as? Int == 3000)
        #expect(summary["transmitted"] as? Int == 2970)
        #expect((summary["failed"] as? [String: Int]) == ["8": 30])
        #expect(summary["possibleDuplicate"] as? Int == 0)
        #expect((summary["rate"] as? Double ?? 0) > 0)

        let fb = try await run(
            Paths.executable,
            [
                "feedback", "--address", "127.0.0.1:\(feedbackPort)", "--pfx", certs + "/client.p12",
                "--passphrase", "apn-worker", "--ca", certs + "/ca.pem", "--read-timeout", "2",
            ]
        )
        #expect(fb.status == 0, "feedback failed: \(fb.stderr)")
        let entries = fb.stdout.split(separator: "\n").compactMap { jsonObject(String($0)) }
        #expect(entries.count == 2)
        #expect(entries.first?["token"] as? String == tokens[3])
        #expect(entries.first?["timestamp"] as? Int == 1_700_000_000)

        simulator.signal(SIGTERM)
        let stopped = await simulator.finish()
        #expect(stopped.status == 0)
        let stats = try #require(jsonObject(stopped.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(stats["accepted"] as? Int == 2970)
        let recorded = try String(contentsOfFile: dir + "/record.jsonl", encoding: .utf8).split(separator: "\n")
        #expect(recorded.count == 2970)
        let firstRecord = try #require(jsonObject(String(recorded[0])))
        #expect(firstRecord["token"] as? String != nil)
        #expect(firstRecord["payloadLength"] as? Int != nil)
        #expect(firstRecord["identifier"] as? Int != nil)
        #expect(firstRecord["connection"] as? Int != nil)
    }

    /// The README's main command (`scripts/demo` runs it after building): the embedded Kafka,
    /// the simulator, a redis-server and two workers, with bad tokens, duplicates and malformed
    /// messages among the jobs.
    @Test func theDemoDeliversEveryJobAndSaysSo() async throws {
        let result = try await run(Paths.executable, ["demo", "--jobs", "400"])
        #expect(result.status == 0, "the demo failed: \(result.stdout)\n\(result.stderr)")
        #expect(
            result.stdout.contains("Every notification, malformed message and feedback entry has its result."),
            "\(result.stdout)"
        )
        // Every valid notification accepted exactly once: as many accepts as transmitted results.
        let line = try #require(result.stdout.split(separator: "\n").first { $0.contains("the simulator accepted") })
        let numbers = line.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
        #expect(numbers.count == 3 && numbers[1] == numbers[2] && numbers[1] > 0, "\(line)")
        for expected in ["transmitted", "transmissionError", "invalidJob", "feedback"] {
            #expect(result.stdout.contains(expected), "no \(expected) results in the summary: \(result.stdout)")
        }
    }

    /// SIGTERM (or a terminal's Ctrl-C) to a command that runs the embedded stack stops the
    /// workers and the redis-server it started, which would otherwise outlive it, removes its
    /// working directory, and says so.
    @Test func aStoppedDemoStopsWhatItStarted() async throws {
        let demo = try ChildProcess(Paths.executable, ["demo", "--jobs", "300000"])
        var redisPort: Int?
        var directory: String?
        var statusPorts: [Int] = []
        while let line = await demo.readLine() {
            if line.hasPrefix("Redis "), let url = line.split(separator: " ").last {
                redisPort = url.split(separator: ":").last?.split(separator: "/").first.flatMap { Int($0) }
            } else if line.hasPrefix("Workers "), let start = line.range(of: "logs in ") {
                directory = line[start.upperBound...].split(separator: ",").first.map(String.init)
            } else if line.hasPrefix("Status servers") {
                statusPorts = line.split(separator: " ").compactMap {
                    $0.split(separator: ":").last?.split(separator: "/").first.flatMap { Int($0) }
                }
                break
            }
        }
        let redis = try #require(redisPort, "the demo did not say where its Redis is")
        let logs = try #require(directory, "the demo did not say where its logs are")
        #expect(statusPorts.count == 2, "the demo did not list its two workers' status servers")
        #expect(RedisServerProcess.acceptsConnections(port: redis))
        for port in statusPorts { #expect(RedisServerProcess.acceptsConnections(port: port)) }
        #expect(FileManager.default.fileExists(atPath: logs))

        demo.signal(SIGTERM)
        let result = await demo.finish(killAfter: .seconds(60))

        #expect(result.status == 128 + SIGTERM, "\(result.stderr)")
        #expect(result.stderr.contains("stopped by SIGTERM"), "\(result.stderr)")
        #expect(!RedisServerProcess.acceptsConnections(port: redis), "the demo's redis-server outlived it")
        for port in statusPorts {
            #expect(!RedisServerProcess.acceptsConnections(port: port), "a worker of the demo outlived it")
        }
        #expect(!FileManager.default.fileExists(atPath: logs), "the demo's working directory is left behind")
    }

    @Test func unusableCredentialsExitWithASentence() async throws {
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let certs = try await Self.makeCertificates(in: dir)
        try Self.tokenLine(1).write(toFile: dir + "/tokens.txt", atomically: false, encoding: .utf8)
        let base = ["push", "--gateway", "127.0.0.1:9", "--tokens", dir + "/tokens.txt", "--count", "1"]

        let mismatch = try await run(
            Paths.executable,
            base + ["--cert", certs + "/client.pem", "--key", certs + "/server-key.pem"]
        )
        #expect(mismatch.status == 2)
        #expect(mismatch.stderr.contains("does not match the certificate"))

        let missing = try await run(
            Paths.executable,
            base + ["--cert", dir + "/nope.pem", "--key", certs + "/client-key.pem"]
        )
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("nope.pem"))

        let wrongPass = try await run(
            Paths.executable,
            base + ["--pfx", certs + "/client.p12", "--passphrase", "wrong"]
        )
        #expect(wrongPass.status == 2)
        #expect(wrongPass.stderr.contains("passphrase"))

        let none = try await run(Paths.executable, base)
        #expect(none.status == 2)
        #expect(none.stderr.contains("--cert and --key"))
    }

    @Test func badArgumentsAndInputFilesExitWithASentence() async throws {
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "abcd\nnot-hex\n".write(toFile: dir + "/tokens.txt", atomically: false, encoding: .utf8)

        let badGateway = try await run(
            Paths.executable,
            ["push", "--gateway", "nowhere", "--tokens", dir + "/tokens.txt", "--count", "1"]
        )
        #expect(badGateway.status == 2)
        #expect(badGateway.stderr.contains("--gateway must be HOST:PORT"))

        let badToken = try await run(
            Paths.executable,
            ["push", "--gateway", "127.0.0.1:1", "--tokens", dir + "/tokens.txt", "--count", "1"]
        )
        #expect(badToken.status == 2)
        #expect(badToken.stderr.contains("line 2"))

        let negative = try await run(
            Paths.executable,
            ["push", "--gateway", "127.0.0.1:1", "--tokens", dir + "/tokens.txt", "--count=-5"]
        )
        #expect(negative.status != 0)
        #expect(negative.stderr.contains("--count must be zero or more"))

        let simulate = try await run(
            Paths.executable,
            ["simulate", "--generate-certs", dir + "/c", "--bad-tokens", dir + "/tokens.txt"]
        )
        #expect(simulate.status == 2)
        #expect(simulate.stderr.contains("--bad-tokens"))
    }

    @Test(arguments: ["native", "nio-http2"])
    func simulateAndPushOverHTTP2WithAProviderToken(framing: String) async throws {
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let certs = try await Self.makeCertificates(in: dir)
        let key = try await run(
            "/bin/bash",
            [
                "-c",
                "openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out '\(dir)/AuthKey.p8'",
            ]
        )
        #expect(key.status == 0, "openssl failed: \(key.stderr)")
        let tokens = (0..<1000).map(Self.tokenLine)
        let bad = tokens.enumerated().filter { $0.offset % 100 == 7 }.map(\.element)
        try tokens.joined(separator: "\n").write(toFile: dir + "/tokens.txt", atomically: false, encoding: .utf8)
        try bad.joined(separator: "\n").write(toFile: dir + "/bad.txt", atomically: false, encoding: .utf8)
        try ["1700000000 " + tokens[3], "1700000001 " + tokens[4]].joined(separator: "\n")
            .write(toFile: dir + "/feedback.txt", atomically: false, encoding: .utf8)

        let simulator = try ChildProcess(
            Paths.executable,
            [
                "simulate", "--cert", certs + "/server.pem", "--key", certs + "/server-key.pem",
                "--http2-port", "0", "--jwt-key", "ABCDE12345=\(dir)/AuthKey.p8", "--team", "TEAM123456",
                "--max-streams", "50", "--bad-tokens", dir + "/bad.txt", "--feedback-tokens", dir + "/feedback.txt",
                "--record", dir + "/record.jsonl", "--http2-framing", framing,
            ]
        )
        let ready = try #require(await simulator.readLine().flatMap(jsonObject))
        let port = try #require(ready["http2Port"] as? Int)

        let push = try await run(
            Paths.executable,
            [
                "push", "--transport", "http2", "--gateway", "127.0.0.1:\(port)", "--topic", "com.example.app",
                "--signing-key", dir + "/AuthKey.p8", "--key-id", "ABCDE12345", "--team-id", "TEAM123456",
                "--ca", certs + "/ca.pem", "--tokens", dir + "/tokens.txt", "--count", "3000", "--connections", "2",
            ]
        )
        #expect(push.status == 0, "push failed: \(push.stderr)")
        let summary = try #require(jsonObject(push.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        // 3000 notifications cycle three times over 1000 tokens: 10 bad (400), 2 unregistered (410).
        #expect(summary["transmitted"] as? Int == 2964)
        #expect((summary["failed"] as? [String: Int]) == ["400": 30, "410": 6])
        #expect(summary["possibleDuplicate"] as? Int == 0)
        #expect(summary["connectionsOpened"] as? Int == 2)

        simulator.signal(SIGTERM)
        let stopped = await simulator.finish()
        #expect(stopped.status == 0)
        let stats = try #require(jsonObject(stopped.stdout.split(separator: "\n").last.map(String.init) ?? ""))
        let http2 = try #require(stats["http2"] as? [String: Any])
        #expect(http2["accepted"] as? Int == 2964)
        #expect(http2["maxConcurrentStreamsSeen"] as? Int ?? 0 <= 50)
        let recorded = try String(contentsOfFile: dir + "/record.jsonl", encoding: .utf8).split(separator: "\n")
        #expect(recorded.count == 2964)
        #expect(jsonObject(String(recorded[0]))?["api"] as? String == "http2")
    }

    @Test func http2ArgumentErrorsExitWithASentence() async throws {
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Self.tokenLine(1).write(toFile: dir + "/tokens.txt", atomically: false, encoding: .utf8)
        let base = [
            "push", "--transport", "http2", "--gateway", "127.0.0.1:1", "--tokens", dir + "/tokens.txt", "--count", "1",
        ]
        let noTopic = try await run(Paths.executable, base)
        #expect(noTopic.status != 0)
        #expect(noTopic.stderr.contains("--transport http2 needs --topic"))
        let noKeyId = try await run(
            Paths.executable,
            base + ["--topic", "com.example.app", "--signing-key", dir + "/k.p8", "--team-id", "TEAM123456"]
        )
        #expect(noKeyId.status != 0)
        #expect(noKeyId.stderr.contains("--signing-key needs --key-id and --team-id"))
        let missingKey = try await run(
            Paths.executable,
            base + [
                "--topic", "com.example.app", "--signing-key", dir + "/k.p8", "--key-id", "ABCDE12345", "--team-id",
                "TEAM123456",
            ]
        )
        #expect(missingKey.status == 2)
        #expect(missingKey.stderr.contains("--signing-key"))
        let simulate = try await run(
            Paths.executable,
            ["simulate", "--generate-certs", dir + "/c", "--http2-port", "0", "--jwt-key", "ABCDE12345=\(dir)/k.p8"]
        )
        #expect(simulate.status != 0)
        #expect(simulate.stderr.contains("--team"))
    }
}
