import APNSCore
import Foundation
import PushKafka
import PushKafkaEmbedded
import PushLocalStack
import PushTestSupport
import Testing

/// `kafka-embedded`, `send` and `run`'s configuration errors, as a user runs them.
@Suite("Worker commands", .serialized, .timeLimit(.minutes(2)))
struct WorkerCommandTests {
    @Test("kafka-embedded prints its bootstrap servers; send produces jobs from options and from a file")
    func embeddedKafkaAndSend() async throws {
        let kafka = try ChildProcess(
            Paths.executable,
            ["kafka-embedded", "--brokers", "1", "--topics", "apn.requests:3,apn.results:3"]
        )
        defer { kafka.signal(SIGKILL) }
        let ready = try #require(await kafka.readLine().flatMap(jsonObject))
        #expect(ready["event"] as? String == "ready")
        let brokers = try #require(ready["bootstrapServers"] as? String)
        #expect((ready["topics"] as? [String: Any])?["apn.requests"] as? Int == 3)

        let token = String(repeating: "ab", count: 32)
        let single = try await run(
            Paths.executable,
            [
                "send", "--brokers", brokers, "--app", "com.example.app",
                "--token", token, "--alert", "Hi", "--id", "job-1",
            ]
        )
        #expect(single.status == 0, "\(single.stderr)")
        #expect(jsonObject(single.stdout.trimmingCharacters(in: .whitespacesAndNewlines))?["jobs"] as? Int == 1)

        let directory = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/jobs.jsonl"
        try """
        {"id":"job-2","app":"com.example.app","token":"\(token)","alert":"Two"}

        not even JSON
        """.write(toFile: file, atomically: false, encoding: .utf8)
        let fromFile = try await run(Paths.executable, ["send", "--brokers", brokers, "--file", file])
        #expect(fromFile.status == 0, "\(fromFile.stderr)")
        #expect(jsonObject(fromFile.stdout.trimmingCharacters(in: .whitespacesAndNewlines))?["jobs"] as? Int == 2)

        // Read the three jobs back.
        let consumer = try KafkaConsumer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": brokers, "group.id": "check-\(UUID().uuidString.prefix(6))",
                "auto.offset.reset": "earliest",
            ])
        )
        try consumer.subscribe(topics: ["apn.requests"])
        var values: [String] = []
        let deadline = ContinuousClock.now + .seconds(30)
        while values.count < 3, ContinuousClock.now < deadline {
            values += try await consumer.poll(timeout: .milliseconds(200)).map {
                String(decoding: $0.value, as: UTF8.self)
            }
        }
        try? await consumer.close()
        #expect(values.count == 3)
        let first = try #require(values.compactMap { try? JSONValue.parse($0) }.first { $0["id"] == "job-1" })
        #expect(first["app"] == "com.example.app")
        #expect(first["token"] == .string(token))
        #expect(first["alert"] == "Hi")
        #expect(values.contains("not even JSON"))
    }

    @Test("kafka-embedded --control answers each fault command on standard input with a JSON line")
    func embeddedKafkaControl() async throws {
        let kafka = try ChildProcess(
            Paths.executable,
            [
                "kafka-embedded", "--brokers", "3", "--replication-factor", "3", "--topics", "apn.requests:4",
                "--control",
            ],
            input: true
        )
        defer { kafka.signal(SIGKILL) }
        let ready = try #require(await kafka.readLine().flatMap(jsonObject))
        #expect(ready["event"] as? String == "ready")
        for (line, ok) in [
            ("help", true), ("leader apn.requests all 2", true), ("leader apn.requests 3 none", true),
            ("coordinator apn-worker 3", true), ("down 2", true), ("up 2", true), ("rtt all 0", true),
            ("errors Heartbeat NOT_COORDINATOR 3", true), ("broker-errors 1 Fetch NOT_LEADER_FOR_PARTITION 2 50", true),
            ("clear-errors Heartbeat", true), ("topic extra 2 3", true), ("leader extra all 1", true),
            ("leader unknown all 1", false), ("down 9", false), ("reboot 1", false),
        ] {
            kafka.write(line + "\n")
            let answer = try #require(await kafka.readLine().flatMap(jsonObject))
            #expect(answer["event"] as? String == "control")
            #expect(answer["command"] as? String == line)
            #expect(answer["ok"] as? Bool == ok, "\(answer)")
            if line == "help" { #expect((answer["commands"] as? [String])?.count == EmbeddedKafkaCommand.usage.count) }
            if !ok { #expect((answer["error"] as? String)?.isEmpty == false, "\(answer)") }
        }
    }

    @Test("send refuses a malformed token with a sentence and exit code 2")
    func sendRejectsBadToken() async throws {
        let result = try await run(
            Paths.executable,
            ["send", "--brokers", "127.0.0.1:1", "--app", "a", "--token", "xyz", "--alert", "Hi"]
        )
        #expect(result.status == 2)
        #expect(result.stderr.contains("--token"))
    }

    @Test("send sets metadata, topic, apnsId, summary, dryRun and staleAfter from options and adds --json's members")
    func sendJobFieldOptionsAndTemplate() async throws {
        let kafka = try ChildProcess(
            Paths.executable,
            ["kafka-embedded", "--brokers", "1", "--topics", "apn.requests:1"]
        )
        defer { kafka.signal(SIGKILL) }
        let ready = try #require(await kafka.readLine().flatMap(jsonObject))
        let brokers = try #require(ready["bootstrapServers"] as? String)
        let token = String(repeating: "cd", count: 32)
        let apnsID = "8E2B1C9A-1F1B-4C7E-9A55-2D0E5B6F7A11"
        let sent = try await run(
            Paths.executable,
            [
                "send", "--brokers", brokers, "--app", "com.example.app", "--token", token, "--alert", "Hi",
                "--id", "job-fields", "--metadata", #"{"order":1234,"tags":["a"]}"#, "--apns-topic",
                "com.example.other",
                "--apns-id", apnsID, "--summary", "--dry-run", "--stale-after", "10m",
                "--json", #"{"payload":{"deepLink":"/orders/1234"},"priority":5,"retryLimit":0}"#,
            ]
        )
        #expect(sent.status == 0, "\(sent.stderr)")
        // A job with a channel from --json needs no --token and nothing to show from the options.
        let channel = try await run(
            Paths.executable,
            [
                "send", "--brokers", brokers, "--app", "com.example.app", "--stale-after", "90",
                "--json", #"{"id":"job-channel","channel":"dHdvY2hhbm5lbA==","alert":"All"}"#,
            ]
        )
        #expect(channel.status == 0, "\(channel.stderr)")

        let consumer = try KafkaConsumer(
            configuration: KafkaConfiguration([
                "bootstrap.servers": brokers, "group.id": "check-\(UUID().uuidString.prefix(6))",
                "auto.offset.reset": "earliest",
            ])
        )
        try consumer.subscribe(topics: ["apn.requests"])
        var messages: [(key: String?, value: JSONValue)] = []
        let deadline = ContinuousClock.now + .seconds(30)
        while messages.count < 2, ContinuousClock.now < deadline {
            messages += try await consumer.poll(timeout: .milliseconds(200)).compactMap { message in
                guard let value = try? JSONValue.parse(message.value) else { return nil }
                return (message.key.map { String(decoding: $0, as: UTF8.self) }, value)
            }
        }
        try? await consumer.close()
        let job = try #require(messages.first { $0.value["id"] == "job-fields" })
        #expect(job.key == "job-fields")
        #expect(job.value["metadata"] == .object(["order": .int(1234), "tags": .array(["a"])]))
        #expect(job.value["topic"] == "com.example.other")
        #expect(job.value["apnsId"] == .string(apnsID))
        #expect(job.value["summary"] == .bool(true) && job.value["dryRun"] == .bool(true))
        #expect(job.value["staleAfter"] == "10m")
        #expect(job.value["payload"] == .object(["deepLink": "/orders/1234"]))
        #expect(job.value["priority"] == .int(5) && job.value["retryLimit"] == .int(0))
        #expect(job.value["token"] == .string(token) && job.value["alert"] == "Hi")
        let broadcast = try #require(messages.first { $0.value["id"] == "job-channel" })
        #expect(broadcast.key == "job-channel")
        #expect(broadcast.value["channel"] == "dHdvY2hhbm5lbA==" && broadcast.value["token"] == nil)
        #expect(broadcast.value["staleAfter"] == .int(90))
    }

    @Test(
        "send refuses bad --json, --metadata, --apns-id and --stale-after, and a field given twice, with one sentence and exit code 2",
        arguments: [
            (["--alert", "Hi", "--json", #"{"priority":5"#], "--json must be a JSON object, but it is not JSON"),
            (["--alert", "Hi", "--json", "[1]"], "--json must be a JSON object"),
            (["--alert", "Hi", "--json", #"{"alert":"Other"}"#], #"--json sets "alert", which --alert sets too"#),
            (["--alert", "Hi", "--json", #"{"tokens":["00ff"]}"#], #"--json sets "tokens" and --token gives tokens"#),
            (["--alert", "Hi", "--metadata", "order=1234"], "--metadata must be a JSON object"),
            (["--alert", "Hi", "--apns-id", "not-a-uuid"], "--apns-id must be a UUID"),
            (["--alert", "Hi", "--stale-after", "soon"], "--stale-after must be a positive number of seconds"),
        ]
    )
    func sendRefusesBadJobOptions(options: [String], fragment: String) async throws {
        let token = String(repeating: "ab", count: 32)
        let result = try await run(
            Paths.executable,
            ["send", "--brokers", "127.0.0.1:1", "--app", "a", "--token", token] + options
        )
        #expect(result.status == 2)
        #expect(result.stderr.contains(fragment), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "one sentence: \(result.stderr)")
    }

    @Test(arguments: [
        (["run", "--config", "/nonexistent/worker.yaml"], "/nonexistent/worker.yaml"),
        (["run", "--redis", "redis://127.0.0.1:6379"], "kafka.bootstrapServers"),
        (
            ["run", "--brokers", "127.0.0.1:9092", "--redis", "ftp://127.0.0.1:6379"],
            "the scheme must be redis:// or rediss://"
        ),
    ])
    func runConfigurationErrorsNameTheSetting(arguments: [String], fragment: String) async throws {
        let result = try await run(Paths.executable, arguments)
        #expect(result.status == 2)
        #expect(result.stderr.contains(fragment), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "one sentence: \(result.stderr)")
    }

    @Test("run refuses credentials that cannot be loaded with a sentence naming the app environment and exit code 2")
    func runRefusesUnloadableCredentials() async throws {
        let directory = try Paths.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for name in ["cert.pem", "key.pem"] {
            _ = FileManager.default.createFile(atPath: directory + "/" + name, contents: Data("not a PEM file\n".utf8))
        }
        let config = directory + "/worker.yaml"
        let text = """
            kafka: {bootstrapServers: "127.0.0.1:1"}
            redis: {url: "redis://127.0.0.1:1"}
            apps:
              com.example.app:
                environments:
                  production: {certificate: cert.pem, key: key.pem}
            """
        _ = FileManager.default.createFile(atPath: config, contents: Data(text.utf8))
        let result = try await run(Paths.executable, ["run", "--config", config])
        #expect(result.status == 2)
        #expect(
            result.stderr.hasPrefix("apn-worker: apps.com.example.app.environments.production: "),
            "\(result.stderr)"
        )
        #expect(result.stderr.split(separator: "\n").count == 1, "one sentence: \(result.stderr)")
    }

    @Test("run's standard error is JSON lines only, librdkafka's own lines included")
    func librdkafkaLinesAreJSONLogLines() async throws {
        // session.timeout.ms in the stack's config is a consumer property: the producer's
        // librdkafka warns that it ignores it (CONFWARN), through the worker's logger.
        let stack = try await WorkerStack.start()
        try await stack.startWorker("json-log")
        // Stop it once it has joined the group, when its signal handling is certainly in place.
        let deadline = ContinuousClock.now + .seconds(60)
        while !stack.fullLog(of: "json-log").contains("Partitions assigned"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        let status = await stack.stopWorker("json-log")
        let lines = stack.log(of: "json-log").split(separator: "\n").filter { !$0.isEmpty }
        await stack.shutdown()
        #expect(status == 0)
        let notJSON = lines.filter { jsonObject(String($0)) == nil }
        #expect(notJSON.isEmpty, "not JSON: \(notJSON.prefix(3))")
        let librdkafka = lines.compactMap { jsonObject(String($0)) }.filter { $0["label"] as? String == "rdkafka" }
        #expect(!librdkafka.isEmpty, "no librdkafka line in: \(lines.prefix(5))")
        #expect(librdkafka.allSatisfy { $0["kafka.facility"] is String && $0["kafka.client"] is String })
    }
}
