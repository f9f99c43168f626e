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
public final class APNSHTTP2Client: APNSDeliveryClient {
    /// What a connection handler is asked to do next.
    struct Work: Sendable {
        var requests: [QueuedRequest] = []
        var authorization: String?
        var close = false
    }

    private enum Phase { case connecting, ready, draining }

    private struct Connection {
        var id: Int
        var phase: Phase = .connecting
        var handler: NIOLoopBound<HTTP2ConnectionHandler>?
        var eventLoop: (any EventLoop)?
        var channel: (any Channel)?
        /// Streams this connection may have open: the server's limit, capped by ours.
        var limit: Int = 1
        var open = 0
        var wakeScheduled = false
        var tokenGuard = APNSConnectionTokenGuard()
        var currentToken: APNSProviderToken?
        var closeRequested = false
    }

    private struct Delayed {
        var due: NIODeadline
        var request: QueuedRequest
    }

    private struct SubmitWaiter {
        var id: Int
        var items: [QueuedRequest]
        var rejected: [APNSDeliveryOutcome]
        var continuation: CheckedContinuation<Void, any Error>
        var count: Int { items.count + rejected.count }
    }

    private struct State {
        var queue = Deque<QueuedRequest>()
        var delayed: [Delayed] = []
        var delayedTimerDue: NIODeadline?
        var connections: [Int: Connection] = [:]
        var nextConnectionID = 0
        var consecutiveFailures = 0
        /// ``APNSDeliveryEvent/unavailable(reason:)`` was reported and no connection opened since.
        var reportedUnavailable = false
        var reconnectAt: NIODeadline?
        var reconnectTimerArmed = false
        var events = Deque<APNSDeliveryEvent>()
        var connectionEvents = 0
        var droppedConnectionEvents = 0
        var eventWaiter: CheckedContinuation<Void, Never>?
        var admitted = 0
        var submitWaiters = Deque<SubmitWaiter>()
        var nextWaiterID = 0
        var stopping = false
        var abandoning = false
        var finished = false
        var shutdownWaiters: [CheckedContinuation<Void, Never>] = []
        // Statistics.
        var written = 0
        var retried = 0
        var goAways = 0
        var maxLimitSeen = 0
        var minLimitSeen = Int.max
    }

    /// Side effects collected under the lock and carried out after it.
    private struct Effects {
        var connect: [Int] = []
        var wake: [NIOLoopBound<HTTP2ConnectionHandler>] = []
        var close: [any Channel] = []
        var armDelayedTimer: NIODeadline?
        var armReconnectTimer: NIODeadline?
        var resumeEvents: CheckedContinuation<Void, Never>?
        var resumeSubmitters: [CheckedContinuation<Void, any Error>] = []
        var resumeShutdown: [CheckedContinuation<Void, Never>] = []
    }

    public let configuration: APNSHTTP2Configuration
    private let state = Mutex(State())
    private let group: any EventLoopGroup
    private let sslContext: NIOSSLContext
    private let logger: Logger
    /// Each request's `apns-id` (§3.3).
    private let apnsIDs = APNSIDGenerator()
    private let tokenProvider: APNSTokenProvider?
    private let authority: String
    /// Connection events kept for the reader at most; more are counted and dropped.
    private static let maxConnectionEvents = 1_000

    /// Creates a client. No connection is opened until ``start()`` or the first ``send(_:)``.
    public init(
        configuration: APNSHTTP2Configuration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns.http2")
    ) throws(APNSError) {
        try configuration.validate()
        self.configuration = configuration
        self.group = eventLoopGroup
        self.logger = logger
        if case .token(let provider) = configuration.authentication {
            tokenProvider = provider
        } else {
            tokenProvider = nil
        }
        do {
            sslContext = try NIOSSLContext(configuration: configuration.tlsConfiguration())
        } catch {
            throw APNSError(.invalidCredentials, "cannot build a TLS context for the HTTP/2 connections", underlying: error)
        }
        let hostName = configuration.serverHostname ?? configuration.host
        authority = configuration.port == 443 ? hostName : "\(hostName):\(configuration.port)"
    }

    // MARK: Public API

    /// Opens one connection ahead of the first notification.
    public func start() {
        perform { s, e in
            if s.connections.isEmpty && !s.stopping { openConnection(&s, &e) }
        }
    }

