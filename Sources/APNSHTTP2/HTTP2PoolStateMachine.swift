import APNSCore
import APNSHTTP2Core
import DequeModule
import Logging
import NIOCore

/// The delivery logic of the HTTP/2 connection pool, as a value with no I/O.
///
/// It owns the queue of requests waiting for a stream, the ones waiting out a retry delay,
/// every connection's phase and stream count, the §3.4 retry policy, reconnect back-off,
/// provider-token rotation (§4, §6.10) and shutdown. Its methods return ``Action``s — connects,
/// wake-ups of connection handlers, closes, timers — that the ``APNSHTTP2Client`` carries out
/// after releasing its lock; outcomes and connection events are appended to ``events``.
struct HTTP2PoolStateMachine {
    struct Configuration {
        var maxConnections = 1
        /// Connections kept open while there is nothing to send.
        var minConnections = 0
        var maxStreamsPerConnection = 1000
        /// Writes of one request after which a stream left unanswered is not tried again.
        var maxAttempts = 5
        /// Failed connects in a row after which waiting requests fail; `nil`: they wait.
        var connectionRetryLimit: Int? = 10
        var reconnectBaseDelay: Duration = .milliseconds(100)
        var reconnectMaxDelay: Duration = .seconds(5)
        var retryBaseDelay: Duration = .seconds(1)
        var retryMaxDelay: Duration = .seconds(60)
        /// The server, as messages name it.
        var server = ""
        /// Connection-level events kept for the consumer before new ones are dropped.
        var maxConnectionEvents = 1_000
        /// Monotonic time, for retry delays and reconnects.
        var clock: @Sendable () -> NIODeadline = { .now() }
        /// Wall-clock milliseconds since the epoch, for stale notifications.
        var now: @Sendable () -> Int64 = APNSReconnectBackoff.nowMilliseconds
        /// Delays a reconnect with jitter.
        var jitter: @Sendable (Duration) -> Duration = APNSReconnectBackoff.jittered
    }

    /// What a connection handler is asked to do next.
    struct Work: Sendable {
        var requests: [QueuedRequest] = []
        var authorization: String?
        var close = false
    }

    enum Phase: Equatable { case connecting, ready, draining }

    struct Connection {
        var id: Int
        var phase: Phase = .connecting
        /// The connect completed and the client holds the channel.
        var attached = false
        /// Streams this connection may have open: the server's limit, capped by ours.
        var limit: Int = 1
        var open = 0
        var wakeScheduled = false
        var tokenGuard = APNSConnectionTokenGuard()
        var currentToken: APNSProviderToken?
        var closeRequested = false
        /// The server's first SETTINGS arrived: the connection counts as open until it closes.
        var established = false
        /// Why it is closing, once the pool knows (a GOAWAY, the idle timeout, a shutdown, a
        /// replacement); `nil` while it does not.
        var closeReason: APNSPoolSnapshot.CloseReason?
        /// Set when the connect timed out before the connection got ready.
        var timedOut = false
    }

    enum Action: Equatable {
        /// Open connection `id`.
        case connect(id: Int)
        /// Ask the handler of connection `id` for its next work (``takeWork(id:free:)``).
        case wake(id: Int)
        /// Close connection `id`.
        case close(id: Int)
        /// Call ``delayedTimerFired()`` at the deadline.
        case armDelayedTimer(NIODeadline)
        /// Call ``reconnectTimerFired()`` at the deadline.
        case armReconnectTimer(NIODeadline)
        /// Everything is drained and closed after a shutdown.
        case shutdownComplete
    }

    struct Delayed {
        var due: NIODeadline
        var request: QueuedRequest
    }

