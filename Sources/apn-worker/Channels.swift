import APNSCore
import APNSHTTP2
import ArgumentParser
import Foundation
import PushCommandLine
import PushConfiguration
import PushWorker

/// `apn-worker channels`: manages an app's broadcast channels (`docs/apns-protocol.md` §7) with
/// the credentials of the worker's configuration; prints one JSON line.
struct Channels: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create, list, read or delete an app's broadcast channels (Live Activities).",
        discussion: """
            Uses the app's HTTP/2 credentials and its environment's channelManagement endpoint from the \
            worker's configuration (the same file, variables and flags as `run`). Prints one JSON line; \
            an answer of Apple's that is an error exits 1 with its status and reason.
            """,
        subcommands: [Create.self, List.self, Get.self, Delete.self]
    )

    /// What every subcommand takes: the configuration, the app and its environment.
    struct Target: ParsableArguments {
        @OptionGroup var flags: ConfigurationFlags
        @Option(help: "The configured app whose channels to manage.")
        var app: String
        @Option(name: .customLong("env"), help: "production or sandbox; default: the app's default environment.")
        var environment: APNSEnvironment?

        func configuration() throws -> WorkerConfiguration {
            do {
                return try WorkerConfiguration.load(
                    overrides: flags.overrides,
                    environment: ProcessInfo.processInfo.environment
                )
            } catch {
                throw UsageFailure(message: error.message)
            }
        }

        func manager() throws -> APNSChannelManager {
            let configuration = try configuration()
            do {
                return try ChannelManagement.manager(for: configuration, app: app, environment: environment)
            } catch {
                throw UsageFailure(message: error.message)
            }
        }

        /// Records a channel created or deleted in the workers' channel registry (Redis), so
        /// that broadcasts to it get the expiration its policy allows and it is counted; Apple has
        /// it either way, so a Redis that cannot be reached is a warning, not a failure.
        func record(channel: String, policy: APNSChannelStoragePolicy?) async {
            do {
                try await ChannelManagement.record(
                    channel: channel,
                    policy: policy,
                    app: app,
                    environment: environment,
                    configuration: try configuration()
                )
            } catch {
                printError("warning: \(error); broadcasts to it keep their jobs' expiration")
            }
        }

        /// Runs one request and prints its answer; a configuration problem exits 2 and Apple's
        /// refusal 1, each with its sentence.
        func answer(
            _ body: (APNSChannelManager) async throws(APNSChannelError) -> [(String, JSONValue)]
        )
            async throws
        {
            let manager: APNSChannelManager
            do {
                manager = try self.manager()
            } catch {
                printError("\(error)")
                throw ExitCode(2)
            }
            do {
                let fields = try await body(manager)
                print(jsonLine([("app", .string(app)), ("env", .string(manager.environment.rawValue))] + fields))
            } catch {
                printError(error.description)
                throw ExitCode(1)
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a channel; prints its id.")
        @OptionGroup var target: Target
        @Option(help: "none (no message stored) or most-recent (the latest broadcast kept for offline devices).")
        var storage = "none"

        func run() async throws {
            try await reportingFailures {
                guard let policy = APNSChannelStoragePolicy(name: storage) else {
                    throw UsageFailure(message: "--storage must be none or most-recent, not \"\(storage)\"")
                }
                var created: String? = nil
                try await target.answer { manager throws(APNSChannelError) in
                    let id = try await manager.create(storagePolicy: policy)
                    created = id
                    return [("channel", .string(id)), ("storage", .string(policy.name))]
                }
                if let created { await target.record(channel: created, policy: policy) }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the app's channel ids.")
        @OptionGroup var target: Target

        func run() async throws {
            try await target.answer { manager throws(APNSChannelError) in
                [("channels", .array(try await manager.list().map { .string($0) }))]
            }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a channel's storage policy.")
        @OptionGroup var target: Target
        @Argument(help: "The channel id (base64).")
        var id: String

        func run() async throws {
            try await target.answer { manager throws(APNSChannelError) in
                let policy = try await manager.read(channelID: id)
                return [("channel", .string(id)), ("storage", .string(policy.name))]
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a channel.")
        @OptionGroup var target: Target
        @Argument(help: "The channel id (base64).")
        var id: String

        func run() async throws {
            try await target.answer { manager throws(APNSChannelError) in
                try await manager.delete(channelID: id)
                return [("channel", .string(id)), ("deleted", .bool(true))]
            }
            await target.record(channel: id, policy: nil)
        }
    }
}