    /// Hands notifications to the client. Returns once all are queued; waits while the client
    /// is full. Each submission later produces exactly one outcome. A notification that breaks
    /// a §3.3/§5 rule produces a `transmissionError` with ``APNSStatus/invalidPayload`` and a
    /// sentence, without being sent.
    ///
    /// - Throws: ``APNSError`` with code `shutDown` after ``shutdown(gracePeriod:)`` began.
    public func send(_ submissions: [APNSSubmission]) async throws {
        var items: [QueuedRequest] = []
        var rejected: [APNSDeliveryOutcome] = []
        var cache: (APNSSubmission.Content, Bool, Result<Template, APNSError>)? = nil
        let now = Date()
        let chunk = max(1, min(configuration.maxPending, 1024))
        for submission in submissions {
            let template: Result<Template, APNSError>
            if let cached = cache, cached.0 === submission.content
                || (cached.1 == (submission.payload != nil) && cached.0.notification == submission.notification) {
                template = cached.2
            } else {
                template = Result { () throws(APNSError) in try makeTemplate(submission, now: now) }
                cache = (submission.content, submission.payload != nil, template)
            }
            switch template {
            case .success(let t):
                var body = t.body
                if let payload = submission.payload {
                    guard !payload.isEmpty, payload.count <= t.pushType.payloadLimit else {
                        var outcome = APNSDeliveryOutcome(
                            tag: submission.tag, token: submission.token, status: .invalidPayload,
                            message: "the payload is \(payload.count) bytes; push type \(t.pushType.rawValue) needs 1 to \(t.pushType.payloadLimit)",
                            attempts: 0, possibleDuplicate: false)
                        outcome.reason = nil
                        rejected.append(outcome)
                        continue
                    }
                    body = payload
                }
                items.append(QueuedRequest(
                    tag: submission.tag, token: submission.token, path: submission.token.bytes.withUnsafeBufferPointer { DeviceToken.lowercaseHex($0, prefix: "/3/device/") }, body: body,
                    pushType: t.pushType, topic: t.topic, priority: t.priority, expiration: t.expiration,
                    collapseID: t.collapseID, apnsID: apnsIDs.next(),
                    retryLimit: t.retryLimit, staleAt: submission.content.staleAt))
            case .failure(let error):
                rejected.append(APNSDeliveryOutcome(
                    tag: submission.tag, token: submission.token, status: .invalidPayload, message: error.message,
                    attempts: 0, possibleDuplicate: false))
            }
            if items.count + rejected.count >= chunk {
                try await admit(items, rejected)
                items.removeAll(keepingCapacity: true)
                rejected.removeAll(keepingCapacity: true)
            }
        }
        if !items.isEmpty || !rejected.isEmpty {
            try await admit(items, rejected)
        }
    }

    /// Sends one notification to one device.
    public func send(_ notification: APNSNotification, to token: DeviceToken, tag: UInt64) async throws {
        try await send([APNSSubmission(tag: tag, token: token, notification: notification)])
    }

    /// Takes the next event, waiting for one; `nil` once the client has shut down and every
    /// event was taken.
    public func nextEvent() async -> APNSDeliveryEvent? {
        await nextEvents(max: 1)?.first
    }

    /// Takes up to `max` events under one lock, waiting for the first if there is none.
    public func nextEvents(max: Int) async -> [APNSDeliveryEvent]? {
        while true {
            var taken: [APNSDeliveryEvent] = []
            var finished = false
            perform { s, e in
                var outcomes = 0
                while taken.count < Swift.max(1, max), let event = s.events.popFirst() {
                    taken.append(event)
                    if event.outcome == nil { s.connectionEvents -= 1 } else { outcomes += 1 }
                }
                if taken.isEmpty {
                    finished = s.finished
                    return
                }
                if outcomes > 0 {
                    s.admitted -= outcomes
                    admitWaiters(&s, &e)
                }
            }
            if !taken.isEmpty { return taken }
            if finished { return nil }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s -> Bool in
                    if !s.events.isEmpty || s.finished { return true }
                    s.eventWaiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        }
    }

