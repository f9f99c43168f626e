import APNSCore
import APNSHTTP2Core
import DequeModule
import Foundation
import Logging
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// A client for the HTTP/2 provider API (§3) over a pool of TLS connections, with certificate or
/// provider-token (JWT, §4) authentication.
///
/// Every notification gets exactly one outcome:
/// - 200 is final: `transmitted` (no confirmation window, unlike the binary API);
/// - an error answer is a `transmissionError` whose ``APNSDeliveryOutcome/status`` is the HTTP
///   status and whose ``APNSDeliveryOutcome/reason`` is Apple's reason; a 410 carries its
///   `timestamp` in ``APNSDeliveryOutcome/unregisteredAt``;
/// - §3.4 retry policy: the permanent reasons are never retried; `429 TooManyRequests` and
///   5xx are retried with back-off up to the notification's retry limit; `ExpiredProviderToken`
///   refreshes the shared token once and replaces the connection (§6.10), as do the other
///   reasons that ask for a new connection;
/// - a stream the server certainly did not process (above a GOAWAY's last-stream-id, or
///   `REFUSED_STREAM`) is resent without further ado; a stream left unanswered by a connection
///   that failed is resent marked `possibleDuplicate`, because the server may have processed it.
///
/// Each connection opens as many streams as the server's `SETTINGS_MAX_CONCURRENT_STREAMS`
/// allows (capped by ``APNSHTTP2Configuration/maxStreamsPerConnection``) and follows changes,
/// including drops to 1 (§3.2, §6.8). Waiting notifications are bounded by
/// ``APNSHTTP2Configuration/maxPending``: `send` waits while the client is full.
public final class APNSHTTP2Client: APNSDeliveryClient, APNSPoolStepping {
    typealias Work = HTTP2PoolStateMachine.Work
    /// Requests handed in by one `send` call, and the outcomes of those rejected up front.
    @usableFromInline package typealias Batch = APNSSubmissionBatch<QueuedRequest, APNSDeliveryOutcome>

    /// What the client keeps under its lock.
    @usableFromInline package struct State: APNSPoolClientState {
        var machine: HTTP2PoolStateMachine
        @usableFromInline package var admission: APNSAdmission<Batch>
        var channels: [Int: any Channel] = [:]
        var handlers: [Int: NIOLoopBound<HTTP2ConnectionHandler>] = [:]
        @usableFromInline package var shutdownWaiters: [CheckedContinuation<Void, Never>] = []

        @usableFromInline package var lifecycle: APNSPoolLifecycle { machine.lifecycle }

        @usableFromInline package var events: APNSEventBuffer { machine.events }

        @usableFromInline package mutating func withEventsAndAdmission(
            _ body: (inout APNSEventBuffer, inout APNSAdmission<Batch>) -> Void
        ) {
            body(&machine.events, &admission)
        }

        @usableFromInline package mutating func beginShutdown() -> [HTTP2PoolStateMachine.Action] {
            machine.beginShutdown()
        }

        @usableFromInline package mutating func enqueue(_ batch: Batch) -> [HTTP2PoolStateMachine.Action] {
            machine.enqueue(batch.items, rejected: batch.rejected, tickets: batch.tickets)
        }
    }

    /// What a state-machine step asks for, with channels and handlers already looked up.
    @usableFromInline package struct Effects: APNSPoolEffects {
        var connect: [Int] = []
        var wake: [NIOLoopBound<HTTP2ConnectionHandler>] = []
        var close: [any Channel] = []
        var timers: [HTTP2PoolStateMachine.Action] = []
        /// Token refreshes and log lines.
        var other: [HTTP2PoolStateMachine.Action] = []
        @usableFromInline package var wakeups = APNSWakeups()

        @usableFromInline package init() {}
    }

    public let configuration: APNSHTTP2Configuration
    /// The `:authority` of every request: the server's name, with the port unless it is 443.
    private let authority: String
    /// Each request's `apns-id` (§3.3).
    let apnsIDs = APNSIDGenerator()
    private let state: Mutex<State>
    private let gateway: APNSGateway
    private let logger: Logger
    /// The app's provider tokens (§4), with token authentication; read and signed outside the
    /// lock, never by the state machine.
    private let tokenProvider: APNSTokenProvider?

