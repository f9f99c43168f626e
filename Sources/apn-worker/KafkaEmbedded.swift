import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka
import PushKafkaEmbedded

/// `apn-worker kafka-embedded`: hosts librdkafka's mock cluster until stopped.
struct KafkaEmbedded: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kafka-embedded",
        abstract: "Run an in-memory Kafka cluster (librdkafka's mock cluster) on 127.0.0.1 for development and tests.",
        discussion: """
            Prints one JSON line {"event":"ready","bootstrapServers":"..."} when the brokers listen, and runs \
            until SIGINT or SIGTERM. Data lives in memory only, about the newest 5 MiB of each partition: \
            older messages are dropped, read or not. Topics not created here are created on first use with \
            4 partitions. With --control it reads fault commands from standard input, one per line (down 2, \
            leader apn.requests all 3, errors Heartbeat NOT_COORDINATOR 5, help; see docs/simulator.md), and \
            answers each with a JSON line.
            """
    )

    @Option(help: "Number of brokers.")
    var brokers = 1

    @Option(help: "Topics to create, as NAME:PARTITIONS separated by commas.")
    var topics = "apn.requests:12,apn.results:12"

    @Option(help: "Replicas of each partition of --topics (at most --brokers).")
    var replicationFactor = 1

    @Flag(help: "Read fault commands from standard input, one per line, and answer each on standard output.")
    var control = false

    func run() async throws {
        try await reportingFailures {
            guard (1...16).contains(brokers) else {
                throw UsageFailure(message: "--brokers must be from 1 to 16, not \(brokers)")
            }
            guard (1...brokers).contains(replicationFactor) else {
                throw UsageFailure(
                    message: "--replication-factor must be from 1 to --brokers, not \(replicationFactor)"
                )
            }
            let specs = try parseTopics(topics)
            let cluster = try EmbeddedKafkaCluster(brokers: brokers)
            for (name, partitions) in specs {
                try cluster.createTopic(name, partitions: partitions, replicationFactor: Int32(replicationFactor))
            }
            let ready = jsonLine([
                ("event", .string("ready")),
                ("bootstrapServers", .string(cluster.bootstrapServers)),
                ("topics", .object(Dictionary(uniqueKeysWithValues: specs.map { ($0.0, JSONValue.int(Int64($0.1))) }))),
            ])
            let partitions = Dictionary(specs) { _, last in last }
            await waitForTerminationSignal { [control] in
                print(ready)
                fflush(nil)
                if control {
                    // Reading standard input blocks: a thread of its own, off the cooperative pool.
                    Thread.detachNewThread { Self.answerCommands(cluster, partitions: partitions) }
                }
            }
            cluster.shutdown()
        }
    }

    /// Applies each line of standard input to the cluster and prints a JSON line for it, until
    /// the end of input (the cluster runs on until a signal).
    private static func answerCommands(_ cluster: EmbeddedKafkaCluster, partitions: [String: Int32]) {
        var partitions = partitions
        while let line = readLine() {
            var fields: [(String, JSONValue)] = [("event", .string("control")), ("command", .string(line))]
            do throws(KafkaError) {
                if let command = try EmbeddedKafkaCommand.parse(line) {
                    try command.apply(to: cluster, partitions: partitions)
                    if case .createTopic(let name, let count, _) = command { partitions[name] = count }
                    fields.append(("ok", .bool(true)))
                } else {
                    fields.append(("ok", .bool(true)))
                    if line.trimmingCharacters(in: .whitespaces) == "help" {
                        fields.append(("commands", .array(EmbeddedKafkaCommand.usage.map(JSONValue.string))))
                    }
                }
            } catch {
                fields += [("ok", .bool(false)), ("error", .string(error.message))]
            }
            print(jsonLine(fields))
            fflush(nil)
        }
    }

    private func parseTopics(_ text: String) throws -> [(String, Int32)] {
        guard !text.isEmpty else { return [] }
        return try text.split(separator: ",").map { item in
            let parts = item.split(separator: ":")
            guard parts.count == 2, !parts[0].isEmpty, let count = Int32(parts[1]), (1...1000).contains(count) else {
                throw UsageFailure(
                    message: "--topics entries must be NAME:PARTITIONS with 1 to 1000 partitions, not \"\(item)\""
                )
            }
            return (String(parts[0]), count)
        }
    }
}
