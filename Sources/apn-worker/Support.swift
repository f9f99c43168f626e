import APNSCore
import ArgumentParser
import Foundation
import Logging
import PushCommandLine
import PushSecrets
import ServiceLifecycle

/// Parses `HOST:PORT`.
func parseAddress(_ text: String, option: String) throws -> (host: String, port: Int) {
    guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
        (1...65535).contains(port), colon != text.startIndex
    else {
        throw UsageFailure(message: "\(option) must be HOST:PORT with a port from 1 to 65535, not \"\(text)\"")
    }
    return (String(text[..<colon]), port)
}

/// Reads one hex token per line (blank lines and lines starting with # are skipped).
func readTokens(path: String, option: String) throws -> [DeviceToken] {
    try readLines(path: path, option: option).map { line, number in
        do {
            return try DeviceToken(hex: line)
        } catch let error as APNSError {
            throw UsageFailure(message: "\(option) \(path), line \(number): \(error.message)")
        }
    }
}

/// Reads base64 channel IDs (§7.2), one per line, as the bytes a broadcast submission carries.
func readChannels(path: String) throws -> [DeviceToken] {
    try readLines(path: path, option: "--tokens").map { line, number in
        guard let data = Data(base64Encoded: line), data.base64EncodedString() == line,
            let channel = try? DeviceToken(bytes: data)
        else {
            throw UsageFailure(message: "--tokens \(path), line \(number): \"\(line)\" is not a base64 channel ID")
        }
        return channel
    }
}

/// Reads feedback entries: `TOKEN` or `UNIXTIME TOKEN` per line.
func readFeedbackTuples(path: String, option: String, now: Date = Date()) throws -> [FeedbackTupleInput] {
    try readLines(path: path, option: option).map { line, number in
        let parts = line.split(separator: " ", omittingEmptySubsequences: true)
        var timestamp = UInt32(now.timeIntervalSince1970)
        var tokenText = line
        if parts.count == 2, let t = UInt32(parts[0]) {
            timestamp = t
            tokenText = String(parts[1])
        }
        do {
            return FeedbackTupleInput(timestamp: timestamp, token: try DeviceToken(hex: tokenText))
        } catch let error as APNSError {
            throw UsageFailure(message: "\(option) \(path), line \(number): \(error.message)")
        }
    }
}

struct FeedbackTupleInput {
    var timestamp: UInt32
    var token: DeviceToken
}

func readLines(path: String, option: String) throws -> [(String, Int)] {
    guard let data = FileManager.default.contents(atPath: path) else {
        throw UsageFailure(message: "\(option): cannot read \(path); check that the file exists and is readable")
    }
    var lines: [(String, Int)] = []
    for (index, raw) in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        .enumerated()
    {
        let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        if line.isEmpty || line.hasPrefix("#") { continue }
        lines.append((line, index + 1))
    }
    return lines
}

/// A parent may have started this process with SIGTERM blocked (Foundation's Process passes on
/// the spawning thread's mask): unblock the termination signals, or they would never arrive.
func unblockTerminationSignals() {
    var unblock = sigset_t()
    sigemptyset(&unblock)
    sigaddset(&unblock, SIGINT)
    sigaddset(&unblock, SIGTERM)
    pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
}

/// Runs `services` in one `ServiceGroup` that SIGTERM or SIGINT shuts down gracefully.
/// `whenStarted` runs once the group traps those signals (before that, a SIGTERM would end the
/// process at once): a command announces that it is ready there.
///
/// With `stopWithin`, a graceful shutdown that takes longer is escalated to the cancellation of
/// the services still running, and a cancellation that takes more than 1.5 s ends the process:
/// a stop is bounded whatever the services wait for.
func runUntilTerminated(
    _ services: [any Service],
    logger: Logger,
    stopWithin: Duration? = nil,
    whenStarted: @escaping @Sendable () async -> Void = {}
) async throws {
    unblockTerminationSignals()
    let all: [any Service] = [Announcement(whenStarted: whenStarted)] + services
    var configuration = ServiceGroupConfiguration(
        services: all.map { .init(service: $0) },
        gracefulShutdownSignals: [.sigterm, .sigint],
        logger: logger
    )
    if let stopWithin {
        configuration.maximumGracefulShutdownDuration = stopWithin
        configuration.maximumCancellationDuration = .milliseconds(1500)
    }
    try await ServiceGroup(configuration: configuration).run()
}