    /// Creates a client. No connection is opened until ``start()`` or the first ``send(_:)``;
    /// the TLS context is built here, so unusable credentials or trust roots fail now.
    public init(
        configuration: APNSHTTP2Configuration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns.http2")
    ) throws(APNSError) {
        gateway = try configuration.gateway(group: eventLoopGroup) { () throws(APNSError) in
            do {
                return try NIOSSLContext(configuration: configuration.tlsConfiguration())
            } catch {
                throw APNSError(
                    .invalidCredentials,
                    "cannot build a TLS context for the HTTP/2 connections",
                    underlying: error
                )
            }
        }
        self.configuration = configuration
        self.logger = logger
        if case .token(let provider) = configuration.authentication {
            tokenProvider = provider
        } else {
            tokenProvider = nil
        }
        let hostName = configuration.serverHostname ?? configuration.host
        authority = configuration.port == 443 ? hostName : "\(hostName):\(configuration.port)"
        state = Mutex(
            State(
                machine: HTTP2PoolStateMachine(configuration: .init(configuration)),
                admission: APNSAdmission(maxPending: configuration.maxPending)
            )
        )
    }

    // MARK: Public API

    /// Opens the warm connections ahead of the first notification:
    /// ``APNSHTTP2Configuration/minConnections``, and at least one.
    public func start() {
        step { $0.machine.start() }
    }

    /// Hands notifications to the client. Returns once all are queued; waits while the client
    /// is full. Each submission later produces exactly one outcome. A notification that breaks
    /// a §3.3/§5 rule produces a `transmissionError` with ``APNSStatus/invalidPayload`` and a
    /// sentence, without being sent.
    ///
    /// - Throws: ``APNSError`` with code `shutDown` after ``shutdown(gracePeriod:)`` began.
    public func send(_ submissions: [APNSSubmission]) async throws {
        var batch = Batch()
        var cache: (APNSSubmission.Content, Bool, Result<Template, APNSError>)? = nil
        let now = Date()
        let chunk = max(1, min(configuration.maxPending, 1024))
        for submission in submissions {
            let template: Result<Template, APNSError>
            if let cached = cache,
                cached.0 === submission.content
                    || (cached.1 == (submission.payload != nil)
                        && cached.0.notification == submission.content.notification)
            {
                template = cached.2
            } else {
                template = Result { () throws(APNSError) in try makeTemplate(submission, now: now) }
                cache = (submission.content, submission.payload != nil, template)
            }
            switch template {
            case .success(let t):
                add(submission, t, to: &batch)
            case .failure(let error):
                batch.rejected.append(
                    APNSDeliveryOutcome(
                        tag: submission.tag,
                        token: submission.token,
                        status: .invalidPayload,
                        message: error.message,
                        attempts: 0,
                        possibleDuplicate: false
                    )
                )
            }
            if batch.count >= chunk { try await admit(&batch) }
        }
        if batch.count > 0 { try await admit(&batch) }
    }

    /// Sends one notification to one device.
    public func send(_ notification: APNSNotification, to token: DeviceToken, tag: UInt64) async throws {
        try await send([APNSSubmission(tag: tag, token: token, notification: notification)])
    }

    /// Takes the next event, waiting for one; `nil` once the client has shut down and every
    /// event was taken.
    public func nextEvent() async -> APNSDeliveryEvent? {
        await takeEvents(max: 1)?.first
    }

    /// Takes up to `max` events under one lock, waiting for the first if there is none.
    public func nextEvents(max: Int) async -> [APNSDeliveryEvent]? {
        await takeEvents(max: max)
    }

    /// Stops taking notifications, sends everything accepted (retries included), closes every
    /// connection and returns once the last outcome is queued for ``nextEvent()``. With a grace
    /// period, whatever is unsettled when it runs out fails: ``APNSStatus/shutDown`` if waiting
    /// to be sent, ``APNSStatus/indeterminate`` (and `possibleDuplicate`) if on the wire.
    public func shutdown(gracePeriod: Duration? = nil) async {
        let deadline = gracePeriod.map { period in
            gateway.group.next().scheduleTask(in: period.timeAmount) { [self] in
                step { $0.machine.abandon(reason: "the shutdown grace period of \(period) ran out") }
            }
        }
        await State.shutDown(through: step)
        deadline?.cancel()
    }

    /// The pool's connections, streams, queue and counters (see ``APNSPoolSnapshot``), read
    /// under the client's lock.
    public func snapshot() -> APNSPoolSnapshot {
        state.withLock { s in
            var snapshot = s.machine.snapshot()
            s.admission.describe(into: &snapshot)
            return snapshot
        }
    }

    /// The lowest and highest stream limits the client has followed; `nil` before the first.
    var streamLimitsFollowed: ClosedRange<Int>? {
        state.withLock { s in
            s.machine.minLimitSeen <= s.machine.maxLimitSeen ? s.machine.minLimitSeen...s.machine.maxLimitSeen : nil
        }
    }