    let configuration: Configuration
    private let tokenProvider: APNSTokenProvider?
    private let logger: Logger
    private(set) var queue = Deque<QueuedRequest>()
    private(set) var delayed: [Delayed] = []
    private var delayedTimerDue: NIODeadline?
    private(set) var connections: [Int: Connection] = [:]
    private var nextConnectionID = 0
    private(set) var consecutiveFailures = 0
    /// ``APNSDeliveryEvent/unavailable(reason:)`` was reported and no connection opened since.
    private(set) var reportedUnavailable = false
    private(set) var reconnectAt: NIODeadline?
    private var reconnectTimerArmed = false
    /// Outcomes and connection events waiting for the consumer.
    var events: APNSEventBuffer
    private(set) var stopping = false
    private(set) var abandoning = false
    private(set) var finished = false
    /// The monotonic counters of ``snapshot()``; its gauges stay zero here.
    private(set) var counters = APNSPoolSnapshot()
    /// The provider's token last handed to a connection, to count new ones.
    private var lastOfferedToken: APNSProviderToken?
    // Statistics.
    private(set) var written = 0
    private(set) var retried = 0
    private(set) var goAways = 0
    private(set) var maxLimitSeen = 0
    private(set) var minLimitSeen = Int.max

    init(configuration: Configuration, tokenProvider: APNSTokenProvider?, logger: Logger = Logger(label: "apns.http2")) {
        self.configuration = configuration
        self.tokenProvider = tokenProvider
        self.logger = logger
        self.events = APNSEventBuffer(maxConnectionEvents: configuration.maxConnectionEvents)
    }

    var inFlight: Int { connections.values.reduce(0) { $0 + $1.open } }

    /// The pool now: ``counters`` with the gauges filled in; its cost grows with the number of
    /// connections only.
    func snapshot() -> APNSPoolSnapshot {
        var snapshot = counters
        var streams = 0
        var live = 0
        for connection in connections.values {
            if connection.established { snapshot.open += 1 } else { snapshot.connecting += 1 }
            if connection.phase != .draining { live += 1 }
            streams += connection.open
        }
        // A reconnect waits for its back-off: the slots it would fill are backing off.
        if reconnectTimerArmed { snapshot.backingOff = max(0, configuration.maxConnections - live) }
        snapshot.streamsInUse = streams
        snapshot.queued = queue.count + delayed.count
        return snapshot
    }

    // MARK: Inputs from the callers

    /// Opens the warm connections ahead of the first notification: `minConnections`, and at
    /// least one.
    mutating func start() -> [Action] {
        var actions: [Action] = []
        guard !stopping else { return actions }
        let live = connections.values.filter { $0.phase != .draining }.count
        for _ in live..<max(live, max(1, configuration.minConnections)) { openConnection(&actions) }
        return actions
    }

    /// Adds admitted requests at the back of the queue and reports the rejected ones.
    mutating func enqueue(_ items: [QueuedRequest], rejected: [APNSDeliveryOutcome]) -> [Action] {
        for outcome in rejected { events.append(outcome: .transmissionError(outcome)) }
        queue.append(contentsOf: items)
        var actions: [Action] = []
        dispatch(&actions)
        return actions
    }

    /// Stops taking notifications: once everything is answered, the connections close.
    mutating func beginShutdown() -> [Action] {
        stopping = true
        var actions: [Action] = []
        checkFinished(&actions)
        return actions
    }

    /// Ends a shutdown that ran out of time: waiting requests fail with ``APNSStatus/shutDown``
    /// and every connection closes; its open streams fail as unanswered.
    mutating func abandon(reason: String) -> [Action] {
        var actions: [Action] = []
        guard !finished else { return actions }
        abandoning = true
        failAll(status: .shutDown, message: "not sent: \(reason)")
        for id in connections.keys.sorted() {
            guard var connection = connections[id], connection.attached else { continue }
            connection.closeReason = connection.closeReason ?? .shutdown
            connections[id] = connection
            actions.append(.close(id: id))
        }
        checkFinished(&actions)
        return actions
    }

    // MARK: Inputs from connections