    /// Stops taking notifications, sends everything accepted (retries included), closes every
    /// connection and returns once the last outcome is queued for ``nextEvent()``. With a grace
    /// period, whatever is unsettled when it runs out fails: ``APNSStatus/shutDown`` if waiting
    /// to be sent, ``APNSStatus/indeterminate`` (and `possibleDuplicate`) if on the wire.
    public func shutdown(gracePeriod: Duration? = nil) async {
        let deadline = gracePeriod.map { period in
            group.next().scheduleTask(in: period.timeAmount) { [self] in
                perform { s, e in abandon(&s, &e, reason: "the shutdown grace period of \(period) ran out") }
            }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            var rejected: [SubmitWaiter] = []
            perform { s, e in
                s.stopping = true
                rejected = Array(s.submitWaiters)
                s.submitWaiters.removeAll()
                if s.finished {
                    e.resumeShutdown.append(continuation)
                } else {
                    s.shutdownWaiters.append(continuation)
                    checkFinished(&s, &e)
                }
            }
            for waiter in rejected {
                waiter.continuation.resume(throwing: APNSError(.shutDown, "the client shut down before these notifications were queued"))
            }
        }
        deadline?.cancel()
    }

    /// Snapshot counters.
    public struct Statistics: Sendable, Hashable {
        public var queued: Int
        public var delayed: Int
        public var inFlight: Int
        public var connections: Int
        /// Requests written, retries included.
        public var written: Int
        public var retried: Int
        public var goAways: Int
        /// The highest and lowest stream limits the client has followed.
        public var maxStreamLimit: Int
        public var minStreamLimit: Int
        public var droppedConnectionEvents: Int
    }

    public var statistics: Statistics {
        state.withLock { s in
            Statistics(
                queued: s.queue.count, delayed: s.delayed.count,
                inFlight: s.connections.values.reduce(0) { $0 + $1.open },
                connections: s.connections.count, written: s.written, retried: s.retried, goAways: s.goAways,
                maxStreamLimit: s.maxLimitSeen, minStreamLimit: s.minLimitSeen == .max ? 0 : s.minLimitSeen,
                droppedConnectionEvents: s.droppedConnectionEvents)
        }
    }

    // MARK: Building requests

    private struct Template {
        var pushType: APNSPushType
        var topic: String
        var priority: UInt8
        var expiration: UInt32
        var collapseID: String?
        var body: [UInt8]
        var retryLimit: Int
    }

    /// Runs the §3.3/§5 checks once per distinct notification and builds its payload.
    private func makeTemplate(_ submission: APNSSubmission, now: Date) throws(APNSError) -> Template {
        let notification = submission.notification
        let pushType = try notification.resolvedPushType()
        let topic: String
        if pushType == .mdm {
            guard let mdmTopic = configuration.mdmTopic else {
                throw APNSError(.invalidRequest, "an mdm notification needs the app's mdmTopic (the topic of the MDM push certificate)")
            }
            topic = mdmTopic
        } else {
            topic = pushType.topic(bundleID: configuration.topic)
        }
        let authentication: APNSAuthentication
        switch configuration.authentication {
        case .certificate: authentication = .certificate
        case .token(let provider): authentication = .token(try provider.currentToken())
        }
        try APNSHTTP2Request.validateHeaders(
            topic: topic, pushType: pushType, priority: notification.priority,
            authentication: authentication, collapseID: notification.collapseId)
        try APNSHTTP2Request.validateContent(of: notification, pushType: pushType)
        var body: [UInt8] = []
        if submission.payload == nil {
            do {
                // §1.3: 4096 bytes, 5120 for VoIP; priority 1 exists on HTTP/2 (§3.3).
                body = try notification.validatedPayload(limit: pushType.payloadLimit, allowLowPriority: true)
            } catch {
                throw APNSError(.invalidPayload, error.message, underlying: error)
            }
        }
        return Template(
            pushType: pushType, topic: topic, priority: notification.priority.rawValue,
            expiration: notification.expiry.unixSeconds(now: now), collapseID: notification.collapseId, body: body,
            retryLimit: notification.retryLimit ?? configuration.defaultRetryLimit)
    }

    // MARK: Admission