    // MARK: Called by connection handlers (on their event loops)

    func take(id: Int, free: Bool) -> Work {
        let token = tokenOffer()
        return answer { $0.machine.takeWork(id: id, free: free, token: token) }
    }

    func connectionReady(id: Int, handler: NIOLoopBound<HTTP2ConnectionHandler>, initialLimit: Int?) {
        step { s in
            guard s.machine.connections[id] != nil else { return [] }
            s.handlers[id] = handler
            return s.machine.connectionReady(id: id, initialLimit: initialLimit)
        }
    }

    func updateStreamLimit(id: Int, limit: Int) {
        step { $0.machine.updateStreamLimit(id: id, limit: limit) }
    }

    func goAway(id: Int, reason: String, received: Bool = true) {
        var known = false
        step { s in
            known = s.machine.connections[id] != nil
            return s.machine.goAway(id: id, received: received)
        }
        if known {
            logger.info("HTTP/2 connection draining", metadata: ["apns.connection": "\(id)", "reason": "\(reason)"])
        }
    }

    /// Whether connection `id`, idle for the idle timeout, closes; its handler closes it, with
    /// its own reason.
    func closeIfIdle(id: Int) -> Bool {
        var closing = false
        step { s in
            var actions = s.machine.closeIfIdle(id: id)
            closing = actions.contains(.close(id: id))
            actions.removeAll { $0 == .close(id: id) }
            return actions
        }
        return closing
    }

    func connectionError(id: Int, error: String) {
        step { $0.machine.connectionError(id: id, error: error) }
    }

    /// Requests taken for a connection that could not open streams any more.
    func connectionClosedBeforeWrite(id: Int, requests: [QueuedRequest]) {
        step { $0.machine.connectionClosedBeforeWrite(id: id, requests: requests) }
    }

    /// Settles finished streams and hands the connection its next work.
    func streamsFinished(id: Int, results: [StreamResult], free: Bool) -> Work {
        let token = tokenOffer()
        return answer { $0.machine.streamsFinished(id: id, results: results, free: free, token: token) }
    }

    /// Runs a step whose first action is the work a handler asked for, and returns that work.
    private func answer(_ body: (inout State) -> [HTTP2PoolStateMachine.Action]) -> Work {
        var work = Work()
        step { s in
            let actions = body(&s)
            work = actions.first?.work ?? Work()
            return actions
        }
        return work
    }

    /// The channel of connection `id` is closed; if its handler never reported that, the
    /// connection is removed here.
    private func channelGone(id: Int) {
        let stale = state.withLock { s in
            s.machine.connections[id].map { (wasReady: !$0.state.isConnecting, handler: s.handlers[id]) }
        }
        guard let stale else { return }
        logger.warning(
            "HTTP/2 connection closed without its handler reporting it",
            metadata: ["apns.connection": "\(id)"]
        )
        if let handler = stale.handler {
            // Its streams are the handler's: it reports them as it would have on the close.
            handler.eventLoop.execute { handler.value.reportClosed() }
        } else {
            connectionClosed(id: id, results: [], wasReady: stale.wasReady, reason: "the connection closed")
        }
    }

    func connectionClosed(
        id: Int,
        results: [StreamResult],
        wasReady: Bool,
        reason: String,
        failure: APNSPoolSnapshot.ConnectFailure = .other,
        cause: APNSPoolSnapshot.CloseReason? = nil
    ) {
        step { s in
            s.channels[id] = nil
            s.handlers[id] = nil
            return s.machine.connectionClosed(
                id: id,
                results: results,
                wasReady: wasReady,
                reason: reason,
                failure: failure,
                cause: cause
            )
        }
    }

    // MARK: Plumbing

    /// The provider token for the next step, read (and when due, signed) before the lock is
    /// taken; `nil` with certificate authentication.
    private func tokenOffer() -> HTTP2PoolStateMachine.TokenOffer? {
        guard let tokenProvider else { return nil }
        do {
            return .token(try tokenProvider.currentToken(), now: tokenProvider.now)
        } catch {
            return .failed(error)
        }
    }

