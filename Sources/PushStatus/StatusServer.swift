import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The worker's HTTP/1 status server: `GET /metrics` (Prometheus text format),
/// `GET /health/live`, `GET /health/ready` and `GET /status` (JSON of ``WorkerStatus``).
///
/// A swift-service-lifecycle `Service`: ``run()`` listens, serves until graceful shutdown or
/// cancellation, then closes the listener and every connection and returns. Learn the bound
/// address (port 0 picks a free port) with ``listeningAddress()``.
///
/// Each connection is served in a child task of `run()`; answers other than the probes' are
/// computed off the event loop. The server is hardened against clients that misbehave: a bounded request head (`431`),
/// malformed requests (`400`), no request bodies (`413`), and a deadline per request
/// (``Configuration/requestTimeout``) that closes idle, stalled and slow clients. Keep-alive and
/// pipelined requests are supported; `HEAD` answers like `GET` without a body; other methods get
/// `405`, other paths `404`.
///
/// The health probes cannot be starved by clients that hold connections:
///
/// - ``Configuration/maximumConnections`` general slots serve every path with keep-alive; one
///   peer (IP address) holds at most ``Configuration/maximumConnectionsPerPeer`` of them.
/// - A connection the general slots cannot take (all taken, or its peer holds its share) goes to
///   a reserve of ``Configuration/reservedProbeConnections`` slots, open to every peer, which
///   answers one request and closes: `/health/live` and `/health/ready` as usual, any other path
///   `503` with `Retry-After: 1`. A kubelet's probes (a new connection each) are answered there
///   while scrapers hold every general slot. Only a connection the reserve cannot take either is
///   closed at once, without an answer.
/// - A reserve slot is held for one round trip: its request is answered on the event loop,
///   whatever it asks, and a connection there that has not sent its request within
///   ``reserveRequestTimeout`` (or ``Configuration/requestTimeout`` if shorter) is closed. So
///   clients that are turned away and reconnect, or that connect and send nothing, do not keep the
///   reserve full for the probes.
/// - The probes are answered on the connection's event loop as soon as their request has been
///   read (``StatusProbeResponder``), not by the connection's task: a process whose threads are
///   busy does not hold them back.
/// - Once a connection is ``Configuration/maximumConnectionAge`` old, its next answer (or the one
///   in progress) says `Connection: close` and it is closed once that answer is written; an idle
///   one is left to the request timeout. So general slots change hands even under clients that
///   poll faster than the request timeout.
public final class StatusServer: Service, Sendable {
    /// Where and how the server listens.
    public struct Configuration: Sendable {
        /// The address to listen on: `0.0.0.0` (every IPv4 interface), `::`, `127.0.0.1`, or a
        /// host name.
        public var host: String
        /// The port; 0 picks a free one (read it from ``StatusServer/listeningAddress()``).
        public var port: Int
        /// General connection slots: connections served at once, for every path, with keep-alive.
        /// A connection beyond them goes to the probe reserve.
        public var maximumConnections: Int
        /// Slots beyond ``maximumConnections`` for the health probes: a connection admitted there
        /// is answered once and closed, `/health/live` and `/health/ready` as usual, other paths
        /// with `503`. 0 closes every connection beyond the general slots at once.
        public var reservedProbeConnections: Int
        /// General slots one peer (IP address) may hold; its further connections go to the probe
        /// reserve. A Prometheus server holds one connection per target, a kubelet one per probe.
        public var maximumConnectionsPerPeer: Int
        /// The largest request head (the target and the header fields, and any one field) accepted;
        /// a larger one, or one of more than 100 fields, gets `431` and a close. The decoder holds
        /// no more than this of a request.
        public var maximumHeaderBytes: Int
        /// The largest request body accepted (and ignored); a larger one gets `413` and a close.
        public var maximumBodyBytes: Int
        /// A connection that has neither completed a request nor been sent the end of a response
        /// for this long is closed: an idle keep-alive connection, a client that stalls in the
        /// middle of a request or sends it a byte at a time, a client that does not read.
        public var requestTimeout: Duration
        /// How long a connection is kept open: once it is this old, its next answer (or the one in
        /// progress) says `Connection: close`, and it is closed as soon as that answer is written.
        /// An idle connection is left to ``requestTimeout``.
        public var maximumConnectionAge: Duration

