import APNSBinary
import APNSCore
import ArgumentParser
import PushCommandLine

/// `apn-worker feedback`: reads the feedback service once and prints one JSON line per tuple.
struct Feedback: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read the feedback service once; print one JSON line per unregistered token."
    )

    @Option(help: "Feedback service address, HOST:PORT.")
    var address: String
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
    @Option(help: "CA certificates (PEM) that sign the service's certificate; default: the system's.")
    var ca: String?
    @Option(help: "The APNs environment the certificate must be valid for (sandbox or production).")
    var environment: APNSEnvironment = .sandbox
    @Option(help: "Seconds without data after which the session ends.")
    var readTimeout = 5
    @Option(help: "HTTP proxy to connect through with a CONNECT tunnel: http://[user:password@]host:port.")
    var proxy: String?

    func run() async throws {
        try await reportingFailures {
            guard (1...86_400).contains(readTimeout) else {
                throw UsageFailure(message: "--read-timeout must be between 1 and 86400 seconds, not \(readTimeout)")
            }
            let (host, port) = try parseAddress(address, option: "--address")
            let credentials = try loadCredentials(
                cert: cert,
                key: key,
                pfx: pfx,
                passphrase: try resolvedPassphrase(passphrase, file: passphraseFile),
                ca: ca,
                environment: environment
            )
            var config = APNSFeedbackClient.Configuration(host: host, port: port, credentials: credentials)
            config.readTimeout = .seconds(readTimeout)
            config.proxy = try parseProxy(proxy)
            let client = try APNSFeedbackClient(configuration: config)
            try await client.fetch(batchSize: 256) { batch in
                for tuple in batch {
                    print(jsonLine([("timestamp", .int(Int64(tuple.timestamp))), ("token", .string(tuple.token.hex))]))
                }
            }
        }
    }
}