    /// The connect of `id` completed. Returns whether the connection is still known, and
    /// whether it should close at once (the client is abandoning, or stopping with nothing left).
    mutating func channelAttached(id: Int) -> (known: Bool, closeNow: Bool) {
        guard var connection = connections[id] else { return (false, true) }
        connection.attached = true
        let closeNow = abandoning || (stopping && queue.isEmpty && delayed.isEmpty)
        if closeNow { connection.closeRequested = true }
        connections[id] = connection
        return (true, closeNow)
    }

    /// Connection `id` is still waiting for TLS, ALPN or the server's SETTINGS.
    func isConnecting(id: Int) -> Bool {
        connections[id]?.phase == .connecting
    }

    /// The connect timeout of `id` passed: true (and the failure is a timeout) when it is still
    /// waiting for TLS, ALPN or the server's SETTINGS and must be closed.
    mutating func connectTimedOut(id: Int) -> Bool {
        guard isConnecting(id: id) else { return false }
        connections[id]?.timedOut = true
        return true
    }

    /// The server's first SETTINGS arrived on `id`, with its stream limit if it sent one.
    mutating func connectionReady(id: Int, initialLimit: Int?) -> [Action] {
        var actions: [Action] = []
        guard var connection = connections[id] else { return actions }
        if !connection.established {
            connection.established = true
            counters.connectionsOpened += 1
        }
        connection.phase = connection.phase == .connecting ? .ready : connection.phase
        if let initialLimit {
            connection.limit = clampLimit(initialLimit)
        } else {
            connection.limit = min(100, configuration.maxStreamsPerConnection)  // RFC 9113 §6.5.2: unlimited; be modest
        }
        noteLimit(connection.limit)
        connections[id] = connection
        consecutiveFailures = 0
        reconnectAt = nil
        events.append(connectionEvent: .connected(connection: id))
        if reportedUnavailable {
            reportedUnavailable = false
            events.append(connectionEvent: .available, force: true)
        }
        dispatch(&actions)
        return actions
    }

    /// The server changed `SETTINGS_MAX_CONCURRENT_STREAMS` on `id` (§3.2), perhaps down to 1.
    mutating func updateStreamLimit(id: Int, limit: Int) -> [Action] {
        var actions: [Action] = []
        guard var connection = connections[id] else { return actions }
        connection.limit = clampLimit(limit)
        noteLimit(connection.limit)
        connections[id] = connection
        dispatch(&actions)
        return actions
    }

    /// `id` takes no new streams: it drains. `received` when the server sent GOAWAY, false when
    /// its stream ids run out.
    mutating func goAway(id: Int, reason: String, received: Bool = true) -> [Action] {
        var actions: [Action] = []
        guard var connection = connections[id] else { return actions }
        if connection.phase != .draining { goAways += 1 }
        connection.closeReason = connection.closeReason ?? (received ? .goaway : .other)
        connection.phase = .draining
        connections[id] = connection
        logger.info("HTTP/2 connection draining", metadata: ["apns.connection": "\(id)", "reason": "\(reason)"])
        dispatch(&actions)
        return actions
    }

    /// `id` has been idle for the idle timeout: true when it may close (nothing open or waiting).
    mutating func closeIfIdle(id: Int) -> Bool {
        let live = connections.values.filter { $0.phase != .draining }.count
        guard var connection = connections[id], connection.open == 0, queue.isEmpty,
            stopping || connection.phase == .draining || live > configuration.minConnections
        else { return false }
        connection.phase = .draining
        connection.closeRequested = true
        connection.closeReason = connection.closeReason ?? .idle
        connections[id] = connection
        return true
    }

    mutating func connectionError(id: Int, error: String) {
        events.append(connectionEvent: .socketError(connection: id, error: error))
    }

