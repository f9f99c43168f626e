import APNSBinary
import APNSCore
import APNSHTTP2
import APNSHTTP2Core
import ArgumentParser
import Foundation
import Logging
import PushCommandLine

/// `apn-worker push`: sends N notifications through a binary or HTTP/2 pool and prints a
/// summary line.
struct Push: AsyncParsableCommand {
    enum Transport: String, ExpressibleByArgument, CaseIterable {
        case binary, http2
    }

    static let configuration = CommandConfiguration(
        abstract: "Send notifications over the binary protocol or HTTP/2 and print one JSON summary line."
    )

    @Option(help: "binary (legacy gateway) or http2 (provider API).")
    var transport: Transport = .binary
    @Option(help: "HTTP/2: the app's bundle ID (apns-topic).")
    var topic: String?
    @Option(
        help: "HTTP/2 token authentication: the .p8 signing key (with --key-id and --team-id) instead of a certificate."
    )
    var signingKey: String?
    @Option(help: "HTTP/2 token authentication: the signing key's 10-character key ID.")
    var keyId: String?
    @Option(help: "HTTP/2 token authentication: the 10-character team ID.")
    var teamId: String?
    @Option(help: "HTTP/2: most concurrent streams per connection (the server's limit applies below it).")
    var maxStreams = 1000

    @Option(help: "Gateway address, HOST:PORT.")
    var gateway: String
    @Option(help: "Client certificate (PEM).")
    var cert: String?
    @Option(help: "Private key of the certificate (PEM).")
    var key: String?
    @Option(help: "Certificate and key as PKCS#12 instead of --cert/--key.")
    var pfx: String?
    @Option(
        help: ArgumentHelp(
            "Passphrase of the PKCS#12 file or the encrypted PEM key; visible in the process list: prefer "
                + "--passphrase-file."
        )
    )
    var passphrase: String?
    @Option(help: "A file holding the passphrase (a trailing newline is dropped), instead of --passphrase.")
    var passphraseFile: String?
    @Option(help: "CA certificates (PEM) that sign the gateway's certificate; default: the system's.")
    var ca: String?
    @Option(help: "The APNs environment the certificate must be valid for (sandbox or production).")
    var environment: APNSEnvironment = .sandbox
    @Flag(help: "Do not verify the gateway's certificate.")
    var insecure = false
    @Option(help: "HTTP proxy to connect through with a CONNECT tunnel: http://[user:password@]host:port.")
    var proxy: String?
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
    @Flag(
        help:
            "HTTP/2: broadcast a Live Activity update to channels (§7.3); --tokens then holds base64 channel IDs, one per line."
    )
    var broadcast = false
    @Option(help: "Fail unconfirmed notifications of a silently closed connection instead of resending them.")
    var resendOnUnknown = true

    func validate() throws {
        guard count >= 0 else { throw ValidationError("--count must be zero or more, not \(count)") }
        guard connections >= 1 else { throw ValidationError("--connections must be at least 1, not \(connections)") }
        guard (40...65_535).contains(payloadBytes) else {
            throw ValidationError("--payload-bytes must be between 40 and 65535, not \(payloadBytes)")
        }
        guard (1...60_000).contains(confirmationWindowMs) else {
            throw ValidationError("--confirmation-window-ms must be between 1 and 60000, not \(confirmationWindowMs)")
        }
        guard cacheSize >= 1 else { throw ValidationError("--cache-size must be at least 1") }
        guard maxStreams >= 1 else { throw ValidationError("--max-streams must be at least 1, not \(maxStreams)") }
        if transport == .binary && (signingKey != nil || topic != nil) {
            throw ValidationError("--signing-key and --topic are for --transport http2")
        }
        if broadcast && transport != .http2 {
            throw ValidationError("--broadcast needs --transport http2: channels are part of the HTTP/2 API")
        }
        if transport == .http2 && topic == nil {
            throw ValidationError("--transport http2 needs --topic, the app's bundle ID")
        }
        if signingKey != nil && (keyId == nil || teamId == nil) {
            throw ValidationError("--signing-key needs --key-id and --team-id")
        }
    }