/// Waits for SIGINT or SIGTERM (a command whose servers run on their own until then), calling
/// `whenTrapped` once the signals are trapped.
func waitForTerminationSignal(whenTrapped: @escaping @Sendable () -> Void) async {
    try? await runUntilTerminated([], logger: Logger(label: "apn-worker"), whenStarted: whenTrapped)
}

/// The first service of a group: runs a closure when the group starts its services (after it
/// trapped its signals), then waits for the group's graceful shutdown.
private struct Announcement: Service {
    var whenStarted: @Sendable () async -> Void

    func run() async throws {
        await whenStarted()
        try? await gracefulShutdown()
    }
}

/// Loads credentials from the common flags, with a sentence for each problem.
func loadCredentials(
    cert: String?,
    key: String?,
    pfx: String?,
    passphrase: String?,
    ca: String?,
    environment: APNSEnvironment
) throws -> APNSCredentials {
    let caSources = ca.map { [CredentialSource.file($0)] }
    if let pfx { warnIfExposed(pfx, option: "--pfx") }
    if let key { warnIfExposed(key, option: "--key") }
    if let pfx {
        guard cert == nil && key == nil else {
            throw UsageFailure(message: "give either --pfx or --cert with --key, not both")
        }
        return try APNSCredentials(pkcs12: .file(pfx), passphrase: passphrase, ca: caSources, environment: environment)
    }
    guard let cert, let key else {
        throw UsageFailure(message: "credentials are missing: give --cert and --key (PEM files) or --pfx (PKCS#12)")
    }
    return try APNSCredentials(
        certificate: .file(cert),
        key: .file(key),
        passphrase: passphrase,
        ca: caSources,
        environment: environment
    )
}

extension APNSEnvironment: ExpressibleByArgument {}

/// `--proxy`: the proxy a command connects through, `nil` without the option.
func parseProxy(_ url: String?) throws -> APNSProxy? {
    guard let url else { return nil }
    do throws(APNSError) {
        return try APNSProxy(url: url)
    } catch {
        throw UsageFailure(message: "--proxy: \(error.message)")
    }
}

/// The passphrase of `--passphrase` or of `--passphrase-file` (its text without trailing line
/// breaks), `nil` without either. A passphrase file users other than its owner can read is
/// warned of on standard error.
func resolvedPassphrase(_ passphrase: String?, file: String?) throws -> String? {
    guard let file else { return passphrase }
    guard passphrase == nil else {
        throw UsageFailure(message: "give either --passphrase or --passphrase-file, not both")
    }
    return try secretText(file, option: "--passphrase-file", what: "the passphrase")
}

/// The text of a file that holds a secret, for an option (`--passphrase-file PATH`), with a
/// warning on standard error when users other than its owner can read it.
func secretText(_ path: String, option: String, what: String) throws -> String {
    let text: String
    do {
        text = try SecretFile.text(atPath: path)
    } catch {
        switch error {
        case .unreadable:
            throw UsageFailure(message: "\(option): cannot read \(path); check that the file exists and is readable")
        case .notText: throw UsageFailure(message: "\(option): \(path) is not UTF-8 text")
        case .empty: throw UsageFailure(message: "\(option): \(path) is empty; it must hold \(what)")
        }
    }
    warnIfExposed(path, option: option)
    return text
}

/// Warns on standard error when users other than its owner can read the file at `path`, which
/// holds a secret (a private key, a PKCS#12 bundle, a passphrase).
func warnIfExposed(_ path: String, option: String) {
    guard let exposure = SecretFile.exposure(atPath: path) else { return }
    printError(
        "warning: \(option): \(path) holds a secret but users other than its owner can read it (\(exposure)); "
            + "make it readable by its owner only (chmod 600)"
    )
}