    private func admit(_ items: [QueuedRequest], _ rejected: [APNSDeliveryOutcome]) async throws {
        let count = items.count + rejected.count
        let waiterID = state.withLock { s -> Int in
            s.nextWaiterID += 1
            return s.nextWaiterID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                perform { s, e in
                    if s.stopping {
                        continuation.resume(throwing: APNSError(.shutDown, "the client is shutting down and takes no new notifications"))
                        return
                    }
                    if s.submitWaiters.isEmpty && (s.admitted + count <= configuration.maxPending || s.admitted == 0) {
                        enqueue(&s, &e, items, rejected)
                        e.resumeSubmitters.append(continuation)
                    } else {
                        s.submitWaiters.append(SubmitWaiter(id: waiterID, items: items, rejected: rejected, continuation: continuation))
                    }
                }
            }
        } onCancel: {
            let waiter = state.withLock { s -> SubmitWaiter? in
                guard let index = s.submitWaiters.firstIndex(where: { $0.id == waiterID }) else { return nil }
                return s.submitWaiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    private func enqueue(_ s: inout State, _ e: inout Effects, _ items: [QueuedRequest], _ rejected: [APNSDeliveryOutcome]) {
        s.admitted += items.count + rejected.count
        for outcome in rejected { s.events.append(.transmissionError(outcome)) }
        s.queue.append(contentsOf: items)
        dispatch(&s, &e)
    }

    private func admitWaiters(_ s: inout State, _ e: inout Effects) {
        while let waiter = s.submitWaiters.first, s.admitted + waiter.count <= configuration.maxPending || s.admitted == 0 {
            s.submitWaiters.removeFirst()
            enqueue(&s, &e, waiter.items, waiter.rejected)
            e.resumeSubmitters.append(waiter.continuation)
        }
    }

    // MARK: Scheduling

    /// Opens connections while there is work and room, and wakes connections with free streams.
    private func dispatch(_ s: inout State, _ e: inout Effects) {
        guard !s.queue.isEmpty else { return }
        let live = s.connections.values.filter { $0.phase != .draining }.count
        if live < configuration.maxConnections {
            let now = NIODeadline.now()
            if let at = s.reconnectAt, at > now {
                if !s.reconnectTimerArmed {
                    s.reconnectTimerArmed = true
                    e.armReconnectTimer = at
                }
            } else {
                for _ in live..<configuration.maxConnections { openConnection(&s, &e) }
            }
        }
        var waiting = s.queue.count
        for id in s.connections.keys.sorted() where waiting > 0 {
            guard var connection = s.connections[id], connection.phase == .ready, !connection.wakeScheduled,
                  connection.open < connection.limit, let handler = connection.handler else { continue }
            connection.wakeScheduled = true
            waiting -= connection.limit - connection.open
            s.connections[id] = connection
            e.wake.append(handler)
        }
    }

    private func openConnection(_ s: inout State, _ e: inout Effects) {
        s.nextConnectionID += 1
        let id = s.nextConnectionID
        s.connections[id] = Connection(id: id)
        e.connect.append(id)
    }

    /// Work for connection `id`: up to its free streams from the queue, with its token.
    private func takeWork(_ s: inout State, _ e: inout Effects, id: Int, free: Bool) -> Work {
        guard s.connections[id] != nil else { return Work(close: true) }
        s.connections[id]!.wakeScheduled = false
        if !free && s.connections[id]!.phase == .ready {
            s.connections[id]!.phase = .draining
            dispatch(&s, &e)
        }
        var connection = s.connections[id]!
        if connection.phase == .draining && connection.open == 0 {
            s.connections[id]!.closeRequested = true
            return Work(close: true)
        }
        guard connection.phase == .ready, !s.queue.isEmpty, connection.open < connection.limit else { return Work() }
        var work = Work()
        if let provider = tokenProvider {
            // §4: one token shared by the app's connections; a connection changes it at most
            // once per 20 minutes (the guard), never per request.
            let offered: APNSProviderToken
            do {
                offered = try provider.currentToken()
            } catch {
                failAll(&s, &e, status: .connectionFailed, message: "cannot sign a provider token: \(error.message)")
                return Work()
            }
            switch connection.tokenGuard.token(offered: offered, now: provider.now) {
            case .use(let token):
                connection.currentToken = token
                work.authorization = token.authorization
            case .reconnect:
                connection.phase = .draining
                connection.closeRequested = connection.open == 0
                s.connections[id] = connection
                dispatch(&s, &e)
                return Work(close: connection.open == 0)
            }
        }
        let count = min(connection.limit - connection.open, s.queue.count)
        work.requests.reserveCapacity(count)
        for _ in 0..<count { work.requests.append(s.queue.removeFirst()) }
        connection.open += count
        s.connections[id] = connection
        s.written += count
        return work
    }

    // MARK: Called by connection handlers (on their event loops)

    func take(id: Int, free: Bool) -> Work {
        var work = Work()
        perform { s, e in work = takeWork(&s, &e, id: id, free: free) }
        return work
    }

    func connectionReady(id: Int, handler: NIOLoopBound<HTTP2ConnectionHandler>, initialLimit: Int?) {
        perform { s, e in
            guard var connection = s.connections[id] else { return }
            connection.phase = connection.phase == .connecting ? .ready : connection.phase
            connection.handler = handler
            if let initialLimit { connection.limit = clampLimit(initialLimit) }
            else { connection.limit = min(100, configuration.maxStreamsPerConnection) }  // RFC 7540 §6.5.2: unlimited; be modest
            note(limit: connection.limit, &s)
            s.connections[id] = connection
            s.consecutiveFailures = 0
            s.reconnectAt = nil
            emitConnectionEvent(&s, &e, .connected(connection: id))
            if s.reportedUnavailable {
                s.reportedUnavailable = false
                emitConnectionEvent(&s, &e, .available, force: true)
            }
            dispatch(&s, &e)
        }
    }

    func updateStreamLimit(id: Int, limit: Int) {
        perform { s, e in
            guard var connection = s.connections[id] else { return }
            connection.limit = clampLimit(limit)
            note(limit: connection.limit, &s)
            s.connections[id] = connection
            dispatch(&s, &e)
        }
    }

    func goAway(id: Int, reason: String) {
        perform { s, e in
            guard var connection = s.connections[id] else { return }
            if connection.phase != .draining { s.goAways += 1 }
            connection.phase = .draining
            s.connections[id] = connection
            logger.info("HTTP/2 connection draining", metadata: ["apns.connection": "\(id)", "reason": "\(reason)"])
            dispatch(&s, &e)
        }
    }

    func closeIfIdle(id: Int) -> Bool {
        state.withLock { s in
            guard var connection = s.connections[id], connection.open == 0, s.queue.isEmpty else { return false }
            connection.phase = .draining
            connection.closeRequested = true
            s.connections[id] = connection
            return true
        }
    }

    func connectionError(id: Int, error: String) {
        perform { s, e in emitConnectionEvent(&s, &e, .socketError(connection: id, error: error)) }
    }

    /// Requests taken for a connection that could not open streams any more.
    func connectionClosedBeforeWrite(id: Int, requests: [QueuedRequest]) {
        perform { s, e in
            s.written -= requests.count
            if var connection = s.connections[id] {
                connection.open -= requests.count
                connection.phase = .draining
                s.connections[id] = connection
            }
            for request in requests.reversed() { s.queue.prepend(request) }
            dispatch(&s, &e)
        }
    }

    /// Settles finished streams and hands the connection its next work.
    func streamsFinished(id: Int, results: [StreamResult], free: Bool) -> Work {
        var work = Work()
        perform { s, e in
            if !results.isEmpty {
                if var connection = s.connections[id] {
                    connection.open -= results.count
                    s.connections[id] = connection
                }
                for result in results { settle(&s, &e, result, connection: id) }
            }
            work = takeWork(&s, &e, id: id, free: free)
            dispatch(&s, &e)
            checkFinished(&s, &e)
        }
        return work
    }

    /// The channel of connection `id` is closed; if its handler never reported that, the
    /// connection is removed here.
    private func channelGone(id: Int) {
        let stale = state.withLock { s in
            s.connections[id].map { (wasReady: $0.phase != .connecting, handler: $0.handler) }
        }
        guard let stale else { return }
        logger.warning("HTTP/2 connection closed without its handler reporting it", metadata: ["apns.connection": "\(id)"])
        if let handler = stale.handler {
            // Its streams are the handler's: it reports them as it would have on the close.
            handler.eventLoop.execute { handler.value.reportClosed() }
        } else {
            connectionClosed(id: id, results: [], wasReady: stale.wasReady, reason: "the connection closed")
        }
    }

    func connectionClosed(id: Int, results: [StreamResult], wasReady: Bool, reason: String) {
        perform { s, e in
            let connection = s.connections.removeValue(forKey: id)
            for result in results { settle(&s, &e, result, connection: id) }
            emitConnectionEvent(&s, &e, .disconnected(connection: id, reason: reason))
            if !wasReady && connection?.closeRequested != true {
                s.consecutiveFailures += 1
                logger.warning("HTTP/2 connection failed", metadata: [
                    "apns.connection": "\(id)", "reason": "\(reason)", "failures": "\(s.consecutiveFailures)",
                ])
                let anyReady = s.connections.values.contains { $0.phase != .connecting }
                if !anyReady && s.consecutiveFailures >= APNSReconnectBackoff.unavailableAfter && !s.reportedUnavailable {
                    s.reportedUnavailable = true
                    emitConnectionEvent(&s, &e, .unavailable(reason:
                        "\(s.consecutiveFailures) connection attempts to \(configuration.host):\(configuration.port) failed in a row (last: \(reason))"),
                        force: true)
                }
                if !anyReady { failStale(&s) }
                if let limit = configuration.connectionRetryLimit, s.consecutiveFailures >= limit {
                    failAll(&s, &e, status: .connectionFailed,
                        message: "could not connect to \(configuration.host):\(configuration.port) after \(s.consecutiveFailures) attempts: \(reason)")
                    s.consecutiveFailures = 0
                } else {
                    let delay = APNSReconnectBackoff.delay(
                        afterFailures: s.consecutiveFailures, base: configuration.reconnectBaseDelay,
                        maximum: configuration.reconnectMaxDelay)
                    // Jitter between half and all of the delay.
                    let nanos = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
                    let jittered = nanos / 2 + Int64.random(in: 0...max(1, nanos / 2))
                    s.reconnectAt = .now() + .nanoseconds(jittered)
                }
            }
            dispatch(&s, &e)
            checkFinished(&s, &e)
        }
    }

    // MARK: Settling

    private func settle(_ s: inout State, _ e: inout Effects, _ result: StreamResult, connection id: Int) {
        switch result {
        case .answered(let request, let status, let headers, let body):
            if status == 200 {
                s.events.append(.transmitted(request.outcome(status: nil)))
                return
            }
            let response = APNSHTTP2Response(
                status: status, headers: headers.map { APNSHTTP2Header($0.name, $0.value) }, body: body)
            let failure = APNSHTTP2Failure(status: status, reason: response.reason, timestamp: response.errorBody?.timestamp)
            switch response.outcome {
            case .delivered:
                s.events.append(.transmitted(request.outcome(status: nil)))
            case .deviceTokenInvalid(let failure), .rejected(let failure):
                report(&s, request, failure)
            case .retry:
                var request = request
                request.lastFailure = failure
                if failure.reason == .expiredProviderToken, let provider = tokenProvider {
                    // §6.10: refresh once (the provider never signs twice in 20 minutes) and
                    // replace this connection, which would keep answering ExpiredProviderToken.
                    let rejected = s.connections[id]?.currentToken
                    let refresh = try? provider.forceRefresh(rejected: rejected)
                    logger.info("APNs answered ExpiredProviderToken; replacing the connection", metadata: [
                        "apns.connection": "\(id)", "refresh": "\(refresh.map { "\($0)" } ?? "failed")",
                    ])
                }
                if failure.replaceConnection, var connection = s.connections[id] {
                    connection.phase = .draining
                    s.connections[id] = connection
                }
                guard request.retries < request.retryLimit else {
                    report(&s, request, failure, gaveUp: true)
                    return
                }
                request.retries += 1
                s.retried += 1
                if failure.retry == .onNewConnection {
                    s.queue.prepend(request)
                } else {
                    let exponent = Double(request.retries - 1)
                    let delay = min(configuration.retryBaseDelay.seconds * pow(2, exponent), configuration.retryMaxDelay.seconds)
                    schedule(&s, &e, request, after: delay)
                }
            }
        case .unprocessed(let request):
            // Never reached the server's processing: send again, same flags.
            var request = request
            request.attempts -= 1
            s.queue.prepend(request)
        case .unknown(let request, let reason):
            var request = request
            request.possibleDuplicate = true
            if s.abandoning || request.attempts >= configuration.maxAttempts {
                s.events.append(.transmissionError(request.outcome(
                    status: .indeterminate,
                    message: "no answer after \(request.attempts) attempt(s); the server may have accepted it (\(reason))")))
            } else {
                s.retried += 1
                s.queue.prepend(request)
            }
        }
    }

    private func report(_ s: inout State, _ request: QueuedRequest, _ failure: APNSHTTP2Failure, gaveUp: Bool = false) {
        let meaning = failure.reason?.entry?.meaning ?? APNSStatus(rawValue: failure.status).reason
        let message = gaveUp ? "\(meaning); gave up after \(request.retries) retries" : meaning
        let unregisteredAt = failure.status == 410 ? failure.timestamp.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } : nil
        s.events.append(.transmissionError(request.outcome(
            status: APNSStatus(rawValue: failure.status), message: message,
            reason: failure.reason?.rawValue, unregisteredAt: unregisteredAt)))
    }

    private func schedule(_ s: inout State, _ e: inout Effects, _ request: QueuedRequest, after seconds: Double) {
        let due = NIODeadline.now() + .nanoseconds(Int64(seconds * 1e9))
        s.delayed.append(Delayed(due: due, request: request))
        if s.delayedTimerDue.map({ due < $0 }) ?? true {
            s.delayedTimerDue = due
            e.armDelayedTimer = due
        }
    }

    private func releaseDelayed(_ s: inout State, _ e: inout Effects) {
        let now = NIODeadline.now()
        s.delayedTimerDue = nil
        var later: [Delayed] = []
        for item in s.delayed {
            if item.due <= now { s.queue.append(item.request) } else { later.append(item) }
        }
        s.delayed = later
        if let next = later.map(\.due).min() {
            s.delayedTimerDue = next
            e.armDelayedTimer = next
        }
        dispatch(&s, &e)
    }

    /// While no connection is open: fails the queued notifications whose `staleAt` has passed.
    private func failStale(_ s: inout State) {
        guard s.queue.contains(where: { $0.staleAt != nil }) || s.delayed.contains(where: { $0.request.staleAt != nil }) else {
            return
        }
        let now = APNSReconnectBackoff.nowMilliseconds()
        func stale(_ request: QueuedRequest) -> Bool { request.staleAt.map { $0 <= now } ?? false }
        func fail(_ request: QueuedRequest) {
            s.events.append(.transmissionError(request.possibleDuplicate
                ? request.outcome(status: .indeterminate,
                                  message: "went stale while the server was unreachable; an earlier attempt was left unanswered, so the server may have it")
                : request.outcome(status: .expired, message: "went stale while the server was unreachable; not sent")))
        }
        s.queue.filter(stale).forEach(fail)
        s.queue.removeAll(where: stale)
        s.delayed.filter { stale($0.request) }.forEach { fail($0.request) }
        s.delayed.removeAll { stale($0.request) }
    }

    private func failAll(_ s: inout State, _ e: inout Effects, status: APNSStatus, message: String) {
        // A notification that an earlier connection may have delivered is never reported as
        // "not sent" (a caller would send it again without the flag): its fate is unknown.
        func outcome(_ request: QueuedRequest) -> APNSDeliveryOutcome {
            guard request.possibleDuplicate else { return request.outcome(status: status, message: message) }
            return request.outcome(status: .indeterminate,
                message: "\(message); an earlier attempt was left unanswered, so the server may have it")
        }
        while let request = s.queue.popFirst() {
            s.events.append(.transmissionError(outcome(request)))
        }
        for item in s.delayed {
            s.events.append(.transmissionError(outcome(item.request)))
        }
        s.delayed.removeAll()
        emitConnectionEvent(&s, &e, .error(APNSError(.connectionFailed, message)), force: true)
    }

    private func abandon(_ s: inout State, _ e: inout Effects, reason: String) {
        guard !s.finished else { return }
        s.abandoning = true
        failAll(&s, &e, status: .shutDown, message: "not sent: \(reason)")
        for connection in s.connections.values {
            if let channel = connection.channel { e.close.append(channel) }
        }
        checkFinished(&s, &e)
    }

    /// While stopping: once nothing is left to send or answer, closes the connections, and
    /// finishes when the last one is gone.
    private func checkFinished(_ s: inout State, _ e: inout Effects) {
        guard s.stopping, !s.finished, s.queue.isEmpty, s.delayed.isEmpty else { return }
        guard !s.connections.values.contains(where: { $0.open > 0 }) else { return }
        for (id, connection) in s.connections where !connection.closeRequested {
            guard let channel = connection.channel else { continue }  // closed once connected
            s.connections[id]!.closeRequested = true
            e.close.append(channel)
        }
        if s.connections.isEmpty {
            s.finished = true
            e.resumeShutdown += s.shutdownWaiters
            s.shutdownWaiters = []
        }
    }

    private func emitConnectionEvent(_ s: inout State, _ e: inout Effects, _ event: APNSDeliveryEvent, force: Bool = false) {
        if s.connectionEvents >= Self.maxConnectionEvents && !force {
            s.droppedConnectionEvents += 1
            return
        }
        s.connectionEvents += 1
        s.events.append(event)
    }

    private func clampLimit(_ limit: Int) -> Int { max(0, min(limit, configuration.maxStreamsPerConnection)) }

    private func note(limit: Int, _ s: inout State) {
        s.maxLimitSeen = max(s.maxLimitSeen, limit)
        s.minLimitSeen = min(s.minLimitSeen, limit)
    }

    // MARK: Plumbing

    /// Runs `body` under the lock, then carries out the effects it collected.
    private func perform(_ body: (inout State, inout Effects) -> Void) {
        let effects = state.withLock { s -> Effects in
            var e = Effects()
            body(&s, &e)
            if !s.events.isEmpty || s.finished, let waiter = s.eventWaiter {
                s.eventWaiter = nil
                e.resumeEvents = waiter
            }
            return e
        }
        for id in effects.connect { connect(id: id) }
        for handler in effects.wake {
            handler.eventLoop.execute { handler.value.pump() }
        }
        for channel in effects.close { channel.close(promise: nil) }
        if let due = effects.armDelayedTimer {
            group.next().scheduleTask(deadline: due) { [self] in
                perform { s, e in releaseDelayed(&s, &e) }
            }
        }
        if let due = effects.armReconnectTimer {
            group.next().scheduleTask(deadline: due) { [self] in
                perform { s, e in
                    s.reconnectTimerArmed = false
                    s.reconnectAt = nil
                    dispatch(&s, &e)
                }
            }
        }
        effects.resumeEvents?.resume()
        for continuation in effects.resumeSubmitters { continuation.resume() }
        for continuation in effects.resumeShutdown { continuation.resume() }
    }

    private func connect(id: Int) {
        let configuration = self.configuration
        let sslContext = self.sslContext
        let sniName = configuration.serverHostname ?? ((try? SocketAddress(ipAddress: configuration.host, port: 0)) != nil ? nil : configuration.host)
        let authority = self.authority
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(configuration.connectTimeout.timeAmount)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: sniName))
                    // The frame layer: preface, SETTINGS (no server push, §3.2), HPACK and flow
                    // control; streams are the connection handler's.
                    let codec = HTTP2FrameCodec()
                    try sync.addHandler(codec)
                    try sync.addHandler(HTTP2ConnectionHandler(id: id, client: self, codec: codec, authority: authority, configuration: configuration))
                }
            }
        let connectTimeout = configuration.connectTimeout.timeAmount
        bootstrap.connect(host: configuration.host, port: configuration.port).whenComplete { [self] result in
            switch result {
            case .success(let channel):
                var closeNow = false
                state.withLock { s in
                    if s.connections[id] != nil {
                        s.connections[id]?.channel = channel
                        s.connections[id]?.eventLoop = channel.eventLoop
                        closeNow = s.abandoning || (s.stopping && s.queue.isEmpty && s.delayed.isEmpty)
                        if closeNow { s.connections[id]?.closeRequested = true }
                    } else {
                        closeNow = true
                    }
                }
                // The connection handler reports the close (channelInactive), which removes the
                // connection. Should that report never come, the entry would outlive its channel
                // and hold up shutdown; the channel's close future, which settles after the
                // pipeline saw the close, removes it then.
                channel.closeFuture.whenComplete { [self] _ in channelGone(id: id) }
                if closeNow {
                    channel.close(promise: nil)
                    return
                }
                // TLS, ALPN and the server's SETTINGS must arrive in time.
                channel.eventLoop.scheduleTask(in: connectTimeout) { [self] in
                    let pending = state.withLock { $0.connections[id]?.phase == .connecting }
                    if pending {
                        channel.close(promise: nil)
                    }
                }
            case .failure(let error):
                logger.debug("HTTP/2 connect failed", metadata: ["apns.connection": "\(id)", "error": "\(error)"])
                connectionClosed(id: id, results: [], wasReady: false,
                    reason: "cannot connect to \(configuration.host):\(configuration.port): \(error)")
            }
        }
    }
}