    func run() async throws {
        try await reportingFailures {
            let (host, port) = try parseAddress(gateway, option: "--gateway")
            let tokenList = try broadcast ? readChannels(path: tokens) : readTokens(path: tokens, option: "--tokens")
            guard !tokenList.isEmpty else {
                throw UsageFailure(message: "--tokens \(tokens) contains no device token")
            }
            var logger = Logger(label: "apn-worker.push")
            logger.logLevel = .warning
            let notification =
                try broadcast ? makeLiveActivityUpdate(bytes: payloadBytes) : makeNotification(bytes: payloadBytes)
            let client: any APNSDeliveryClient
            switch transport {
            case .binary:
                let credentials = try certificateCredentials()
                var config = APNSBinaryConfiguration(host: host, port: port, credentials: credentials)
                config.verifyServer = !insecure
                config.proxy = try parseProxy(proxy)
                config.maxConnections = connections
                config.confirmationWindow = .milliseconds(confirmationWindowMs)
                config.cacheMaxCount = cacheSize
                config.resendOnUnknown = resendOnUnknown
                config.payloadLimit = max(2048, payloadBytes)
                let binary = try APNSBinaryClient(configuration: config, logger: logger)
                client = binary
            case .http2:
                let authentication = try http2Authentication()
                var config = APNSHTTP2Configuration(
                    host: host,
                    port: port,
                    authentication: authentication,
                    topic: topic ?? ""
                )
                config.proxy = try parseProxy(proxy)
                if signingKey != nil, let ca {
                    do throws(APNSError) {
                        try config.trust([.file(ca)])
                    } catch {
                        throw UsageFailure(message: "--ca: \(error.message)")
                    }
                }
                config.verifyServer = !insecure
                config.maxConnections = connections
                config.maxStreamsPerConnection = maxStreams
                let http2 = try APNSHTTP2Client(configuration: config, logger: logger)
                client = http2
            }

            let started = ContinuousClock.now
            let total = count
            async let summary = Self.collect(client, expected: total)
            do {
                // One notification to many devices: every submission shares its content, so the
                // client checks and encodes it once.
                let content = APNSSubmission.Content(notification: notification, broadcast: broadcast)
                var index = 0
                while index < total {
                    let end = min(total, index + 1024)
                    try await client.send(
                        (index..<end).map { i in
                            APNSSubmission(tag: UInt64(i), token: tokenList[i % tokenList.count], content: content)
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
            var failedByStatus: [String: JSONValue] = [:]
            for (status, n) in result.failed { failedByStatus[String(status.rawValue)] = .int(Int64(n)) }
            print(
                jsonLine([
                    ("notifications", .int(Int64(total))),
                    ("transmitted", .int(Int64(result.transmitted))),
                    ("failed", .object(failedByStatus)),
                    ("retransmitted", .int(Int64(client.snapshot().retransmissions))),
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

    /// The client certificate and key of `--cert`/`--key` or `--pfx`.
    func certificateCredentials() throws -> APNSCredentials {
        try loadCredentials(
            cert: cert,
            key: key,
            pfx: pfx,
            passphrase: try resolvedPassphrase(passphrase, file: passphraseFile),
            ca: ca,
            environment: environment
        )
    }

    /// HTTP/2 authentication: a provider token from `--signing-key`, or the client certificate.
    func http2Authentication() throws -> APNSHTTP2Configuration.Authentication {
        guard let signingKey, let keyId, let teamId else {
            return .certificate(try certificateCredentials())
        }
        warnIfExposed(signingKey, option: "--signing-key")
        do throws(APNSError) {
            let key = try APNSSigningKey(keyID: keyId, file: signingKey)
            return .token(try APNSTokenProvider(signingKey: key, teamID: teamId))
        } catch {
            throw UsageFailure(message: "--signing-key: \(error.message)")
        }
    }

    struct Summary {
        var transmitted = 0
        var failed: [APNSStatus: Int] = [:]
        var possibleDuplicate = 0
        var connections = 0
    }

    static func collect(_ client: any APNSDeliveryClient, expected: Int) async -> Summary {
        var summary = Summary()
        var outcomes = 0
        guard expected > 0 else { return summary }
        while let event = await client.nextEvent() {
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
            case .disconnected(let connection, let reason) where outcomes < expected:
                printError("warning: connection \(connection) closed: \(reason)")
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

    /// A Live Activity update of about `bytes` bytes, for broadcasts (§5.1, §7.3): not stored,
    /// as channels with No Message Stored require.
    func makeLiveActivityUpdate(bytes: Int) throws -> APNSNotification {
        var notification = APNSNotification()
        notification.pushType = APNSPushType.liveactivity.rawValue
        notification.expiry = .immediately
        notification.additionalAPSFields["event"] = .string("update")
        notification.additionalAPSFields["timestamp"] = .int(Int64(Date().timeIntervalSince1970))
        notification.additionalAPSFields["content-state"] = .object(["note": .string("")])
        let base = (try? notification.validatedPayload(limit: 5120, allowLowPriority: true).count) ?? 0
        notification.additionalAPSFields["content-state"] = .object([
            "note": .string(String(repeating: "x", count: max(1, bytes - base)))
        ])
        return notification
    }
}