        public init(
            host: String = "0.0.0.0",
            port: Int = 9400,
            maximumConnections: Int = 64,
            reservedProbeConnections: Int = 16,
            maximumConnectionsPerPeer: Int = 16,
            maximumHeaderBytes: Int = 16 * 1024,
            maximumBodyBytes: Int = 1024,
            requestTimeout: Duration = .seconds(10),
            maximumConnectionAge: Duration = .seconds(60)
        ) {
            self.host = host
            self.port = port
            self.maximumConnections = maximumConnections
            self.reservedProbeConnections = reservedProbeConnections
            self.maximumConnectionsPerPeer = maximumConnectionsPerPeer
            self.maximumHeaderBytes = maximumHeaderBytes
            self.maximumBodyBytes = maximumBodyBytes
            self.requestTimeout = requestTimeout
            self.maximumConnectionAge = maximumConnectionAge
        }
    }

    /// How long a connection in the probe reserve may take to send its request: a prober sends it
    /// as soon as it has connected.
    public static let reserveRequestTimeout = Duration.seconds(2)

    public let configuration: Configuration
    private let routes: StatusRoutes
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let listener = Mutex(ListenerState.idle(waiters: [:], nextWaiter: 0))
    private let admission: Mutex<StatusAdmission>
    private let isRunning = Atomic<Bool>(false)

    /// - Parameters:
    ///   - registry: the registry `GET /metrics` emits (the worker's metrics, through
    ///     swift-metrics' `PrometheusMetricsFactory(registry:)` or directly).
    ///   - provider: answers the health checks and `/status`.
    ///   - beforeScrape: called at the start of each `GET /metrics`, before the registry is
    ///     emitted, to bring gauges up to date (process metrics, consumer lag). It may be called
    ///     from several connections at once and should take well under a millisecond.
    ///   - eventLoopGroup: the loops the listener and connections run on.
    ///   - logger: the server logs at info when it listens and stops, and at debug per connection.
    public init(
        configuration: Configuration,
        registry: PrometheusCollectorRegistry,
        provider: any StatusProvider,
        beforeScrape: (@Sendable () -> Void)? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) {
        precondition(configuration.maximumConnectionAge > .zero, "maximumConnectionAge must be positive")
        self.configuration = configuration
        self.routes = StatusRoutes(registry: registry, provider: provider, beforeScrape: beforeScrape)
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        self.admission = Mutex(
            StatusAdmission(
                generalLimit: configuration.maximumConnections,
                reserveLimit: configuration.reservedProbeConnections,
                perPeerLimit: configuration.maximumConnectionsPerPeer
            )
        )
    }

