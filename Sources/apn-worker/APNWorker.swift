import ArgumentParser
import Foundation

@main
struct APNWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apn-worker",
        abstract:
            "Delivers Apple Push Notifications: the Kafka worker, a sender, a feedback reader and an APNs simulator.",
        subcommands: [
            Run.self, Send.self, Demo.self, KafkaEmbedded.self, Push.self, Feedback.self, Simulate.self, Channels.self,
            StatusCommand.self,
        ]
    )
}
