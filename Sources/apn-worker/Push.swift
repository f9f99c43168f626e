import APNSBinary
import APNSCore
import ArgumentParser
import Foundation
import Logging

/// `apn-worker push`: sends N notifications through the binary pool and prints a summary line.
struct Push: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send notifications to a binary gateway and print one JSON summary line."
    )

    @Option(help: "Gateway address, HOST:PORT.")
    var gateway: String
    @Option(help: "Client certificate (PEM).")
    var cert: String?
    @Option(help: "Private key of the certificate (PEM).")
    var key: String?
    @Option(help: "Certificate and key as PKCS#12 instead of --cert/--key.")
    var pfx: String?
    @Option(help: "Passphrase of the PKCS#12 file or the encrypted PEM key.")
    var passphrase: String?
    @Option(help: "CA certificates (PEM) that sign the gateway's certificate; default: the system's.")
    var ca: String?
    @Option(help: "The APNs environment the certificate must be valid for (sandbox or production).")
    var environment: APNSEnvironment = .sandbox
    @Flag(help: "Do not verify the gateway's certificate.")
    var insecure = false
    @Option(help: "File with one hex device token per line; notifications cycle through it.")
    var tokens: String
    @Option(help: "Number of notifications to send.")
    var count: Int
    @Option(help: "Connections in the pool.")
    var connections = 1
    @Option(help: "Approximate payload size in bytes.")
    var payloadBytes = 128
    @Option(help: "Confirmation window in milliseconds.")
    var confirmationWindowMs = 1000
    @Option(help: "Sent-cache size per connection, in notifications.")
    var cacheSize = 50_000
    @Option(help: "Fail unconfirmed notifications of a silently closed connection instead of resending them.")
    var resendOnUnknown = true

    func validate() throws {
        guard count >= 0 else { throw ValidationError("--count must be zero or more, not \(count)") }
        guard connections >= 1 else { throw ValidationError("--connections must be at least 1, not \(connections)") }
        guard (40...65_535).contains(payloadBytes) else {
            throw ValidationError("--payload-bytes must be between 40 and 65535, not \(payloadBytes)")
        }
        guard confirmationWindowMs >= 1 else { throw ValidationError("--confirmation-window-ms must be at least 1") }
        guard cacheSize >= 1 else { throw ValidationError("--cache-size must be at least 1") }
    }

    func run() async throws {
        try await reportingFailures {
            let (host, port) = try parseAddress(gateway, option: "--gateway")
            let tokenList = try readTokens(path: tokens, option: "--tokens")
            guard !tokenList.isEmpty else {
                throw UsageFailure(message: "--tokens \(tokens) contains no device token")
            }
            let credentials = try loadCredentials(
                cert: cert, key: key, pfx: pfx, passphrase: passphrase, ca: ca, environment: environment
            )
            var config = APNSBinaryConfiguration(host: host, port: port, credentials: credentials)
            config.verifyServer = !insecure
            config.maxConnections = connections
            config.confirmationWindow = .milliseconds(confirmationWindowMs)
            config.cacheMaxCount = cacheSize
            config.resendOnUnknown = resendOnUnknown
            config.payloadLimit = max(2048, payloadBytes)
            var logger = Logger(label: "apn-worker.push")
            logger.logLevel = .warning
            let client = try APNSBinaryClient(configuration: config, logger: logger)
            let notification = try makeNotification(bytes: payloadBytes)

            let started = ContinuousClock.now
            let total = count
            async let summary = Self.collect(client.events, expected: total)
            do {
                var index = 0
                while index < total {
                    let end = min(total, index + 1024)
                    try await client.send(
                        (index..<end).map { i in
                            APNSSubmission(tag: UInt64(i), token: tokenList[i % tokenList.count], notification: notification)
                        }
                    )
                    index = end
                }
            } catch {
                await client.shutdown()
                throw error
            }
            let result = await summary
            await client.shutdown()
            let elapsed = ContinuousClock.now - started
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let stats = client.statistics
            var failedByStatus: [String: JSONValue] = [:]
            for (status, n) in result.failed { failedByStatus[String(status.rawValue)] = .int(Int64(n)) }
            print(
                jsonLine([
                    ("notifications", .int(Int64(total))),
                    ("transmitted", .int(Int64(result.transmitted))),
                    ("failed", .object(failedByStatus)),
                    ("retransmitted", .int(Int64(stats.retransmitted))),
                    ("possibleDuplicate", .int(Int64(result.possibleDuplicate))),
                    ("connectionsOpened", .int(Int64(result.connections))),
                    ("seconds", .double((seconds * 1000).rounded() / 1000)),
                    ("rate", .double(seconds > 0 ? (Double(total) / seconds).rounded() : 0)),
                ])
            )
            if result.transmitted + result.failed.values.reduce(0, +) != total {
                throw UsageFailure(message: "internal error: outcomes do not add up to \(total)")
            }
        }
    }

    struct Summary {
        var transmitted = 0
        var failed: [APNSStatus: Int] = [:]
        var possibleDuplicate = 0
        var connections = 0
    }

    static func collect(_ events: APNSBinaryClient.Events, expected: Int) async -> Summary {
        var summary = Summary()
        var outcomes = 0
        guard expected > 0 else { return summary }
        for await event in events {
            switch event {
            case .transmitted(let o):
                summary.transmitted += 1
                if o.possibleDuplicate { summary.possibleDuplicate += 1 }
            case .transmissionError(let o):
                summary.failed[o.status!, default: 0] += 1
                if o.possibleDuplicate { summary.possibleDuplicate += 1 }
            case .connected:
                summary.connections += 1
            case .error(let error):
                printError("warning: \(error)")
            default:
                break
            }
            if event.outcome != nil {
                outcomes += 1
                if outcomes == expected { break }
            }
        }
        return summary
    }

    /// A notification whose payload is about `bytes` long.
    func makeNotification(bytes: Int) throws -> APNSNotification {
        var notification = APNSNotification()
        notification.alert = .text(String(repeating: "x", count: bytes))
        notification.badge = 1
        notification.sound = .named("default")
        notification.expiry = .after(.seconds(3600))
        do {
            try notification.trim(toFit: bytes)
        } catch {
            throw UsageFailure(message: "--payload-bytes \(bytes) is too small for a notification: \(error.message)")
        }
        return notification
    }
}
