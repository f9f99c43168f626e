import PushTestSupport
import Foundation
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
        try tokens.joined(separator: "\n").write(toFile: dir + "/tokens.txt", atomically: true, encoding: .utf8)
        try bad.joined(separator: "\n").write(toFile: dir + "/bad.txt", atomically: true, encoding: .utf8)
        try feedback.joined(separator: "\n").write(toFile: dir + "/feedback.txt", atomically: true, encoding: .utf8)

        let simulator = try ChildProcess(Paths.executable, [
            "simulate", "--cert", certs + "/server.pem", "--key", certs + "/server-key.pem",
            "--client-ca", certs + "/ca.pem", "--bad-tokens", dir + "/bad.txt",
            "--feedback-tokens", dir + "/feedback.txt", "--error-delay-ms", "50", "--record", dir + "/record.jsonl",
        ])
        let readyLine = await simulator.readLine()
        let ready = try #require(readyLine.flatMap(jsonObject))
        #expect(ready["event"] as? String == "ready")
        let binaryPort = try #require(ready["binaryPort"] as? Int)
        let feedbackPort = try #require(ready["feedbackPort"] as? Int)

        let push = try await run(Paths.executable, [
            "push", "--gateway", "127.0.0.1:\(binaryPort)", "--cert", certs + "/client.pem",
            "--key", certs + "/client-key.pem", "--ca", certs + "/ca.pem", "--tokens", dir + "/tokens.txt",
            "--count", "3000", "--connections", "2", "--payload-bytes", "200",
        ])
        #expect(push.status == 0, "push failed: \(push.stderr)")
        let summary = try #require(jsonObject(push.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        // 3000 notifications cycle three times over 1000 tokens, 10 of which are bad.
        #expect(summary["notifications"] as? Int == 3000)
        #expect(summary["transmitted"] as? Int == 2970)
        #expect((summary["failed"] as? [String: Int]) == ["8": 30])
        #expect(summary["possibleDuplicate"] as? Int == 0)
        #expect((summary["rate"] as? Double ?? 0) > 0)

        let fb = try await run(Paths.executable, [
            "feedback", "--address", "127.0.0.1:\(feedbackPort)", "--pfx", certs + "/client.p12",
            "--passphrase", "apn-worker", "--ca", certs + "/ca.pem", "--read-timeout", "2",
        ])
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

    @Test func unusableCredentialsExitWithASentence() async throws {
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let certs = try await Self.makeCertificates(in: dir)
        try Self.tokenLine(1).write(toFile: dir + "/tokens.txt", atomically: true, encoding: .utf8)
        let base = ["push", "--gateway", "127.0.0.1:9", "--tokens", dir + "/tokens.txt", "--count", "1"]

        let mismatch = try await run(Paths.executable, base + ["--cert", certs + "/client.pem", "--key", certs + "/server-key.pem"])
        #expect(mismatch.status == 2)
        #expect(mismatch.stderr.contains("does not match the certificate"))

        let missing = try await run(Paths.executable, base + ["--cert", dir + "/nope.pem", "--key", certs + "/client-key.pem"])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("nope.pem"))

        let wrongPass = try await run(Paths.executable, base + ["--pfx", certs + "/client.p12", "--passphrase", "wrong"])
        #expect(wrongPass.status == 2)
        #expect(wrongPass.stderr.contains("passphrase"))

        let none = try await run(Paths.executable, base)
        #expect(none.status == 2)
        #expect(none.stderr.contains("--cert and --key"))
    }

    @Test func badArgumentsAndInputFilesExitWithASentence() async throws {
        let dir = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "abcd\nnot-hex\n".write(toFile: dir + "/tokens.txt", atomically: true, encoding: .utf8)

        let badGateway = try await run(Paths.executable, ["push", "--gateway", "nowhere", "--tokens", dir + "/tokens.txt", "--count", "1"])
        #expect(badGateway.status == 2)
        #expect(badGateway.stderr.contains("--gateway must be HOST:PORT"))

        let badToken = try await run(Paths.executable, ["push", "--gateway", "127.0.0.1:1", "--tokens", dir + "/tokens.txt", "--count", "1"])
        #expect(badToken.status == 2)
        #expect(badToken.stderr.contains("line 2"))

        let negative = try await run(Paths.executable, ["push", "--gateway", "127.0.0.1:1", "--tokens", dir + "/tokens.txt", "--count=-5"])
        #expect(negative.status != 0)
        #expect(negative.stderr.contains("--count must be zero or more"))

        let simulate = try await run(Paths.executable, ["simulate", "--generate-certs", dir + "/c", "--bad-tokens", dir + "/tokens.txt"])
        #expect(simulate.status == 2)
        #expect(simulate.stderr.contains("--bad-tokens"))
    }
}
