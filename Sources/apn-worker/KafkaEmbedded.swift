import APNSCore
import ArgumentParser
import Foundation
import PushCommandLine
import PushKafka

/// `apn-worker kafka-embedded`: hosts librdkafka's mock cluster until stopped.
struct KafkaEmbedded: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kafka-embedded",
        abstract: "Run an in-memory Kafka cluster (librdkafka's mock cluster) on 127.0.0.1 for development and tests.",
        discussion: """
            Prints one JSON line {"event":"ready","bootstrapServers":"..."} when the brokers listen, and runs \
            until SIGINT or SIGTERM. Data lives in memory only, about the newest 5 MiB of each partition: \
            older messages are dropped, read or not. Topics not created here are created on first use with \
            4 partitions.
            """
    )

    @Option(help: "Number of brokers.")
    var brokers = 1

    @Option(help: "Topics to create, as NAME:PARTITIONS separated by commas.")
    var topics = "apn.requests:12,apn.results:12"

    func run() async throws {
        try await reportingFailures {
            guard (1...16).contains(brokers) else {
                throw UsageFailure(message: "--brokers must be from 1 to 16, not \(brokers)")
            }
            let specs = try parseTopics(topics)
            let cluster = try EmbeddedKafkaCluster(brokers: brokers)
            for (name, partitions) in specs {
                try cluster.createTopic(name, partitions: partitions)
            }
            let ready = jsonLine([
                ("event", .string("ready")),
                ("bootstrapServers", .string(cluster.bootstrapServers)),
                ("topics", .object(Dictionary(uniqueKeysWithValues: specs.map { ($0.0, JSONValue.int(Int64($0.1))) }))),
            ])
            await waitForTerminationSignal {
                print(ready)
                fflush(nil)
            }
            cluster.shutdown()
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
