import NIOCore
import NIOPosix
import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A connection over SwiftNIO (and NIOSSL for TLS), with hiredis' parser reading the replies.
///
/// Used for TLS connections, which hiredis 0.14's own socket cannot make. It keeps the
/// contract of ``RedisConnectionCore``: the same handshake, the same replies, error codes
/// and sentences, and the same *broken* state after an I/O error, timeout or protocol error.
/// Requests from concurrent callers are written in call order and matched to their replies
/// in that order by ``RedisChannelHandler``, so they may share the socket without waiting for
/// each other.
actor RedisNIOConnectionCore: RedisConnectionCore {
    /// An open channel and the first failure its handler saw, once it has seen one.
    private struct Live: Sendable {
        let channel: any Channel
        let closeReason: EventLoopFuture<RedisChannelFailure>
    }

    private enum State {
        case connected(Live)
        /// Unusable after the given error; `open()` replaces the channel.
        case broken(RedisError)
        case closed
    }

    let configuration: RedisConfiguration
    private let counter: RoundTripCounter
    private var state: State = .closed

    init(configuration: RedisConfiguration, counter: RoundTripCounter) {
        self.configuration = configuration
        self.counter = counter
    }

    deinit {
        if case .connected(let live) = state {
            live.channel.close(promise: nil)
        }
    }

    private var target: String { "Redis at \(configuration.endpoint)" }

    // MARK: - Lifecycle

    /// Connects (or reconnects), replacing any previous channel.
    func open() async throws(RedisError) {
        close()
        do throws(RedisError) {
            let channel = try await makeChannel()
            state = .connected(channel)
        } catch {
            state = .broken(error)
            throw error
        }
    }

    func close() {
        if case .connected(let live) = state {
            live.channel.close(promise: nil)
        }
        state = .closed
    }

    var isConnected: Bool {
        if case .connected = state { return true }
        return false
    }

    /// Connects within the connect timeout, completes the TLS handshake, then sends AUTH and
    /// SELECT in one round trip (`PING` when neither is needed on TLS, so that a certificate
    /// problem shows here rather than at the first command).
    private func makeChannel() async throws(RedisError) -> Live {
        try configuration.validate()
        let sslContext = try makeSSLContext()
        let sniName = sniName
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let closeReason = loop.makePromise(of: RedisChannelFailure.self)
        let bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(Self.timeAmount(configuration.connectTimeout))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    if let sslContext {
                        try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: sniName))
                    }
                    try sync.addHandler(RedisChannelHandler(closeReason: closeReason))
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.connect(host: configuration.host, port: configuration.port).get()
        } catch {
            closeReason.succeed(.closed)
            throw describe(error, activity: "connecting", connecting: true)
        }
        let live = Live(channel: channel, closeReason: closeReason.futureResult)

        var handshake: [[[UInt8]]] = []
        if let password = configuration.password {
            handshake.append(Self.bytes(["AUTH"] + (configuration.username.map { [$0] } ?? []) + [password]))
        }
        if configuration.database != 0 {
            handshake.append(Self.bytes(["SELECT", String(configuration.database)]))
        }
        if handshake.isEmpty && configuration.tls == nil { return live }
        if handshake.isEmpty { handshake.append(Self.bytes(["PING"])) }

        let replies: [RedisValue]
        do throws(RedisError) {
            replies = try await exchange(
                live,
                try RedisCommands(handshake),
                activity: "completing the TLS handshake and the first command",
                connecting: true
            )
        } catch {
            channel.close(promise: nil)
            throw error
        }
        do throws(RedisError) {
            try configuration.checkHandshake(replies, target: target)
        } catch {
            channel.close(promise: nil)
            throw error
        }
        return live
    }

    /// The NIOSSL context for ``RedisConfiguration/tls``, or `nil` without TLS.
    private func makeSSLContext() throws(RedisError) -> NIOSSLContext? {
        guard let tls = configuration.tls else { return nil }
        var settings = TLSConfiguration.makeClientConfiguration()
        func load<T>(_ what: String, _ path: String, _ body: () throws -> T) throws(RedisError) -> T {
            do {
                return try body()
            } catch {
                throw RedisError(
                    .invalidConfiguration,
                    "cannot use the TLS \(what) file '\(path)' for \(target): \(error); it must be a readable PEM file",
                    detail: String(describing: error)
                )
            }
        }
        if let caFile = tls.caFile {
            let roots = try load("CA", caFile) { try NIOSSLCertificate.fromPEMFile(caFile) }
            settings.trustRoots = .certificates(roots)
        }
        if let certFile = tls.certFile, let keyFile = tls.keyFile {
            let chain = try load("client certificate", certFile) { try NIOSSLCertificate.fromPEMFile(certFile) }
            let key = try load("client key", keyFile) { try NIOSSLPrivateKey(file: keyFile, format: .pem) }
            settings.certificateChain = chain.map { .certificate($0) }
            settings.privateKey = .privateKey(key)
        }
        if !tls.verify { settings.certificateVerification = .none }
        do {
            return try NIOSSLContext(configuration: settings)
        } catch {
            throw RedisError(
                .invalidConfiguration,
                "cannot set up TLS for \(target): \(error)",
                detail: String(describing: error)
            )
        }
    }

    /// The name sent in SNI: the configured server name or the host, unless it is an IP
    /// address (SNI cannot carry one; NIOSSL then checks the certificate for the address).
    private var sniName: String? {
        let name = configuration.tls?.serverName ?? configuration.host
        return (try? SocketAddress(ipAddress: name, port: 0)) == nil ? name : nil
    }

    // MARK: - Commands

    /// One command; an error reply is thrown as `.server`.
    func send(_ command: [[UInt8]]) async throws(RedisError) -> RedisValue {
        try RedisCommands.validate(command)
        let name = RedisCommands.name(of: command)
        let commands = try RedisCommands([command])
        return try await withChannel { live throws(RedisError) in
            let reply = try await exchange(live, commands, activity: "running \(name)")[0]
            if case .error(let line) = reply { throw RedisError.server(line, command: name) }
            return reply
        }
    }

    /// All commands in one round trip; error replies stay in place as `.error` values.
    /// When a reply is `NOSCRIPT` for an `EVALSHA` of one of `scripts`, the scripts are
    /// loaded and only the commands that answered `NOSCRIPT` are sent again, once, in a second
    /// round trip (``NoScriptRetry``).
    func pipeline(_ commands: RedisCommands, scripts: [RedisScript]) async throws(RedisError) -> [RedisValue] {
        try RedisCommands.validate(commands)
        if commands.isEmpty {
            return try await withChannel { _ throws(RedisError) in [] }
        }
        return try await withChannel { live throws(RedisError) in
            let activity = "running a pipeline of \(commands.count) commands"
            let replies = try await exchange(live, commands, activity: activity)
            guard let retry = NoScriptRetry(replies: replies, commands: commands, scripts: scripts) else {
                return replies
            }
            return retry.merge(
                replies,
                try await exchange(live, retry.commands, activity: activity + " again after SCRIPT LOAD")
            )
        }
    }

    /// `SCRIPT LOAD`, returning the SHA-1 Redis computed.
    func scriptLoad(_ source: String) async throws(RedisError) -> String {
        var load = RedisCommands()
        load.scriptLoad(source)
        let reply = try await pipeline(load, scripts: [])[0]
        if case .error(let line) = reply { throw RedisError.server(line, command: "SCRIPT LOAD") }
        guard let sha = reply.string, sha.count == 40 else {
            throw RedisError(.protocol, "\(target) answered SCRIPT LOAD with \(reply), not a SHA-1")
        }
        return sha
    }

    // MARK: - Channel plumbing

    /// Runs `body` with the live channel. An I/O, timeout or protocol error closes the
    /// channel and marks the connection broken, so later calls fail fast.
    private func withChannel<T>(
        _ body: (Live) async throws(RedisError) -> T
    ) async throws(RedisError) -> T {
        switch state {
        case .closed:
            throw .closed(target)
        case .broken(let cause):
            throw .broken(target, by: cause)
        case .connected(let live):
            do throws(RedisError) {
                return try await body(live)
            } catch {
                switch error.code {
                case .connection, .timeout, .protocol:
                    // Another caller may have reconnected meanwhile; only the failed channel breaks.
                    if case .connected(let current) = state, current.channel === live.channel {
                        live.channel.close(promise: nil)
                        state = .broken(error)
                    }
                default:
                    break
                }
                throw error
            }
        }
    }

    /// Writes `commands` in one flush and waits for one reply per command.
    private func exchange(
        _ live: Live,
        _ commands: RedisCommands,
        activity: String,
        connecting: Bool = false
    ) async throws(RedisError) -> [RedisValue] {
        let channel = live.channel
        let bytes = channel.allocator.buffer(bytes: commands.bytes)
        let replies = channel.eventLoop.makePromise(of: [RedisValue].self)
        let written = channel.eventLoop.makePromise(of: Void.self)
        // A write fails when the channel is already closed: the handler never saw the request,
        // and the reason it closed (a TLS alert, say) is in `closeReason`.
        written.futureResult.whenFailure { error in
            live.closeReason.whenComplete { reason in replies.fail((try? reason.get()) ?? error) }
        }
        let timeout = connecting ? configuration.connectTimeout : configuration.commandTimeout
        counter.increment()
        channel.writeAndFlush(
            RedisRequest(bytes: bytes, replyCount: commands.count, timeout: Self.timeAmount(timeout), promise: replies),
            promise: written
        )
        do {
            return try await replies.futureResult.get()
        } catch {
            throw describe(error, activity: activity, connecting: connecting)
        }
    }

    // MARK: - Errors in sentences

    /// Words a channel, connect or TLS failure for a person reading the log.
    private func describe(_ error: any Error, activity: String, connecting: Bool) -> RedisError {
        let detail = String(describing: error)
        switch error {
        case let error as RedisError:
            return error
        case RedisChannelFailure.timeout:
            if connecting {
                let hint = configuration.tls == nil ? "" : " (is the port a TLS port?)"
                return RedisError(
                    .timeout,
                    "cannot connect to \(target): no answer within the connect timeout of \(configuration.connectTimeout) "
                        + "while \(activity)\(hint)",
                    detail: "timeout"
                )
            }
            return RedisError(
                .timeout,
                "\(target) did not answer within the command timeout of \(configuration.commandTimeout) while "
                    + "\(activity); the connection was dropped, call reconnect()",
                detail: "timeout"
            )
        case RedisChannelFailure.closed:
            return lost(
                activity: activity,
                "the server closed the connection",
                detail: "channel closed",
                connecting: connecting
            )
        case RedisChannelFailure.protocol(let cause):
            if cause.code == .protocol {
                return RedisError(
                    .protocol,
                    "\(target) sent a reply that hiredis cannot parse while \(activity): \(cause.message); "
                        + "the connection was dropped",
                    detail: cause.detail
                )
            }
            return RedisError(cause.code, "\(cause.message) while \(activity) on \(target)", detail: cause.detail)
        case RedisChannelFailure.channel(let cause):
            return describe(cause, activity: activity, connecting: connecting)
        case ChannelError.connectTimeout:
            return RedisError(
                .timeout,
                "cannot connect to \(target) within the connect timeout of \(configuration.connectTimeout)",
                detail: detail
            )
        case let error as NIOConnectionError:
            let reasons = error.connectionErrors.map { Self.reason($0.error) }
            let text = reasons.isEmpty ? (error.dnsAError ?? error.dnsAAAAError).map { "\($0)" } ?? detail : reasons[0]
            return RedisError(.connection, "cannot connect to \(target): \(text)", detail: detail)
        case let error as IOError:
            return lost(activity: activity, Self.reason(error), detail: detail, connecting: connecting)
        case let error as NIOSSLExtraError where error == .failedToValidateHostname:
            let name = configuration.tls?.serverName ?? configuration.host
            return RedisError(
                .connection,
                "the TLS certificate of \(target) is not valid for the name '\(name)'; connect with the name the "
                    + "certificate carries, or set the TLS server name to it",
                detail: detail
            )
        case NIOSSLError.uncleanShutdown:
            return lost(
                activity: activity,
                "the server closed the TLS connection",
                detail: detail,
                connecting: connecting
            )
        default:
            return tlsError(detail, activity: activity, connecting: connecting)
        }
    }

    /// A TLS failure, told apart by BoringSSL's reason in the error's description.
    private func tlsError(_ detail: String, activity: String, connecting: Bool) -> RedisError {
        let tls = configuration.tls
        if detail.contains("CERTIFICATE_VERIFY_FAILED") {
            let roots = tls?.caFile.map { "the CA file '\($0)'" } ?? "the system's trust roots"
            return RedisError(
                .connection,
                "cannot verify the TLS certificate of \(target): it is not signed by a CA in \(roots); "
                    + "set the CA file to the CA that issued the server's certificate",
                detail: detail
            )
        }
        if ["CERTIFICATE_REQUIRED", "PEER_DID_NOT_RETURN_A_CERTIFICATE"].contains(where: detail.contains)
            || (tls?.certFile == nil && detail.contains("ALERT_HANDSHAKE_FAILURE"))
        {
            return RedisError(
                .connection,
                "\(target) refused the TLS connection because it requires a client certificate; set the TLS "
                    + "certificate and key files",
                detail: detail
            )
        }
        if ["ALERT_UNKNOWN_CA", "ALERT_BAD_CERTIFICATE", "ALERT_CERTIFICATE_UNKNOWN", "ALERT_DECRYPT_ERROR"]
            .contains(where: detail.contains)
        {
            return RedisError(
                .connection,
                "\(target) rejected the TLS client certificate '\(tls?.certFile ?? "")': it does not trust its issuer",
                detail: detail
            )
        }
        if detail.contains("WRONG_VERSION_NUMBER") {
            return RedisError(
                .connection,
                "cannot connect to \(target) with TLS: the server did not answer in TLS (is it a plain redis:// port?)",
                detail: detail
            )
        }
        if connecting {
            return RedisError(.connection, "cannot connect to \(target): TLS failed: \(detail)", detail: detail)
        }
        return lost(activity: activity, detail, detail: detail, connecting: false)
    }

    private func lost(activity: String, _ text: String, detail: String, connecting: Bool) -> RedisError {
        if connecting {
            return RedisError(.connection, "cannot connect to \(target): \(text) while \(activity)", detail: detail)
        }
        return RedisError(
            .connection,
            "lost the connection to \(target) while \(activity): \(text); call reconnect() once the server is reachable",
            detail: detail
        )
    }

    /// `strerror` of an I/O error ("Connection refused").
    private static func reason(_ error: any Error) -> String {
        guard let error = error as? IOError else { return String(describing: error) }
        return String(cString: strerror(error.errnoCode))
    }

    private static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(max(1, TimeAmount(duration).nanoseconds))
    }

    private static func bytes(_ strings: [String]) -> [[UInt8]] {
        strings.map { Array($0.utf8) }
    }
}