    /// Requests taken for `id` that it could not open streams for: back to the front of the queue.
    mutating func connectionClosedBeforeWrite(id: Int, requests: [QueuedRequest]) -> [Action] {
        written -= requests.count
        if var connection = connections[id] {
            connection.open -= requests.count
            connection.phase = .draining
            connections[id] = connection
        }
        for request in requests.reversed() { queue.prepend(request) }
        var actions: [Action] = []
        dispatch(&actions)
        return actions
    }

    /// Work for connection `id`: up to its free streams from the queue, with its token.
    /// `free` is false once the connection cannot open streams any more.
    mutating func takeWork(id: Int, free: Bool) -> (work: Work, actions: [Action]) {
        var actions: [Action] = []
        let work = takeWork(id: id, free: free, &actions)
        return (work, actions)
    }

    /// Settles finished streams of `id` and hands the connection its next work.
    mutating func streamsFinished(id: Int, results: [StreamResult], free: Bool) -> (work: Work, actions: [Action]) {
        var actions: [Action] = []
        if !results.isEmpty {
            connections[id]?.open -= results.count
            for result in results { settle(result, connection: id, &actions) }
        }
        let work = takeWork(id: id, free: free, &actions)
        dispatch(&actions)
        checkFinished(&actions)
        return (work, actions)
    }

    /// Connection `id` closed, with the streams it left; `wasReady` when it ever got ready.
    /// `failure` is why a connection that never got ready failed (unless its connect timed
    /// out); `cause` is why the connection handler closed an open one itself, if it did.
    mutating func connectionClosed(
        id: Int, results: [StreamResult], wasReady: Bool, reason: String,
        failure: APNSPoolSnapshot.ConnectFailure = .other, cause: APNSPoolSnapshot.CloseReason? = nil
    ) -> [Action] {
        var actions: [Action] = []
        let connection = connections.removeValue(forKey: id)
        for result in results { settle(result, connection: id, &actions) }
        events.append(connectionEvent: .disconnected(connection: id, reason: reason))
        if let connection, connection.established {
            counters.count(connection.closeReason ?? cause ?? .silentClose)
        }
        if !wasReady && connection?.closeRequested != true {
            counters.count(connection?.timedOut == true ? .timeout : failure)
            connectFailed(id: id, reason: reason)
        }
        dispatch(&actions)
        checkFinished(&actions)
        return actions
    }

    // MARK: Timers

    /// Moves the requests whose retry delay is over back to the queue.
    mutating func delayedTimerFired() -> [Action] {
        var actions: [Action] = []
        let now = configuration.clock()
        delayedTimerDue = nil
        var later: [Delayed] = []
        for item in delayed {
            if item.due <= now { queue.append(item.request) } else { later.append(item) }
        }
        delayed = later
        if let next = later.map(\.due).min() {
            delayedTimerDue = next
            actions.append(.armDelayedTimer(next))
        }
        dispatch(&actions)
        return actions
    }

    /// The reconnect back-off is over.
    mutating func reconnectTimerFired() -> [Action] {
        reconnectTimerArmed = false
        reconnectAt = nil
        var actions: [Action] = []
        dispatch(&actions)
        return actions
    }

    // MARK: Scheduling

    /// Opens connections while there is work and room (and keeps `minConnections` open while
    /// there is none), and wakes connections with free streams.
    private mutating func dispatch(_ actions: inout [Action]) {
        let wanted = !queue.isEmpty ? configuration.maxConnections : stopping ? 0 : configuration.minConnections
        let live = connections.values.filter { $0.phase != .draining }.count
        if live < wanted {
            if let at = reconnectAt, at > configuration.clock() {
                if !reconnectTimerArmed {
                    reconnectTimerArmed = true
                    actions.append(.armReconnectTimer(at))
                }
            } else {
                for _ in live..<wanted { openConnection(&actions) }
            }
        }
        guard !queue.isEmpty else { return }
        var waiting = queue.count
        for id in connections.keys.sorted() where waiting > 0 {
            guard var connection = connections[id], connection.phase == .ready, !connection.wakeScheduled,
                connection.open < connection.limit
            else { continue }
            connection.wakeScheduled = true
            waiting -= connection.limit - connection.open
            connections[id] = connection
            actions.append(.wake(id: id))
        }
    }