    /// The address the server listens on, once ``run()`` has bound it (port 0 is replaced by the
    /// port the system chose). Waits until then; throws ``StatusError`` (`bindFailed`,
    /// `notListening`) if the server failed to bind or stopped first, or `CancellationError`.
    public func listeningAddress() async throws -> SocketAddress {
        let waiter = listener.withLock { state -> Int? in
            guard case .idle(let waiters, let next) = state else { return nil }
            state = .idle(waiters: waiters, nextWaiter: next + 1)
            return next
        }
        guard let waiter else {
            return try listener.withLock { try $0.currentAddress() }
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<SocketAddress, any Error>) in
                let answer = listener.withLock { state -> Result<SocketAddress, any Error>? in
                    switch state {
                    case .idle(var waiters, let next):
                        if Task.isCancelled {
                            return .failure(CancellationError())
                        }
                        waiters[waiter] = continuation
                        state = .idle(waiters: waiters, nextWaiter: next)
                        return nil
                    case .listening, .stopped:
                        return Result { try state.currentAddress() }
                    }
                }
                if let answer {
                    continuation.resume(with: answer)
                }
            }
        } onCancel: {
            let continuation = listener.withLock { state -> CheckedContinuation<SocketAddress, any Error>? in
                guard case .idle(var waiters, let next) = state, let continuation = waiters.removeValue(forKey: waiter)
                else {
                    return nil
                }
                state = .idle(waiters: waiters, nextWaiter: next)
                return continuation
            }
            continuation?.resume(throwing: CancellationError())
        }
    }

    /// The port of ``listeningAddress()``.
    public func listeningPort() async throws -> Int {
        let address = try await listeningAddress()
        guard let port = address.port else {
            throw StatusError(.notListening, "the status server's address \(address) has no port")
        }
        return port
    }

    /// Listens and serves until graceful shutdown or cancellation, then closes the listener and
    /// every open connection and returns. Throws ``StatusError`` `bindFailed` if it cannot
    /// listen, `alreadyRunning` if called a second time.
    public func run() async throws {
        guard !isRunning.exchange(true, ordering: .relaxed) else {
            throw StatusError(.alreadyRunning, "the status server runs only once; make a new StatusServer")
        }
        let server: NIOAsyncChannel<AcceptedConnection, Never>
        do {
            server = try await bind()
        } catch {
            let failure = StatusError(
                .bindFailed,
                "the status server cannot listen on \(configuration.host):\(configuration.port): \(describe(error)); "
                    + "choose another worker.statusAddress or free the port",
                underlying: error
            )
            resolveListener(.stopped(failure))
            throw failure
        }
        guard let address = server.channel.localAddress else {
            let failure = StatusError(.notListening, "the status server's listener closed as soon as it opened")
            resolveListener(.stopped(failure))
            try? await server.channel.close()
            throw failure
        }
        resolveListener(.listening(address))
        logger.info("status server listening", metadata: ["status.address": "\(address)"])

        let stopping = StopFlag()
        defer {
            resolveListener(.stopped(StatusError(.notListening, "the status server has stopped")))
        }
        do {
            try await withTaskCancellationOrGracefulShutdownHandler {
                try await server.executeThenClose { inbound in
                    try await withThrowingDiscardingTaskGroup { group in
                        for try await accepted in inbound {
                            guard let (connection, slot) = accepted.take() else { continue }
                            group.addTask { await self.serve(connection, slot: slot) }
                        }
                        // The listener closed: end the connections too.
                        group.cancelAll()
                    }
                }
            } onCancelOrGracefulShutdown: {
                stopping.set()
                server.channel.close(promise: nil)
            }
        } catch {
            // After shutdown began, an error is the listener's close ending the accept loop.
            guard stopping.isSet else {
                logger.error("status server failed", metadata: ["status.address": "\(address)", "error": "\(error)"])
                throw error
            }
        }
        logger.info("status server stopped", metadata: ["status.address": "\(address)"])
    }

    private func bind() async throws -> NIOAsyncChannel<AcceptedConnection, Never> {
        try await ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: false)
            .bind(host: configuration.host, port: configuration.port) { channel in
                channel.eventLoop.makeCompletedFuture { self.accept(channel) }
            }
    }

    /// Admits a connection into a slot (``StatusAdmission``) and sets up its pipeline, or closes
    /// it; on the connection's event loop.
    private func accept(_ channel: any Channel) -> AcceptedConnection {
        let peer = channel.remoteAddress?.ipAddress ?? "?"
        guard let slot = admission.withLock({ $0.admit(peer: peer) }) else {
            logger.debug(
                "status server refused a connection: every general and reserved slot is taken",
                metadata: ["status.peer": "\(peer)"]
            )
            channel.close(promise: nil)
            return AcceptedConnection(nil)
        }
        channel.closeFuture.whenComplete { _ in self.admission.withLock { $0.release(slot, peer: peer) } }
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = configuration.maximumHeaderBytes
        limits.maxHeaderListSize = configuration.maximumHeaderBytes
        limits.maxHeaderFieldCount = 100
        do {
            let pipeline = channel.pipeline.syncOperations
            try pipeline.configureHTTPServerPipeline(
                withErrorHandling: false,
                withEncoderConfiguration: .init(),
                withDecoderLimitConfiguration: limits
            )
            try pipeline.addHandler(
                StatusRequestGuard(
                    timeout: TimeAmount(
                        slot == .reserve
                            ? min(configuration.requestTimeout, Self.reserveRequestTimeout)
                            : configuration.requestTimeout
                    ),
                    maximumAge: TimeAmount(configuration.maximumConnectionAge),
                    maximumBodyBytes: configuration.maximumBodyBytes
                )
            )
            try pipeline.addHandler(StatusProbeResponder(routes: routes, slot: slot))
            let connection = try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(
                wrappingChannelSynchronously: channel
            )
            return AcceptedConnection((connection, slot))
        } catch {
            // A failure here must not end the accept loop: drop this connection only.
            logger.debug("status server could not set up a connection", metadata: ["error": "\(error)"])
            channel.close(promise: nil)
            return AcceptedConnection(nil)
        }
    }

    /// Answers the requests of one connection in order until the client closes, asks to close,
    /// or the server stops. A connection in the reserve is answered once, then closed.
    private func serve(
        _ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>,
        slot: StatusAdmission.Slot
    ) async {
        do {
            try await connection.executeThenClose { inbound, outbound in
                var request: HTTPRequestHead?
                for try await part in inbound {
                    switch part {
                    case .head(let head):
                        request = head
                    case .body:
                        continue
                    case .end:
                        guard let head = request else { continue }
                        request = nil
                        let keepAlive = head.isKeepAlive && slot == .general
                        // A reserve connection's request is answered by StatusProbeResponder.
                        try await outbound.write(
                            contentsOf: routes.response(to: head).parts(for: head, keepAlive: keepAlive)
                        )
                        if !keepAlive {
                            return
                        }
                    }
                }
            }
        } catch {
            logger.debug("status server connection ended", metadata: ["error": "\(error)"])
        }
    }

    private func resolveListener(_ new: ListenerState) {
        let waiters = listener.withLock { state -> [CheckedContinuation<SocketAddress, any Error>] in
            let waiters: [CheckedContinuation<SocketAddress, any Error>]
            if case .idle(let pending, _) = state {
                waiters = Array(pending.values)
            } else {
                waiters = []
            }
            state = new
            return waiters
        }
        let answer = Result { try new.currentAddress() }
        for waiter in waiters {
            waiter.resume(with: answer)
        }
    }
}

