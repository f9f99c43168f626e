import APNSCore
import APNSHTTP2Core
import Foundation
import NIOCore

/// The delivery logic of the HTTP/2 connection pool, as a value with no I/O.
///
/// It owns the queue of requests waiting for a stream, the ones waiting out a retry delay,
/// every connection's phase and stream count, the §3.4 retry policy, reconnect back-off,
/// provider-token rotation (§4, §6.10) and shutdown. Its methods return ``Action``s — connects,
/// wake-ups of connection handlers, closes, timers, a token refresh, a log line — that the
/// ``APNSHTTP2Client`` carries out after releasing its lock; outcomes and connection events are
/// appended to ``events``. It neither signs nor logs: the client reads the provider token
/// outside its lock and hands it in (``TokenOffer``).
///
/// The queue, the count of failed connects with its back-off and `unavailable`/`available`
/// events, connection identifiers and the lifecycle are the types the binary pool uses too
/// (``APNSPoolQueue``, ``APNSConnectFailures``, ``APNSConnectionIDs``, ``APNSPoolLifecycle``).
@usableFromInline package struct HTTP2PoolStateMachine {
    let configuration: Configuration
    var queue = APNSPoolQueue<QueuedRequest>()
    /// The Live Activity tickets of queued requests not yet taken, by tag (latest wins,
    /// ``takeRequests(_:)``); emptied with the queue.
    var tickets: [UInt64: APNSActivityTicket] = [:]
    var delayed: [Delayed] = []
    /// When the armed retry timer fires, if one is armed.
    var delayedTimerDue: NIODeadline?
    private(set) var connections: [Int: Connection] = [:]
    private var connectionIDs = APNSConnectionIDs()
    /// Connects in a row that failed before the connection got ready; one that gets ready
    /// resets the count.
    private(set) var failures: APNSConnectFailures
    private(set) var reconnectAt: NIODeadline?
    private var reconnectTimerArmed = false
    /// Outcomes and connection events waiting for the consumer.
    var events: APNSEventBuffer
    private(set) var lifecycle = APNSPoolLifecycle.running
    /// The monotonic counters of ``snapshot()``; its gauges stay zero here.
    private(set) var counters = APNSPoolSnapshot()
    /// The provider's token last handed to a connection, to count new ones.
    private var lastOfferedToken: APNSProviderToken?
    /// The highest and lowest stream limits followed (`Int.max` before the first).
    private(set) var maxLimitSeen = 0
    private(set) var minLimitSeen = Int.max

    init(configuration: Configuration) {
        self.configuration = configuration
        self.events = APNSEventBuffer(maxConnectionEvents: configuration.maxConnectionEvents)
        self.failures = APNSConnectFailures(
            baseDelay: configuration.reconnectBaseDelay,
            maxDelay: configuration.reconnectMaxDelay,
            retryLimit: configuration.connectionRetryLimit
        )
    }

    var inFlight: Int { connections.values.reduce(0) { $0 + $1.open } }

    /// Connections that count toward those the pool wants: all but the draining ones.
    private var liveConnections: Int { connections.values.reduce(0) { $1.state.isDraining ? $0 : $0 + 1 } }

    /// The pool now: ``counters`` with the gauges filled in; its cost grows with the number of
    /// connections only.
    func snapshot() -> APNSPoolSnapshot {
        var snapshot = counters
        var streams = 0
        var live = 0
        for connection in connections.values {
            if connection.state.isEstablished { snapshot.open += 1 } else { snapshot.connecting += 1 }
            if !connection.state.isDraining { live += 1 }
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
        guard lifecycle == .running else { return actions }
        let live = liveConnections
        for _ in live..<max(live, max(1, configuration.minConnections)) { openConnection(&actions) }
        return actions
    }

    /// Adds admitted requests at the back of the queue and reports the rejected ones.
    mutating func enqueue(
        _ items: [QueuedRequest],
        rejected: [APNSDeliveryOutcome],
        tickets: [(tag: UInt64, ticket: APNSActivityTicket)] = []
    ) -> [Action] {
        for outcome in rejected { events.append(outcome: .transmissionError(outcome)) }
        for entry in tickets { self.tickets[entry.tag] = entry.ticket }
        queue.append(contentsOf: items)
        var actions: [Action] = []
        dispatch(&actions)
        return actions
    }

    /// Stops taking notifications: once everything is answered, the connections close.
    mutating func beginShutdown() -> [Action] {
        if lifecycle == .running { lifecycle = .draining }
        var actions: [Action] = []
        checkFinished(&actions)
        return actions
    }

    /// Ends a shutdown that ran out of time: waiting requests fail with ``APNSStatus/shutDown``
    /// and every connection closes; its open streams fail as unanswered.
    mutating func abandon(reason: String) -> [Action] {
        var actions: [Action] = []
        guard lifecycle != .finished else { return actions }
        lifecycle = .abandoning
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

    /// The connect of `id` completed and the client holds its channel. It closes at once when
    /// the client is abandoning, or stopping with nothing left. (The client closes a channel
    /// whose connection the pool no longer knows itself.)
    mutating func channelAttached(id: Int) -> [Action] {
        guard var connection = connections[id] else { return [] }
        guard !connection.attached else {
            assertionFailure("connection \(id) attached twice")
            return []
        }
        connection.attached = true
        let closeNow = lifecycle == .abandoning || (lifecycle != .running && queue.isEmpty && delayed.isEmpty)
        if closeNow { connection.closeRequested = true }
        connections[id] = connection
        return closeNow ? [.close(id: id)] : []
    }

    /// The connect timeout of `id` passed: when it is still waiting for TLS, ALPN or the
    /// server's SETTINGS, it closes (and the failure is a timeout).
    mutating func connectTimedOut(id: Int) -> [Action] {
        guard var connection = connections[id], connection.state.isConnecting else { return [] }
        connection.state = .connecting(timedOut: true)
        connections[id] = connection
        return [.close(id: id)]
    }

    /// The server's first SETTINGS arrived on `id`, with its stream limit if it sent one.
    mutating func connectionReady(id: Int, initialLimit: Int?) -> [Action] {
        var actions: [Action] = []
        guard var connection = connections[id] else { return actions }
        let limit =
            initialLimit.map(clampLimit)
            ?? min(100, configuration.maxStreamsPerConnection)  // RFC 9113 §6.5.2: unlimited; be modest
        switch connection.state {
        case .connecting:
            connection.state = .ready(Ready(limit: limit))
        case .draining(established: false):
            // A GOAWAY came before the server's first SETTINGS: it opens, and drains.
            connection.state = .draining(established: true)
        case .ready, .draining(established: true):
            assertionFailure("connection \(id) got ready twice")
            return actions
        }
        counters.connectionsOpened += 1
        noteLimit(limit)
        connections[id] = connection
        failures.reset()
        reconnectAt = nil
        events.append(connectionEvent: .connected(connection: id))
        failures.connectionOpened(into: &events)
        dispatch(&actions)
        return actions
    }

    /// The server changed `SETTINGS_MAX_CONCURRENT_STREAMS` on `id` (§3.2), perhaps down to 1.
    mutating func updateStreamLimit(id: Int, limit: Int) -> [Action] {
        var actions: [Action] = []
        guard var connection = connections[id] else { return actions }
        // The first SETTINGS' limit reaches a connecting one with ``connectionReady(id:initialLimit:)``.
        connection.whenReady { $0.limit = clampLimit(limit) }
        noteLimit(clampLimit(limit))
        connections[id] = connection
        dispatch(&actions)
        return actions
    }

    /// `id` takes no new streams: it drains. `received` when the server sent GOAWAY, false when
    /// its stream ids run out.
    mutating func goAway(id: Int, received: Bool = true) -> [Action] {
        var actions: [Action] = []
        guard var connection = connections[id] else { return actions }
        connection.closeReason = connection.closeReason ?? (received ? .goaway : .other)
        connection.drain()
        connections[id] = connection
        dispatch(&actions)
        return actions
    }

    /// `id` has been idle for the idle timeout: it closes when it may (nothing open or waiting).
    mutating func closeIfIdle(id: Int) -> [Action] {
        let live = liveConnections
        guard var connection = connections[id], connection.open == 0, queue.isEmpty,
            lifecycle != .running || connection.state.isDraining || live > configuration.minConnections
        else { return [] }
        connection.drain()
        connection.closeRequested = true
        connection.closeReason = connection.closeReason ?? .idle
        connections[id] = connection
        return [.close(id: id)]
    }

    /// The channel of `id` reported an error; it closes next.
    mutating func connectionError(id: Int, error: String) -> [Action] {
        events.append(connectionEvent: .socketError(connection: id, error: error))
        return []
    }

    /// Requests taken for `id` that it could not open streams for: back to the front of the queue.
    mutating func connectionClosedBeforeWrite(id: Int, requests: [QueuedRequest]) -> [Action] {
        if var connection = connections[id] {
            connection.open -= requests.count
            connection.drain()
            connections[id] = connection
        }
        for request in requests.reversed() { queue.prepend(request) }
        var actions: [Action] = []
        dispatch(&actions)
        return actions
    }

    /// Work for connection `id`: up to its free streams from the queue, with its token, as the
    /// first action (``Action/work(id:_:)``). `free` is false once the connection cannot open
    /// streams any more.
    mutating func takeWork(id: Int, free: Bool, token: TokenOffer? = nil) -> [Action] {
        var actions: [Action] = [.work(id: id, Work())]
        actions[0] = .work(id: id, takeWork(id: id, free: free, token: token, &actions))
        return actions
    }

    /// Settles finished streams of `id` and hands the connection its next work.
    mutating func streamsFinished(
        id: Int,
        results: [StreamResult],
        free: Bool,
        token: TokenOffer? = nil
    ) -> [Action] {
        var actions: [Action] = [.work(id: id, Work())]
        if !results.isEmpty {
            connections[id]?.open -= results.count
            for result in results { settle(result, connection: id, &actions) }
        }
        actions[0] = .work(id: id, takeWork(id: id, free: free, token: token, &actions))
        dispatch(&actions)
        checkFinished(&actions)
        return actions
    }

    /// Connection `id` closed, with the streams it left; `wasReady` when it ever got ready.
    /// `failure` is why a connection that never got ready failed (unless its connect timed
    /// out); `cause` is why the connection handler closed an open one itself, if it did.
    mutating func connectionClosed(
        id: Int,
        results: [StreamResult],
        wasReady: Bool,
        reason: String,
        failure: APNSPoolSnapshot.ConnectFailure = .other,
        cause: APNSPoolSnapshot.CloseReason? = nil
    ) -> [Action] {
        var actions: [Action] = []
        let connection = connections.removeValue(forKey: id)
        for result in results { settle(result, connection: id, &actions) }
        events.append(connectionEvent: .disconnected(connection: id, reason: reason))
        if let connection, connection.state.isEstablished {
            counters.count(connection.closeReason ?? cause ?? .silentClose)
        }
        if !wasReady && connection?.closeRequested != true {
            counters.count(connection?.state == .connecting(timedOut: true) ? .timeout : failure)
            connectFailed(id: id, reason: reason, &actions)
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
        let wanted =
            !queue.isEmpty ? configuration.maxConnections : lifecycle != .running ? 0 : configuration.minConnections
        let live = liveConnections
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
            guard var connection = connections[id], case .ready(var ready) = connection.state, !ready.wakeScheduled,
                connection.open < ready.limit
            else { continue }
            ready.wakeScheduled = true
            connection.state = .ready(ready)
            waiting -= ready.limit - connection.open
            connections[id] = connection
            actions.append(.wake(id: id))
        }
    }

    private mutating func openConnection(_ actions: inout [Action]) {
        let id = connectionIDs.make()
        connections[id] = Connection(id: id)
        actions.append(.connect(id: id))
    }

    private mutating func takeWork(id: Int, free: Bool, token: TokenOffer?, _ actions: inout [Action]) -> Work {
        guard var connection = connections[id] else { return Work(close: true) }
        connection.whenReady { $0.wakeScheduled = false }
        if !free, case .ready = connection.state {
            connection.drain()
            connections[id] = connection
            dispatch(&actions)
        }
        if connection.state.isDraining && connection.open == 0 {
            connection.closeRequested = true
            connections[id] = connection
            return Work(close: true)
        }
        connections[id] = connection
        guard case .ready(let ready) = connection.state, !queue.isEmpty, connection.open < ready.limit else {
            return Work()
        }
        var work = Work()
        if let token {
            // §4: one token shared by the app's connections; a connection changes it at most
            // once per 20 minutes (the guard), never per request.
            let offered: APNSProviderToken
            let now: Date
            switch token {
            case .token(let token, let time):
                offered = token
                now = time
            case .failed(let error):
                failAll(status: .connectionFailed, message: "cannot sign a provider token: \(error.message)")
                return Work()
            }
            if offered != lastOfferedToken {
                lastOfferedToken = offered
                counters.providerTokenRefreshes += 1
            }
            switch connection.tokenGuard.token(offered: offered, now: now) {
            case .use(let token):
                connection.currentToken = token
                work.authorization = token.authorization
            case .reconnect:
                connection.drain()
                connection.closeRequested = connection.open == 0
                connection.closeReason = connection.closeReason ?? .other
                connections[id] = connection
                dispatch(&actions)
                return Work(close: connection.open == 0)
            }
        }
        let count = min(ready.limit - connection.open, queue.count)
        work.requests = takeRequests(count)
        if let issuedAt = connection.currentToken?.issuedAt {
            let stamp = UInt32(clamping: issuedAt)
            for index in work.requests.indices { work.requests[index].providerTokenIssuedAt = stamp }
        }
        connection.open += work.requests.count
        connections[id] = connection
        return work
    }

    /// A connection failed before it got ready: counts the failure, reports the gateway
    /// unavailable after several, fails stale requests, and sets the reconnect back-off.
    private mutating func connectFailed(id: Int, reason: String, _ actions: inout [Action]) {
        let noneReady = !connections.values.contains { !$0.state.isConnecting }
        failures.record(reason, peer: configuration.server, noneOpen: noneReady, into: &events)
        actions.append(.logConnectFailure(id: id, reason: reason, failures: failures.inARow))
        if noneReady { failStale() }
        if failures.retryLimitReached {
            failAll(
                status: .connectionFailed,
                message: "could not connect to \(configuration.server) after \(failures.inARow) attempts: \(reason)"
            )
            failures.reset()
        } else {
            reconnectAt = configuration.clock() + configuration.jitter(failures.delay).timeAmount
        }
    }

    // MARK: Settling

    private mutating func settle(_ result: StreamResult, connection id: Int, _ actions: inout [Action]) {
        // Every stream ends here once: the write it was is counted now.
        counters.writes += 1
        if result.request.writes > 1 { counters.retransmissions += 1 }
        switch result {
        case .answered(let request, let status, let headers, let body):
            if status == 429 { counters.tooManyRequests += 1 }
            // §3.4: a 200 or a 4xx other than 403 (the token refused) and 429 (which includes
            // TooManyProviderTokenUpdates) means APNs took the request's provider token.
            if status < 500, status != 403, status != 429, request.providerTokenIssuedAt != 0 {
                counters.providerTokenAccepted(issuedAt: Int64(request.providerTokenIssuedAt))
            }
            if status == 200 {
                // §3.4: apns-unique-id in the development environment only.
                events.append(
                    outcome: .transmitted(request.outcome(status: nil, uniqueID: headers.first(name: "apns-unique-id")))
                )
                return
            }
            let response = APNSHTTP2Response(
                status: status,
                headers: headers.map { APNSHTTP2Header($0.name, $0.value) },
                body: body
            )
            if let ignored = response.errorBody?.ignoredTimestamp {
                counters.malformedAnswers += 1
                actions.append(
                    .logPeerError(
                        id: id,
                        message: "APNs answered \(status) with a timestamp of \(ignored), which is not a time between "
                            + "1970 and 9999 in milliseconds; the timestamp is ignored"
                    )
                )
            }
            let failure = APNSHTTP2Failure(
                status: status,
                reason: response.reason,
                timestamp: response.errorBody?.timestamp
            )
            switch response.outcome {
            case .delivered:
                events.append(outcome: .transmitted(request.outcome(status: nil, uniqueID: response.apnsUniqueID)))
            case .deviceTokenInvalid(let failure), .rejected(let failure):
                report(request, failure, uniqueID: response.apnsUniqueID)
            case .retry:
                if failure.replaceConnection, var connection = connections[id] {
                    connection.drain()
                    connection.closeReason = connection.closeReason ?? .other
                    connections[id] = connection
                }
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
            if lifecycle == .abandoning || request.attempts >= configuration.maxAttempts {
                events.append(
                    outcome: .transmissionError(
                        request.outcome(
                            status: .indeterminate,
                            message:
                                "no answer after \(request.attempts) attempt(s); the server may have accepted it (\(reason))"
                        )
                    )
                )
            } else {
                queue.prepend(request)
            }
        }
    }

    private mutating func failAll(status: APNSStatus, message: String) {
        // A notification that an earlier connection may have delivered is never reported as
        // "not sent" (a caller would send it again without the flag): its fate is unknown.
        func outcome(_ request: QueuedRequest) -> APNSDeliveryOutcome {
            guard request.possibleDuplicate else { return request.outcome(status: status, message: message) }
            return request.outcome(status: .indeterminate, message: "\(message); \(Self.duplicateNote)")
        }
        while let request = queue.popFirst() {
            events.append(outcome: .transmissionError(outcome(request)))
        }
        tickets.removeAll()
        for item in delayed {
            events.append(outcome: .transmissionError(outcome(item.request)))
        }
        delayed.removeAll()
        events.append(connectionEvent: .error(APNSError(.connectionFailed, message)), force: true)
    }

    /// While stopping: once nothing is left to send or answer, closes the connections, and
    /// finishes when the last one is gone.
    private mutating func checkFinished(_ actions: inout [Action]) {
        guard lifecycle.isStopping, queue.isEmpty, delayed.isEmpty else { return }
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
            lifecycle = .finished
            events.finish()
            actions.append(.shutdownComplete)
        }
    }

    private mutating func noteLimit(_ limit: Int) {
        maxLimitSeen = max(maxLimitSeen, limit)
        minLimitSeen = min(minLimitSeen, limit)
    }
}