    private mutating func openConnection(_ actions: inout [Action]) {
        nextConnectionID += 1
        let id = nextConnectionID
        connections[id] = Connection(id: id)
        actions.append(.connect(id: id))
    }

    private mutating func takeWork(id: Int, free: Bool, _ actions: inout [Action]) -> Work {
        guard var connection = connections[id] else { return Work(close: true) }
        connection.wakeScheduled = false
        if !free && connection.phase == .ready {
            connection.phase = .draining
            connections[id] = connection
            dispatch(&actions)
        }
        if connection.phase == .draining && connection.open == 0 {
            connection.closeRequested = true
            connections[id] = connection
            return Work(close: true)
        }
        connections[id] = connection
        guard connection.phase == .ready, !queue.isEmpty, connection.open < connection.limit else { return Work() }
        var work = Work()
        if let provider = tokenProvider {
            // §4: one token shared by the app's connections; a connection changes it at most
            // once per 20 minutes (the guard), never per request.
            let offered: APNSProviderToken
            do {
                offered = try provider.currentToken()
            } catch {
                failAll(status: .connectionFailed, message: "cannot sign a provider token: \(error.message)")
                return Work()
            }
            if offered != lastOfferedToken {
                lastOfferedToken = offered
                counters.providerTokenRefreshes += 1
            }
            switch connection.tokenGuard.token(offered: offered, now: provider.now) {
            case .use(let token):
                connection.currentToken = token
                work.authorization = token.authorization
            case .reconnect:
                connection.phase = .draining
                connection.closeRequested = connection.open == 0
                connection.closeReason = connection.closeReason ?? .other
                connections[id] = connection
                dispatch(&actions)
                return Work(close: connection.open == 0)
            }
        }
        let count = min(connection.limit - connection.open, queue.count)
        work.requests.reserveCapacity(count)
        for _ in 0..<count { work.requests.append(queue.removeFirst()) }
        connection.open += count
        connections[id] = connection
        written += count
        return work
    }

    /// A connection failed before it got ready: counts the failure, reports the gateway
    /// unavailable after several, fails stale requests, and sets the reconnect back-off.
    private mutating func connectFailed(id: Int, reason: String) {
        consecutiveFailures += 1
        logger.warning(
            "HTTP/2 connection failed",
            metadata: [
                "apns.connection": "\(id)", "reason": "\(reason)", "failures": "\(consecutiveFailures)",
            ])
        let anyReady = connections.values.contains { $0.phase != .connecting }
        if !anyReady && consecutiveFailures >= APNSReconnectBackoff.unavailableAfter && !reportedUnavailable {
            reportedUnavailable = true
            let reason = "\(consecutiveFailures) connection attempts to \(configuration.server) failed in a row (last: \(reason))"
            events.append(connectionEvent: .unavailable(reason: reason), force: true)
        }
        if !anyReady { failStale() }
        if let limit = configuration.connectionRetryLimit, consecutiveFailures >= limit {
            failAll(
                status: .connectionFailed,
                message: "could not connect to \(configuration.server) after \(consecutiveFailures) attempts: \(reason)")
            consecutiveFailures = 0
        } else {
            let delay = APNSReconnectBackoff.delay(
                afterFailures: consecutiveFailures, base: configuration.reconnectBaseDelay,
                maximum: configuration.reconnectMaxDelay)
            reconnectAt = configuration.clock() + .nanoseconds(Self.nanoseconds(configuration.jitter(delay)))
        }
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }

    // MARK: Settling