/// What the listener's channel initializer hands to the accept loop: a connection to serve with
/// the slot it was admitted into, or none (closed at once: every general and reserved slot was
/// taken, or its pipeline could not be set up).
///
/// A connection accepted while the server stops may still be queued when the accept loop ends,
/// and is then released without ever being served. A `NIOAsyncChannel` released before
/// `executeThenClose` is a precondition failure in SwiftNIO ("Deinited NIOAsyncWriter without
/// calling finish()"), so one never taken by the loop is finished and closed here.
private final class AcceptedConnection: Sendable {
    typealias Admitted = (NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, StatusAdmission.Slot)
    private let connection: Mutex<Admitted?>

    init(_ connection: Admitted?) {
        self.connection = Mutex(connection)
    }

    /// The connection and its slot, now the caller's to serve with `executeThenClose`; `nil` if
    /// refused.
    func take() -> Admitted? {
        connection.withLock { connection in
            defer { connection = nil }
            return connection
        }
    }

    deinit {
        guard let (unserved, _) = take() else { return }
        unserved.outbound.finish()
        unserved.channel.close(promise: nil)
    }
}

private enum ListenerState {
    /// Not listening yet; callers of `listeningAddress()` wait here.
    case idle(waiters: [Int: CheckedContinuation<SocketAddress, any Error>], nextWaiter: Int)
    case listening(SocketAddress)
    case stopped(StatusError)

    func currentAddress() throws -> SocketAddress {
        switch self {
        case .idle:
            throw StatusError(.notListening, "the status server is not listening yet")
        case .listening(let address):
            return address
        case .stopped(let error):
            throw error
        }
    }
}

/// Set once graceful shutdown or cancellation has begun; errors after it are the listener closing.
private final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)

    func set() {
        value.store(true, ordering: .releasing)
    }

    var isSet: Bool {
        value.load(ordering: .acquiring)
    }
}

/// A short description of a socket error (`connection refused`, `address already in use`).
func describe(_ error: any Error) -> String {
    if let error = error as? IOError {
        return String(cString: strerror(error.errnoCode)).lowercased()
    }
    return "\(error)"
}