    /// Carries out a token refresh or a log line asked for by the state machine.
    private func refreshOrLog(_ action: HTTP2PoolStateMachine.Action) {
        switch action {
        case .refreshToken(let id, let rejected):
            guard let tokenProvider else { return }
            let refresh: String
            do {
                refresh = "\(try tokenProvider.forceRefresh(rejected: rejected))"
            } catch {
                refresh = "failed: \(error)"
            }
            logger.info(
                "APNs answered ExpiredProviderToken; replacing the connection",
                metadata: ["apns.connection": "\(id)", "refresh": "\(refresh)"]
            )
        case .logConnectFailure(let id, let reason, let failures):
            logger.warning(
                "HTTP/2 connection failed",
                metadata: ["apns.connection": "\(id)", "reason": "\(reason)", "failures": "\(failures)"]
            )
        case .logPeerError(let id, let message):
            logger.warning("\(message)", metadata: ["apns.connection": "\(id)"])
        default:
            break
        }
    }

    @usableFromInline package func withBuffer(_ body: (inout APNSEventBuffer, inout APNSAdmission<Batch>) -> Void) {
        bufferStep(body)
    }

    @usableFromInline package func withLockedState(_ body: (inout State) -> Effects) -> Effects {
        state.withLock { body(&$0) }
    }

    @usableFromInline package func collect(
        _ action: HTTP2PoolStateMachine.Action,
        from s: inout State,
        into e: inout Effects
    ) {
        switch action {
        case .work: break  // returned to the handler that asked (``answer(_:)``)
        case .connect(let id): e.connect.append(id)
        case .wake(let id): if let handler = s.handlers[id] { e.wake.append(handler) }
        case .close(let id): if let channel = s.channels[id] { e.close.append(channel) }
        case .armDelayedTimer, .armReconnectTimer: e.timers.append(action)
        case .shutdownComplete: swap(&e.wakeups.shutdown, &s.shutdownWaiters)
        case .refreshToken, .logConnectFailure, .logPeerError: e.other.append(action)
        }
    }

    @usableFromInline package func perform(_ effects: Effects) {
        // A refreshed token is in the provider before any connection asks for its next one.
        for action in effects.other { refreshOrLog(action) }
        for id in effects.connect { connect(id: id) }
        for handler in effects.wake {
            handler.eventLoop.execute { handler.value.pump() }
        }
        for channel in effects.close { channel.close(promise: nil) }
        for timer in effects.timers {
            switch timer {
            case .armDelayedTimer(let due):
                gateway.group.next().scheduleTask(deadline: due) { [self] in step { $0.machine.delayedTimerFired() } }
            case .armReconnectTimer(let due):
                gateway.group.next().scheduleTask(deadline: due) { [self] in step { $0.machine.reconnectTimerFired() } }
            default:
                break
            }
        }
    }

    private func connect(id: Int) {
        let configuration = self.configuration
        let authority = self.authority
        let connected = gateway.connect(
            configure: { $0.channelOption(.socketOption(.tcp_nodelay), value: 1) }
        ) { [self] channel in
            let sync = channel.pipeline.syncOperations
            // The frame layer: preface, SETTINGS (no server push, §3.2), HPACK and flow
            // control; streams are the connection handler's.
            let codec = HTTP2FrameCodec()
            try sync.addHandler(codec)
            try sync.addHandler(
                HTTP2ConnectionHandler(
                    id: id,
                    client: self,
                    codec: codec,
                    authority: authority,
                    configuration: configuration
                )
            )
            return channel
        }
        connected.whenComplete { [self] result in
            switch result {
            case .success(let channel):
                var known = false
                var closing = false
                step { s in
                    known = s.machine.connections[id] != nil
                    guard known else { return [] }
                    s.channels[id] = channel
                    let actions = s.machine.channelAttached(id: id)
                    closing = actions.contains(.close(id: id))
                    return actions
                }
                // The connection handler reports the close (channelInactive), which removes the
                // connection. Should that report never come, the entry would outlive its channel
                // and hold up shutdown; the channel's close future, which settles after the
                // pipeline saw the close, removes it then.
                channel.closeFuture.whenComplete { [self] _ in channelGone(id: id) }
                if !known {
                    // The pool gave it up while it connected.
                    channel.close(promise: nil)
                    return
                }
                if closing { return }
                // TLS, ALPN and the server's SETTINGS must arrive in time.
                channel.eventLoop.scheduleTask(in: gateway.connectTimeout) { [self] in
                    step { $0.machine.connectTimedOut(id: id) }
                }
            case .failure(let error):
                logger.debug("HTTP/2 connect failed", metadata: ["apns.connection": "\(id)", "error": "\(error)"])
                connectionClosed(
                    id: id,
                    results: [],
                    wasReady: false,
                    reason: "cannot connect to \(configuration.host):\(configuration.port): \(error)",
                    failure: APNSPoolSnapshot.ConnectFailure(connectError: error)
                )
            }
        }
    }
}
