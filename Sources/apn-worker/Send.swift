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
            produced on purpose; the worker answers them with error results. Prints a JSON summary.
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

    @Option(name: .customLong("kafka-property"), help: "A librdkafka property, KEY=VALUE (repeatable).")
    var kafkaProperties: [String] = []

    func run() async throws {
        try await reportingFailures {
            let jobs = try collectJobs()
            var properties = ["bootstrap.servers": brokers]
            for entry in kafkaProperties {
                guard let eq = entry.firstIndex(of: "="), eq != entry.startIndex else {
                    throw UsageFailure(message: "--kafka-property must be KEY=VALUE, not \"\(entry)\"")
                }
                properties[String(entry[..<eq])] = String(entry[entry.index(after: eq)...])
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

    private func collectJobs() throws -> [(key: [UInt8]?, value: [UInt8])] {
        if let file {
            guard app == nil, token.isEmpty, alert == nil, badge == nil, sound == nil, id == nil, env == nil else {
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
        guard let app else { throw UsageFailure(message: "--app is required unless --file is given") }
        guard !token.isEmpty else { throw UsageFailure(message: "give at least one --token") }
        for t in token {
            do { _ = try DeviceToken(hex: t) } catch { throw UsageFailure(message: "--token: \(error.message)") }
        }
        if let env, env != "production" && env != "sandbox" {
            throw UsageFailure(message: "--env must be production or sandbox, not \"\(env)\"")
        }
        let jobId = id ?? UUID().uuidString.lowercased()
        var fields: [String: JSONValue] = ["id": .string(jobId), "app": .string(app)]
        if token.count == 1 {
            fields["token"] = .string(token[0])
        } else {
            fields["tokens"] = .array(token.map(JSONValue.string))
        }
        if let alert { fields["alert"] = .string(alert) }
        if let badge { fields["badge"] = .int(Int64(badge)) }
        if let sound { fields["sound"] = .string(sound) }
        if let env { fields["env"] = .string(env) }
        if alert == nil && badge == nil && sound == nil {
            throw UsageFailure(message: "a job needs something to show: give --alert, --badge or --sound")
        }
        return [(Array(jobId.utf8), JSONValue.object(fields).serialized())]
    }
}
