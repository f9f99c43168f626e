import APNSBinary
import APNSCore
import APNSSimulator
import ArgumentParser
import Foundation

/// `apn-worker simulate`: runs the APNs simulator until SIGINT/SIGTERM.
struct Simulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a simulated APNs binary gateway and feedback service over TLS.",
        discussion: "Prints one JSON line with the ports once listening; on SIGINT/SIGTERM prints statistics and exits."
    )

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"
    @Option(help: "Binary gateway port (0 picks a free one).")
    var binaryPort = 0
    @Option(help: "Feedback service port (0 picks a free one).")
    var feedbackPort = 0
    @Option(help: "Server certificate chain (PEM).")
    var cert: String?
    @Option(help: "Server private key (PEM).")
    var key: String?
    @Option(help: "CA (PEM) that client certificates must chain to; without it no client certificate is asked for.")
    var clientCa: String?
    @Option(help: "Generate test certificates into this directory and use them (instead of --cert/--key/--client-ca).")
    var generateCerts: String?
    @Option(help: "File of hex tokens answered with status 8 (invalid token).")
    var badTokens: String?
    @Option(help: "File of feedback entries (TOKEN or UNIXTIME TOKEN per line), served once.")
    var feedbackTokens: String?
    @Option(help: "Delay before an error packet, in milliseconds.")
    var errorDelayMs = 0
    @Option(help: "Send status 10 (shutdown) after every N notifications accepted on a connection.")
    var shutdownEvery: Int?
    @Option(help: "Close a connection silently after every N notifications accepted on it.")
    var dropEvery: Int?
    @Option(help: "Payload size limit in bytes.")
    var maxPayload = 2048
    @Option(help: "Append one JSON line per accepted notification to this file.")
    var record: String?

    func validate() throws {
        guard (0...65535).contains(binaryPort) else { throw ValidationError("--binary-port must be 0...65535") }
        guard (0...65535).contains(feedbackPort) else { throw ValidationError("--feedback-port must be 0...65535") }
        guard errorDelayMs >= 0 else { throw ValidationError("--error-delay-ms must be zero or more") }
        if let n = shutdownEvery, n < 1 { throw ValidationError("--shutdown-every must be at least 1") }
        if let n = dropEvery, n < 1 { throw ValidationError("--drop-every must be at least 1") }
        guard (1...65535).contains(maxPayload) else { throw ValidationError("--max-payload must be 1...65535") }
    }

    func run() async throws {
        try await reportingFailures {
            var certPEM: String
            var keyPEM: String
            var caPEM: String?
            if let dir = generateCerts {
                let certs = try TestCertificates()
                try certs.write(to: dir)
                certPEM = certs.server.certificatePEM
                keyPEM = certs.server.keyPEM
                caPEM = certs.ca.certificatePEM
            } else {
                guard let cert, let key else {
                    throw UsageFailure(message: "give --cert and --key for the server certificate, or --generate-certs DIR")
                }
                certPEM = try readText(cert, option: "--cert")
                keyPEM = try readText(key, option: "--key")
                caPEM = try clientCa.map { try readText($0, option: "--client-ca") }
            }
            var config = APNSSimulator.Configuration(certificateChainPEM: certPEM, privateKeyPEM: keyPEM, clientCAPEM: caPEM)
            config.host = host
            config.binaryPort = binaryPort
            config.feedbackPort = feedbackPort
            config.errorDelay = .milliseconds(errorDelayMs)
            config.shutdownEvery = shutdownEvery
            config.dropEvery = dropEvery
            config.maxPayload = maxPayload
            config.recordPath = record
            if let badTokens {
                config.badTokens = Set(try readTokens(path: badTokens, option: "--bad-tokens"))
            }
            if let feedbackTokens {
                config.feedback = try readFeedbackTuples(path: feedbackTokens, option: "--feedback-tokens").map {
                    FeedbackTuple(timestamp: $0.timestamp, token: $0.token)
                }
            }
            let simulator: APNSSimulator
            do {
                simulator = try await APNSSimulator.start(configuration: config)
            } catch {
                throw UsageFailure(message: "the simulator cannot start: \(error)")
            }
            var ready: [(String, JSONValue)] = [
                ("event", .string("ready")),
                ("host", .string(host)),
                ("binaryPort", .int(Int64(simulator.binaryPort))),
                ("feedbackPort", .int(Int64(simulator.feedbackPort ?? 0))),
            ]
            if let dir = generateCerts { ready.append(("certificates", .string(dir))) }
            print(jsonLine(ready))
            fflush(nil)
            await waitForTerminationSignal()
            await simulator.stop()
            let s = simulator.statistics
            print(
                jsonLine([
                    ("event", .string("stopped")),
                    ("connections", .int(Int64(s.connections))),
                    ("accepted", .int(Int64(s.accepted))),
                    ("errorResponses", .int(Int64(s.errorResponses))),
                    ("shutdowns", .int(Int64(s.shutdowns))),
                    ("silentDrops", .int(Int64(s.silentDrops))),
                    ("feedbackSessions", .int(Int64(s.feedbackSessions))),
                ])
            )
            fflush(nil)
        }
    }

    private func readText(_ path: String, option: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw UsageFailure(message: "\(option): cannot read \(path); check that the file exists and is readable")
        }
        return String(decoding: data, as: UTF8.self)
    }
}