    private mutating func settle(_ result: StreamResult, connection id: Int, _ actions: inout [Action]) {
        // Every stream ends here once: the write it was is counted now.
        counters.writes += 1
        if result.request.writes > 1 { counters.retransmissions += 1 }
        switch result {
        case .answered(let request, let status, let headers, let body):
            if status == 429 { counters.tooManyRequests += 1 }
            if status == 200 {
                // §3.4: apns-unique-id in the development environment only.
                events.append(outcome: .transmitted(request.outcome(status: nil, uniqueID: headers.first(name: "apns-unique-id"))))
                return
            }
            let response = APNSHTTP2Response(
                status: status, headers: headers.map { APNSHTTP2Header($0.name, $0.value) }, body: body)
            let failure = APNSHTTP2Failure(status: status, reason: response.reason, timestamp: response.errorBody?.timestamp)
            switch response.outcome {
            case .delivered:
                events.append(outcome: .transmitted(request.outcome(status: nil, uniqueID: response.apnsUniqueID)))
            case .deviceTokenInvalid(let failure), .rejected(let failure):
                report(request, failure, uniqueID: response.apnsUniqueID)
            case .retry:
                retry(request, failure, connection: id, &actions)
            }
        case .unprocessed(let request):
            // Never reached the server's processing: send again, same flags.
            var request = request
            request.attempts -= 1
            queue.prepend(request)
        case .unknown(let request, let reason):
            var request = request
            request.possibleDuplicate = true
            if abandoning || request.attempts >= configuration.maxAttempts {
                events.append(
                    outcome: .transmissionError(
                        request.outcome(
                            status: .indeterminate,
                            message: "no answer after \(request.attempts) attempt(s); the server may have accepted it (\(reason))")))
            } else {
                retried += 1
                queue.prepend(request)
            }
        }
    }

    /// §3.4: an answer that asks for a retry, now, after a delay, or on a new connection.
    private mutating func retry(_ request: QueuedRequest, _ failure: APNSHTTP2Failure, connection id: Int, _ actions: inout [Action]) {
        var request = request
        request.lastFailure = failure
        if failure.reason == .expiredProviderToken, let provider = tokenProvider {
            // §6.10: refresh once (the provider never signs twice in 20 minutes) and
            // replace this connection, which would keep answering ExpiredProviderToken.
            let refresh = try? provider.forceRefresh(rejected: connections[id]?.currentToken)
            logger.info(
                "APNs answered ExpiredProviderToken; replacing the connection",
                metadata: [
                    "apns.connection": "\(id)", "refresh": "\(refresh.map { "\($0)" } ?? "failed")",
                ])
        }
        if failure.replaceConnection, var connection = connections[id] {
            connection.phase = .draining
            connection.closeReason = connection.closeReason ?? .other
            connections[id] = connection
        }
        guard request.retries < request.retryLimit else {
            report(request, failure, gaveUp: true)
            return
        }
        request.retries += 1
        retried += 1
        if failure.retry == .onNewConnection {
            queue.prepend(request)
        } else {
            let delay = APNSReconnectBackoff.delay(
                afterFailures: request.retries, base: configuration.retryBaseDelay, maximum: configuration.retryMaxDelay)
            let due = configuration.clock() + .nanoseconds(Self.nanoseconds(delay))
            delayed.append(Delayed(due: due, request: request))
            if delayedTimerDue.map({ due < $0 }) ?? true {
                delayedTimerDue = due
                actions.append(.armDelayedTimer(due))
            }
        }
    }

