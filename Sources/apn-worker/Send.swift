import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka

/// `apn-worker send`: produces jobs to `apn.requests`.
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Produce notification jobs to Kafka.",
        discussion: """
            Either one job from the options (--app, --token, --alert, ...) or every line of --file \
            (one JSON job per line, see docs/jobs.md). Lines are sent as they are, so invalid jobs can be \
            produced on purpose; the worker answers them with error results. --json adds the members of a \
            JSON object to the job built from the options, for fields without an option of their own \
            (liveActivity, channels, channelAction, payload, ...); a field that an option sets too is \
            refused. Prints a JSON summary.
            """
    )

    @Option(help: "Kafka bootstrap servers.")
    var brokers: String

    @Option(help: "Topic to produce to.")
    var topic = "apn.requests"

    @Option(help: "A file of jobs, one JSON object per line (\"-\" reads standard input).")
    var file: String?

    @Option(help: "The app the job is for.")
    var app: String?

    @Option(help: "A hex device token (repeat for several).")
    var token: [String] = []

    @Option(help: "Alert text.")
    var alert: String?

    @Option(help: "Badge number.")
    var badge: Int?

    @Option(help: "Sound name.")
    var sound: String?

    @Option(help: "Job id (default: a random UUID).")
    var id: String?

    @Option(help: "Environment: production or sandbox (default: the app's).")
    var env: String?

    @Option(help: "A JSON object copied into the job's \"metadata\" and into each of its results.")
    var metadata: String?

    @Option(
        name: .customLong("apns-topic"),
        help: "HTTP/2 apps: the job's \"topic\", a bundle ID from the app's topics (--topic is the Kafka topic)."
    )
    var apnsTopic: String?

    @Option(name: .customLong("apns-id"), help: "HTTP/2 apps: the job's \"apnsId\", a UUID.")
    var apnsID: String?

    @Flag(help: "Write a jobSummary result once every token has its result.")
    var summary = false

    @Flag(help: "Everything but the write to Apple: the results are of type dryRun.")
    var dryRun = false

    @Option(
        help: "How long after it is produced the job may still be sent: seconds, or \"90s\", \"10m\", \"1h\", \"1d\"."
    )
    var staleAfter: String?

    @Option(
        name: .customLong("json"),
        help: "A JSON object whose members are added to the job (a member an option sets too is refused)."
    )
    var template: String?

    @Option(
        name: .customLong("kafka-property"),
        help: ArgumentHelp(
            "A librdkafka property, KEY=VALUE (repeatable); the value is visible in the process list: give "
                + "secrets (sasl.password) with --kafka-property-file."
        )
    )
    var kafkaProperties: [String] = []

    @Option(
        name: .customLong("kafka-property-file"),
        help: ArgumentHelp(
            "A librdkafka property whose value is read from a file, KEY=PATH (repeatable), for secrets such as "
                + "sasl.password; a trailing newline is dropped."
        )
    )
    var kafkaPropertyFiles: [String] = []

    func run() async throws {
        try await reportingFailures {
            let jobs = try collectJobs()
            var properties = ["bootstrap.servers": brokers]
            for entry in kafkaProperties {
                let (name, value) = try keyAndValue(entry, option: "--kafka-property")
                properties[name] = value
            }
            for entry in kafkaPropertyFiles {
                let (name, path) = try keyAndValue(entry, option: "--kafka-property-file")
                properties[name] = try secretText(path, option: "--kafka-property-file \(name)", what: "its value")
            }
            let producer = try KafkaProducer(configuration: KafkaConfiguration(properties))
            var sent = 0
            var failed = 0
            var firstError: String?
            for chunk in stride(from: 0, to: jobs.count, by: 5000) {
                let slice = jobs[chunk..<min(jobs.count, chunk + 5000)]
                let reports = try await producer.send(
                    slice.map {
                        KafkaOutgoingMessage(topic: topic, key: $0.key, value: $0.value)
                    }
                )
                for report in reports {
                    switch report {
                    case .success: sent += 1
                    case .failure(let error):
                        failed += 1
                        if firstError == nil { firstError = "\(error)" }
                    }
                }
            }
            await producer.close()
            var summary: [(String, JSONValue)] = [
                ("event", "sent"), ("topic", .string(topic)), ("jobs", .int(Int64(sent))),
            ]
            if failed > 0 {
                summary.append(("failed", .int(Int64(failed))))
                summary.append(("error", .string(firstError ?? "")))
            }
            print(jsonLine(summary))
            if failed > 0 { throw ExitCode(1) }
        }
    }

    /// `KEY=VALUE` split at its first `=`. Without one, what was given is not repeated: it may
    /// be a secret written without its name.
    private func keyAndValue(_ entry: String, option: String) throws -> (String, String) {
        guard let eq = entry.firstIndex(of: "="), eq != entry.startIndex else {
            throw UsageFailure(
                message:
                    "\(option) must be KEY=VALUE; what was given has no KEY= and is not shown, in case it is a secret"
            )
        }
        return (String(entry[..<eq]), String(entry[entry.index(after: eq)...]))
    }

    private func collectJobs() throws -> [(key: [UInt8]?, value: [UInt8])] {
        if let file {
            guard try jobOptions.isEmpty, template == nil else {
                throw UsageFailure(
                    message: "give either --file or the job options (--app, --token, --alert, ...), not both"
                )
            }
            let data: Data
            if file == "-" {
                data = FileHandle.standardInput.readDataToEndOfFile()
            } else {
                guard let contents = FileManager.default.contents(atPath: file) else {
                    throw UsageFailure(
                        message: "--file: cannot read \(file); check that the file exists and is readable"
                    )
                }
                data = contents
            }
            return data.split(separator: UInt8(ascii: "\n")).compactMap { line in
                let bytes = Array(line)
                guard bytes.contains(where: { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\r") }) else { return nil }
                let key = (try? JSONValue.parse(bytes))?["id"]?.stringValue.map { Array($0.utf8) }
                return (key, bytes)
            }
        }
        let template = try self.template.map { try Self.object($0, option: "--json") } ?? [:]
        var fields: [String: JSONValue] = [:]
        for (option, key, value) in try jobOptions {
            if template[key] != nil {
                throw UsageFailure(message: "--json sets \"\(key)\", which \(option) sets too; give it once")
            }
            fields[key] = value
        }
        let targets = ["token", "tokens", "channel", "channels"]
        if !token.isEmpty, let other = targets.first(where: { template[$0] != nil }) {
            throw UsageFailure(
                message:
                    "--json sets \"\(other)\" and --token gives tokens; a job has one of token, tokens, channel and channels"
            )
        }
        fields.merge(template) { option, _ in option }
        guard fields["app"] != nil else {
            throw UsageFailure(message: "--app is required unless --file is given or --json sets \"app\"")
        }
        guard !token.isEmpty || targets.contains(where: { fields[$0] != nil }) || fields["channelAction"] != nil else {
            throw UsageFailure(message: "give at least one --token, or a channel or channelAction in --json")
        }
        if self.template == nil && alert == nil && badge == nil && sound == nil {
            throw UsageFailure(message: "a job needs something to show: give --alert, --badge or --sound")
        }
        if fields["id"] == nil { fields["id"] = .string(UUID().uuidString.lowercased()) }
        let key = fields["id"]?.stringValue.map { Array($0.utf8) }
        return [(key, JSONValue.object(fields).serialized())]
    }

    /// The options that set job fields, each with the field it sets and its value, checked.
    private var jobOptions: [(option: String, key: String, value: JSONValue)] {
        get throws {
            var options: [(String, String, JSONValue)] = []
            if let app { options.append(("--app", "app", .string(app))) }
            for t in token {
                do { _ = try DeviceToken(hex: t) } catch { throw UsageFailure(message: "--token: \(error.message)") }
            }
            if token.count == 1 {
                options.append(("--token", "token", .string(token[0])))
            } else if !token.isEmpty {
                options.append(("--token", "tokens", .array(token.map(JSONValue.string))))
            }
            if let alert { options.append(("--alert", "alert", .string(alert))) }
            if let badge { options.append(("--badge", "badge", .int(Int64(badge)))) }
            if let sound { options.append(("--sound", "sound", .string(sound))) }
            if let id { options.append(("--id", "id", .string(id))) }
            if let env {
                guard env == "production" || env == "sandbox" else {
                    throw UsageFailure(message: "--env must be production or sandbox, not \"\(env)\"")
                }
                options.append(("--env", "env", .string(env)))
            }
            if let metadata {
                options.append(("--metadata", "metadata", .object(try Self.object(metadata, option: "--metadata"))))
            }
            if let apnsTopic { options.append(("--apns-topic", "topic", .string(apnsTopic))) }
            if let apnsID {
                guard UUID(uuidString: apnsID) != nil else {
                    throw UsageFailure(message: "--apns-id must be a UUID (8-4-4-4-12 hex digits), not \"\(apnsID)\"")
                }
                options.append(("--apns-id", "apnsId", .string(apnsID)))
            }
            if summary { options.append(("--summary", "summary", .bool(true))) }
            if dryRun { options.append(("--dry-run", "dryRun", .bool(true))) }
            if let staleAfter { options.append(("--stale-after", "staleAfter", try Self.staleAfter(staleAfter))) }
            return options
        }
    }

    /// `text` parsed as a JSON object, or a one-sentence usage failure naming `option`.
    private static func object(_ text: String, option: String) throws -> [String: JSONValue] {
        let value: JSONValue
        do {
            value = try JSONValue.parse(text)
        } catch {
            throw UsageFailure(message: "\(option) must be a JSON object, but it is not JSON (\(error.message))")
        }
        guard case .object(let members) = value else {
            throw UsageFailure(message: "\(option) must be a JSON object, such as {\"key\":\"value\"}, not \(text)")
        }
        return members
    }

    /// `--stale-after`: a number of seconds (sent as a number) or a duration such as "10m".
    private static func staleAfter(_ text: String) throws -> JSONValue {
        if let seconds = Int64(text), seconds > 0, seconds <= 31_536_000 { return .int(seconds) }
        guard case .after(let duration)? = try? APNSExpiry(parsing: text), duration > .zero else {
            throw UsageFailure(
                message:
                    "--stale-after must be a positive number of seconds or a duration such as 90s, 10m or 1h, not \"\(text)\""
            )
        }
        return .string(text)
    }
}
