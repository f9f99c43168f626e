import ArgumentParser
import Foundation

@main
struct APNWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apn-worker",
        abstract: "Delivers Apple Push Notifications: the Kafka worker, a sender, a feedback reader and an APNs simulator.",
        subcommands: [
            Run.self, Send.self, Demo.self, KafkaEmbedded.self, Push.self, Feedback.self, Simulate.self, BenchWorker.self, BenchScale.self,
            BenchFailover.self,
            BenchHostile.self, StatusCommand.self,
        ]
    )
}

/// A failure the user can act on: printed as one sentence on stderr, exit code 2.
struct UsageFailure: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

extension AsyncParsableCommand {
    /// Runs `body`, turning ``UsageFailure`` and APNs errors into a sentence and exit code 2.
    func reportingFailures(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let failure as UsageFailure {
            printError(failure.message)
            throw ExitCode(2)
        } catch let error as ExitCode {
            throw error
        } catch {
            printError("\(error)")
            throw ExitCode(2)
        }
    }
}

func printError(_ message: String) {
    FileHandle.standardError.write(Data("apn-worker: \(message)\n".utf8))
}