    private mutating func report(_ request: QueuedRequest, _ failure: APNSHTTP2Failure, gaveUp: Bool = false, uniqueID: String? = nil) {
        let meaning = failure.reason?.entry?.meaning ?? APNSStatus(rawValue: failure.status).reason
        let message = gaveUp ? "\(meaning); gave up after \(request.retries) retries" : meaning
        let unregisteredAt =
            failure.status == 410
            ? failure.timestamp.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } : nil
        events.append(
            outcome: .transmissionError(
                request.outcome(
                    status: APNSStatus(rawValue: failure.status), message: message,
                    reason: failure.reason?.rawValue, unregisteredAt: unregisteredAt, uniqueID: uniqueID)))
    }

    /// While no connection is open: fails the queued requests whose `staleAt` has passed.
    private mutating func failStale() {
        guard queue.contains(where: { $0.staleAt != nil }) || delayed.contains(where: { $0.request.staleAt != nil }) else {
            return
        }
        let now = configuration.now()
        func stale(_ request: QueuedRequest) -> Bool { request.staleAt.map { $0 <= now } ?? false }
        for request in queue where stale(request) { failStale(request) }
        queue.removeAll(where: stale)
        for item in delayed where stale(item.request) { failStale(item.request) }
        delayed.removeAll { stale($0.request) }
    }

    private mutating func failStale(_ request: QueuedRequest) {
        let stale = "went stale while the server was unreachable"
        events.append(
            outcome: .transmissionError(
                request.possibleDuplicate
                    ? request.outcome(
                        status: .indeterminate,
                        message: "\(stale); an earlier attempt was left unanswered, so the server may have it")
                    : request.outcome(status: .expired, message: "\(stale); not sent")))
    }

    private mutating func failAll(status: APNSStatus, message: String) {
        // A notification that an earlier connection may have delivered is never reported as
        // "not sent" (a caller would send it again without the flag): its fate is unknown.
        func outcome(_ request: QueuedRequest) -> APNSDeliveryOutcome {
            guard request.possibleDuplicate else { return request.outcome(status: status, message: message) }
            return request.outcome(
                status: .indeterminate,
                message: "\(message); an earlier attempt was left unanswered, so the server may have it")
        }
        while let request = queue.popFirst() {
            events.append(outcome: .transmissionError(outcome(request)))
        }
        for item in delayed {
            events.append(outcome: .transmissionError(outcome(item.request)))
        }
        delayed.removeAll()
        events.append(connectionEvent: .error(APNSError(.connectionFailed, message)), force: true)
    }

    /// While stopping: once nothing is left to send or answer, closes the connections, and
    /// finishes when the last one is gone.
    private mutating func checkFinished(_ actions: inout [Action]) {
        guard stopping, !finished, queue.isEmpty, delayed.isEmpty else { return }
        guard !connections.values.contains(where: { $0.open > 0 }) else { return }
        for id in connections.keys.sorted() {
            // One not yet connected closes once it is (``channelAttached(id:)``).
            guard var connection = connections[id], !connection.closeRequested, connection.attached else { continue }
            connection.closeRequested = true
            connection.closeReason = connection.closeReason ?? .shutdown
            connections[id] = connection
            actions.append(.close(id: id))
        }
        if connections.isEmpty {
            finished = true
            events.finish()
            actions.append(.shutdownComplete)
        }
    }

    private func clampLimit(_ limit: Int) -> Int { max(0, min(limit, configuration.maxStreamsPerConnection)) }

    private mutating func noteLimit(_ limit: Int) {
        maxLimitSeen = max(maxLimitSeen, limit)
        minLimitSeen = min(minLimitSeen, limit)
    }
}

extension HTTP2PoolStateMachine.Configuration {
    /// The pool's part of a client's configuration.
    init(_ client: APNSHTTP2Configuration) {
        self.init(
            maxConnections: client.maxConnections, minConnections: client.minConnections,
            maxStreamsPerConnection: client.maxStreamsPerConnection,
            maxAttempts: client.maxAttempts, connectionRetryLimit: client.connectionRetryLimit,
            reconnectBaseDelay: client.reconnectBaseDelay, reconnectMaxDelay: client.reconnectMaxDelay,
            retryBaseDelay: client.retryBaseDelay, retryMaxDelay: client.retryMaxDelay,
            server: "\(client.host):\(client.port)")
    }
}
