import APNSBinary
import APNSCore
import APNSHTTP2Core
import APNSSimulator
import ArgumentParser
import Foundation
import PushCommandLine

/// `apn-worker simulate`: runs the APNs simulator until SIGINT/SIGTERM.
struct Simulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Run a simulated APNs binary gateway and feedback service, and optionally the HTTP/2 provider API, over TLS.",
        discussion: """
            Prints one JSON line with the ports once listening; on SIGINT/SIGTERM prints statistics and exits. \
            --http2-port starts the HTTP/2 endpoint (ALPN h2): client-certificate connections need --client-ca \
            (or --generate-certs), token connections need --jwt-key and --team; it also serves Apple's channel \
            management and broadcast requests (/1/apps/…, /4/broadcasts/apps/…). See docs/simulator.md.
            """
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
    @Option(
        help:
            "Append one JSON line per accepted notification to this file (both APIs; HTTP/2 lines carry \"api\":\"http2\")."
    )
    var record: String?

    // HTTP/2 provider API (§3, §4).
    @Option(help: "HTTP/2 provider API port (0 picks a free one); without it no HTTP/2 server runs.")
    var http2Port: Int?
    @Option(
        help: ArgumentHelp(
            "A provider-token key: KEYID=PEMFILE, the PEM being the .p8 private key or the public key. Repeatable.",
            valueName: "keyid=pemfile"
        )
    )
    var jwtKey: [String] = []
    @Option(help: "The team ID of the --jwt-key keys (required with --jwt-key).")
    var team: String?
    @Option(help: "SETTINGS_MAX_CONCURRENT_STREAMS once a connection is authenticated.")
    var maxStreams = 1000
    @Flag(
        name: .customLong("drop-streams-to-1-after-error"),
        help: "After an error answer (not 410) drop the connection's stream limit to 1 until its next 200."
    )
    var dropStreamsToOneAfterError = false
    @Option(
        name: .customLong("goaway-every"),
        help: "Send GOAWAY after every N requests accepted on an HTTP/2 connection, then close it."
    )
    var goAwayEvery: Int?
    @Option(
        name: .customLong("status-429-every"),
        help: "Answer every Nth valid HTTP/2 request (over all connections) with 429 TooManyRequests."
    )
    var status429Every: Int?
    @Option(help: "Delay each HTTP/2 answer by this many milliseconds.")
    var delayMs = 0
    @Option(help: "The environment the HTTP/2 endpoint plays: production or sandbox.")
    var environment: APNSEnvironment = .production
    @Option(
        help:
            "The HTTP/2 frame layer: native (the project's own, fast) or nio-http2 (swift-nio-http2's, an independent check of a client)."
    )
    var http2Framing: APNSHTTP2Simulator.Configuration.Framing = .native
    @Option(help: "Broadcast channels per app; one more is refused with 400 CannotCreateChannelConfig.")
    var maxChannels = 10_000
    @Option(
        help:
            "File of base64 channel IDs, one per line, that exist from the start (No Message Stored) for the bundle ID --channel-topic names."
    )
    var channels: String?
    @Option(help: "The bundle ID whose channels --channels creates.")
    var channelTopic: String?

    func validate() throws {
        guard (0...65535).contains(binaryPort) else { throw ValidationError("--binary-port must be 0...65535") }
        guard (0...65535).contains(feedbackPort) else { throw ValidationError("--feedback-port must be 0...65535") }
        guard errorDelayMs >= 0 else { throw ValidationError("--error-delay-ms must be zero or more") }
        if let n = shutdownEvery, n < 1 { throw ValidationError("--shutdown-every must be at least 1") }
        if let n = dropEvery, n < 1 { throw ValidationError("--drop-every must be at least 1") }
        guard (1...65535).contains(maxPayload) else { throw ValidationError("--max-payload must be 1...65535") }
        if let port = http2Port, !(0...65535).contains(port) { throw ValidationError("--http2-port must be 0...65535") }
        guard (1...Int(Int32.max)).contains(maxStreams) else {
            throw ValidationError("--max-streams must be at least 1")
        }
        if let n = goAwayEvery, n < 1 { throw ValidationError("--goaway-every must be at least 1") }
        if let n = status429Every, n < 1 { throw ValidationError("--status-429-every must be at least 1") }
        guard delayMs >= 0 else { throw ValidationError("--delay-ms must be zero or more") }
        guard maxChannels >= 0 else { throw ValidationError("--max-channels must be zero or more") }
        if (channels == nil) != (channelTopic == nil) {
            throw ValidationError(
                "--channels and --channel-topic go together: the file of channel IDs and their bundle ID"
            )
        }
        for value in jwtKey {
            guard let equals = value.firstIndex(of: "="), equals != value.startIndex,
                value.index(after: equals) != value.endIndex
            else {
                throw ValidationError(
                    "--jwt-key must be KEYID=PEMFILE, such as ABCDE12345=AuthKey_ABCDE12345.p8, not \"\(value)\""
                )
            }
        }
        if !jwtKey.isEmpty && team == nil {
            throw ValidationError("--jwt-key needs --team with the keys' 10-character team ID")
        }
        if team != nil && jwtKey.isEmpty { throw ValidationError("--team needs at least one --jwt-key KEYID=PEMFILE") }
        if http2Port == nil {
            let http2Only = [
                (!jwtKey.isEmpty, "--jwt-key"), (team != nil, "--team"), (goAwayEvery != nil, "--goaway-every"),
                (status429Every != nil, "--status-429-every"),
                (dropStreamsToOneAfterError, "--drop-streams-to-1-after-error"),
                (maxChannels != 10_000, "--max-channels"), (channels != nil, "--channels"),
            ]
            if let (_, flag) = http2Only.first(where: { $0.0 }) {
                throw ValidationError("\(flag) applies to the HTTP/2 endpoint; add --http2-port (0 picks a free port)")
            }
        }
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
                    throw UsageFailure(
                        message: "give --cert and --key for the server certificate, or --generate-certs DIR"
                    )
                }
                certPEM = try readText(cert, option: "--cert")
                keyPEM = try readText(key, option: "--key")
                caPEM = try clientCa.map { try readText($0, option: "--client-ca") }
            }
            var config = APNSSimulator.Configuration(
                certificateChainPEM: certPEM,
                privateKeyPEM: keyPEM,
                clientCAPEM: caPEM
            )
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
            let http2Config = try http2Port.map { port in
                try http2Configuration(port: port, certPEM: certPEM, keyPEM: keyPEM, caPEM: caPEM, binary: config)
            }
            let simulator: APNSSimulator
            do {
                simulator = try await APNSSimulator.start(configuration: config)
            } catch {
                throw UsageFailure(message: "the simulator cannot start: \(error)")
            }
            let preloaded = try channels.map { try readLines(path: $0, option: "--channels").map(\.0) } ?? []
            var http2: APNSHTTP2Simulator?
            if let http2Config {
                do {
                    http2 = try await APNSHTTP2Simulator.start(configuration: http2Config)
                } catch {
                    await simulator.stop()
                    throw UsageFailure(message: "the HTTP/2 simulator cannot start: \(error)")
                }
            }
            if let http2, let channelTopic {
                for id in preloaded
                where http2.createChannel(bundleID: channelTopic, storagePolicy: .noMessageStored, id: id) == nil {
                    await http2.stop()
                    await simulator.stop()
                    throw UsageFailure(
                        message:
                            "--channels: \"\(id)\" is not a base64 channel ID, is repeated, or is over --max-channels"
                    )
                }
            }
            var ready: [(String, JSONValue)] = [
                ("event", .string("ready")),
                ("host", .string(host)),
                ("binaryPort", .int(Int64(simulator.binaryPort))),
                ("feedbackPort", .int(Int64(simulator.feedbackPort ?? 0))),
            ]
            if let http2 { ready.append(("http2Port", .int(Int64(http2.port)))) }
            if let dir = generateCerts { ready.append(("certificates", .string(dir))) }
            let line = jsonLine(ready)
            await waitForTerminationSignal {
                print(line)
                fflush(nil)
            }
            await http2?.stop()
            await simulator.stop()
            let s = simulator.statistics
            var stopped: [(String, JSONValue)] = [
                ("event", .string("stopped")),
                ("connections", .int(Int64(s.connections))),
                ("accepted", .int(Int64(s.accepted))),
                ("errorResponses", .int(Int64(s.errorResponses))),
                ("shutdowns", .int(Int64(s.shutdowns))),
                ("silentDrops", .int(Int64(s.silentDrops))),
                ("feedbackSessions", .int(Int64(s.feedbackSessions))),
            ]
            if let h = http2?.statistics {
                stopped.append(
                    (
                        "http2",
                        .object([
                            "connections": .int(Int64(h.connections)),
                            "requests": .int(Int64(h.requests)),
                            "accepted": .int(Int64(h.accepted)),
                            "rejected": .int(Int64(h.rejected)),
                            "rejectionsByReason": .object(h.rejectionsByReason.mapValues { .int(Int64($0)) }),
                            "goAways": .int(Int64(h.goAways)),
                            "tooManyRequests": .int(Int64(h.tooManyRequests)),
                            "maxConcurrentStreamsSeen": .int(Int64(h.maxConcurrentStreamsSeen)),
                            "streamLimitViolations": .int(Int64(h.streamLimitViolations)),
                            "settingsChanges": .int(Int64(h.settingsChanges)),
                            "channelOperations": .int(Int64(h.channelOperations)),
                            "broadcasts": .int(Int64(h.broadcasts)),
                            "channels": .int(Int64(h.channels)),
                        ])
                    )
                )
            }
            print(jsonLine(stopped))
            fflush(nil)
        }
    }

    /// The HTTP/2 endpoint's configuration from the flags; the token lists are the binary
    /// simulator's (bad tokens: 400 BadDeviceToken; feedback tokens: 410 Unregistered).
    private func http2Configuration(
        port: Int,
        certPEM: String,
        keyPEM: String,
        caPEM: String?,
        binary: APNSSimulator.Configuration
    ) throws -> APNSHTTP2Simulator.Configuration {
        var config = APNSHTTP2Simulator.Configuration(
            certificateChainPEM: certPEM,
            privateKeyPEM: keyPEM,
            clientCAPEM: caPEM
        )
        config.host = host
        config.port = port
        config.environment = environment
        config.framing = http2Framing
        // The command reports counts (and --record writes every request); a list of accepted
        // requests in memory is for library users, and would grow with every request.
        config.acceptedListLimit = 0
        config.maxConcurrentStreams = maxStreams
        config.dropStreamsToOneAfterError = dropStreamsToOneAfterError
        config.goAwayEvery = goAwayEvery
        config.status429Every = status429Every
        config.maxChannelsPerApp = maxChannels
        config.responseDelay = .milliseconds(delayMs)
        config.recordPath = record
        config.badTokens = binary.badTokens
        // §2 timestamps are seconds; the 410 timestamp is milliseconds (§3.4).
        for tuple in binary.feedback {
            config.unregistered[tuple.token] = Date(timeIntervalSince1970: TimeInterval(tuple.timestamp))
        }
        if let team {
            var keys: [String: String] = [:]
            for value in jwtKey {
                let equals = value.firstIndex(of: "=")!
                let keyID = String(value[..<equals])
                keys[keyID] = try readText(String(value[value.index(after: equals)...]), option: "--jwt-key \(keyID)")
            }
            do {
                config.verifier = try APNSHTTP2Simulator.verifier(teamID: team, keys: keys)
            } catch {
                throw UsageFailure(message: "--jwt-key/--team: \(error.message)")
            }
        }
        return config
    }

    private func readText(_ path: String, option: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw UsageFailure(message: "\(option): cannot read \(path); check that the file exists and is readable")
        }
        return String(decoding: data, as: UTF8.self)
    }
}
extension APNSHTTP2Simulator.Configuration.Framing: ExpressibleByArgument {}
