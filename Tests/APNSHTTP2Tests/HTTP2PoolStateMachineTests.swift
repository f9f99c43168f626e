import APNSCore
import APNSHTTP2Core
import NIOCore
import NIOHPACK
import Synchronization
import Testing

@testable import APNSHTTP2

/// The HTTP/2 pool's logic step by step, without connections: each test feeds the state
/// machine what connection handlers would report and checks the actions and events.
@Suite struct HTTP2PoolStateMachineTests {
    /// Monotonic and wall-clock time the tests move by hand.
    final class Clocks: Sendable {
        let uptime = Mutex(NIODeadline.uptimeNanoseconds(1_000_000_000))
        let wall = Mutex<Int64>(1_700_000_000_000)

        func advance(_ amount: TimeAmount) {
            uptime.withLock { $0 = $0 + amount }
            wall.withLock { $0 += amount.nanoseconds / 1_000_000 }
        }

        var deadline: NIODeadline { uptime.withLock { $0 } }
    }

    typealias Machine = HTTP2PoolStateMachine

    let clocks = Clocks()

    func machine(_ change: (inout Machine.Configuration) -> Void = { _ in }) -> Machine {
        var c = Machine.Configuration()
        c.server = "gateway:443"
        let clocks = self.clocks
        c.clock = { clocks.deadline }
        c.now = { clocks.wall.withLock { $0 } }
        c.jitter = { $0 }
        change(&c)
        return Machine(configuration: c)
    }

    static func request(_ tag: Int, retryLimit: Int = 3, staleAt: Int64? = nil) -> QueuedRequest {
        QueuedRequest(
            tag: UInt64(tag),
            token: try! DeviceToken(bytes: [UInt8](repeating: UInt8(tag & 0xff), count: 32)),
            path: "/3/device/\(tag)",
            body: Array(#"{"aps":{}}"#.utf8),
            pushType: .alert,
            topic: "com.example.app",
            priority: 10,
            expiration: 0,
            collapseID: nil,
            apnsID: "id-\(tag)",
            retryLimit: retryLimit,
            staleAt: staleAt
        )
    }

    static func requests(_ tags: Range<Int>, staleAt: Int64? = nil) -> [QueuedRequest] {
        tags.map { request($0, staleAt: staleAt) }
    }

    /// What the handler does with work: each request is written once more (at `instant`).
    static func written(_ work: Machine.Work, at instant: UInt64? = nil) -> [QueuedRequest] {
        work.requests.map { request in
            var request = request
            request.attempts += 1
            request.writes += 1
            request.writtenAt = instant
            return request
        }
    }

    static func answer(_ request: QueuedRequest, _ status: Int, reason: String? = nil) -> StreamResult {
        let body = reason.map { Array(#"{"reason":"\#($0)"}"#.utf8) } ?? []
        return .answered(request, status: status, headers: HPACKHeaders([(":status", "\(status)")]), body: body)
    }

    /// What the client hands the machine with token authentication: the provider's token now.
    static func offer(_ provider: APNSTokenProvider) throws -> Machine.TokenOffer {
        .token(try provider.currentToken(), now: provider.now)
    }

    static func connectIDs(_ actions: [Machine.Action]) -> [Int] {
        actions.compactMap { if case .connect(let id) = $0 { id } else { nil } }
    }

    /// Takes the outcomes out of the machine's events, leaving nothing behind.
    static func outcomes(_ m: inout Machine) -> [APNSDeliveryOutcome] {
        let all = m.events.compactMap(\.outcome)
        m.events.removeAll()
        return all
    }

    /// Enqueues `count` requests and brings the connection they open to ready with `limit`.
    func ready(_ m: inout Machine, count: Int, limit: Int?) -> Int {
        let ids = Self.connectIDs(m.enqueue(Self.requests(0..<count), rejected: []))
        #expect(ids.count == 1)
        let id = ids.first ?? -1
        let attached = m.channelAttached(id: id)
        #expect(attached.isEmpty)
        #expect(m.connectionReady(id: id, initialLimit: limit) == [.wake(id: id)])
        return id
    }

    @Test func aConnectionsStateFollowsItsLife() {
        var m = machine { $0.maxConnections = 2 }
        let ids = Self.connectIDs(m.enqueue(Self.requests(0..<4), rejected: []))
        #expect(ids == [1, 2])
        #expect(ids.allSatisfy { m.connections[$0]?.state == .connecting(timedOut: false) })
        _ = m.channelAttached(id: 1)
        _ = m.channelAttached(id: 2)
        // The first gets ready with the server's limit; the second gets a GOAWAY before its
        // SETTINGS, then the SETTINGS: it counts as open, and drains.
        _ = m.connectionReady(id: 1, initialLimit: 3)
        #expect(m.connections[1]?.state == .ready(.init(limit: 3, wakeScheduled: true)))
        _ = m.goAway(id: 2)
        #expect(m.connections[2]?.state == .draining(established: false))
        _ = m.connectionReady(id: 2, initialLimit: 3)
        #expect(m.connections[2]?.state == .draining(established: true))
        #expect(m.snapshot().open == 2 && m.snapshot().connectionsOpened == 2)
        // Work clears the wake; the server lowering its limit changes the ready one's.
        #expect(m.takeWork(id: 1, free: true).work.requests.count == 3)
        #expect(m.connections[1]?.state == .ready(.init(limit: 3, wakeScheduled: false)))
        _ = m.updateStreamLimit(id: 1, limit: 1)
        #expect(m.connections[1]?.state == .ready(.init(limit: 1, wakeScheduled: false)))
        // A connect timeout only counts while connecting.
        #expect(m.connectTimedOut(id: 1).isEmpty)
    }

    @Test func enqueueOpensAConnectionAndReadyWakesIt() {
        var m = machine()
        #expect(m.start() == [.connect(id: 1)])
        #expect(m.connections[1]?.state == .connecting(timedOut: false))
        #expect(m.enqueue(Self.requests(0..<3), rejected: []).isEmpty)  // one connection, still connecting
        #expect(m.connectionReady(id: 1, initialLimit: 10) == [.wake(id: 1)])
        #expect(m.events.contains { if case .connected(1) = $0 { true } else { false } })
        let taken = m.takeWork(id: 1, free: true)
        let (work, actions) = (taken.work, taken.actions)
        #expect(work.requests.map(\.tag) == [0, 1, 2])
        #expect(!work.close && actions.isEmpty)
        #expect(m.inFlight == 3 && m.queue.isEmpty)
    }

    @Test func readyFollowsTheServersStreamLimitCappedByOurs() {
        var m = machine { $0.maxStreamsPerConnection = 4 }
        let id = ready(&m, count: 10, limit: 2)
        #expect(m.takeWork(id: id, free: true).work.requests.count == 2)
        #expect(m.takeWork(id: id, free: true).work.requests.isEmpty)  // both streams busy
        // Raised to 100, capped at 4: two more streams.
        #expect(m.updateStreamLimit(id: id, limit: 100) == [.wake(id: id)])
        #expect(m.takeWork(id: id, free: true).work.requests.count == 2)
        #expect(m.maxLimitSeen == 4 && m.minLimitSeen == 2)
    }

    @Test func withoutALimitInSettingsAConnectionOpensAHundredStreams() {
        var m = machine()
        let id = ready(&m, count: 150, limit: nil)
        #expect(m.takeWork(id: id, free: true).work.requests.count == 100)
    }

    @Test func aLimitDroppedToOneAllowsOneStreamOnceTheOthersFinish() {
        var m = machine()
        let id = ready(&m, count: 6, limit: 3)
        let first = Self.written(m.takeWork(id: id, free: true).work)
        #expect(first.count == 3)
        #expect(m.updateStreamLimit(id: id, limit: 1).isEmpty)  // no free stream: nobody to wake
        // Two of three finish: still one open, the limit: nothing new.
        let settled = m.streamsFinished(id: id, results: first.prefix(2).map { Self.answer($0, 200) }, free: true)
        #expect(settled.work.requests.isEmpty)
        // The last finishes: exactly one new stream.
        let next = m.streamsFinished(id: id, results: [Self.answer(first[2], 200)], free: true)
        #expect(next.work.requests.map(\.tag) == [3])
        #expect(Self.outcomes(&m).map(\.tag) == [0, 1, 2])
        #expect(m.minLimitSeen == 1)
    }

    @Test func goAwayDrainsTheConnectionResendsUnprocessedStreamsAndOpensAnother() {
        var m = machine()
        let id = ready(&m, count: 4, limit: 4)
        let sent = Self.written(m.takeWork(id: id, free: true).work)
        m.events.removeAll()
        // The handler reports the GOAWAY, then the streams above its last-stream-id.
        _ = m.goAway(id: id)
        #expect(m.connections[id]?.state == .draining(established: true) && m.connections[id]?.closeReason == .goaway)
        let results = [Self.answer(sent[0], 200)] + sent[1...].map { StreamResult.unprocessed($0) }
        let finished = m.streamsFinished(id: id, results: results, free: false)
        #expect(finished.work.close)
        #expect(Self.connectIDs(finished.actions) == [2])
        #expect(Self.outcomes(&m).map(\.tag) == [0])
        // Unprocessed: resent, not counted as an attempt, not possibly duplicate.
        #expect(m.queue.map(\.tag).sorted() == [1, 2, 3])
        #expect(m.queue.allSatisfy { $0.attempts == 0 && !$0.possibleDuplicate })
        _ = m.connectionClosed(id: id, results: [], wasReady: true, reason: "GOAWAY")
        #expect(m.failures.inARow == 0)
    }

    @Test func refusedStreamIsResentWithoutTheDuplicateFlag() {
        var m = machine()
        let id = ready(&m, count: 1, limit: 10)
        let sent = Self.written(m.takeWork(id: id, free: true).work)
        let next = m.streamsFinished(id: id, results: [.unprocessed(sent[0])], free: true)
        #expect(next.work.requests.map(\.tag) == [0])
        #expect(next.work.requests[0].attempts == 0 && !next.work.requests[0].possibleDuplicate)
        #expect(Self.outcomes(&m).isEmpty)
    }

    @Test func aConnectionThatFailsResendsItsOpenStreamsAsPossibleDuplicates() {
        var m = machine { $0.maxAttempts = 2 }
        let id = ready(&m, count: 2, limit: 10)
        let sent = Self.written(m.takeWork(id: id, free: true).work)
        let results = sent.map { StreamResult.unknown($0, reason: "the connection closed") }
        let actions = m.connectionClosed(id: id, results: results, wasReady: true, reason: "reset by peer")
        #expect(Self.connectIDs(actions) == [2])
        #expect(m.queue.map(\.tag).sorted() == [0, 1] && m.queue.allSatisfy(\.possibleDuplicate))
        #expect(m.failures.inARow == 0)
        #expect(m.events.contains { if case .disconnected(id, "reset by peer") = $0 { true } else { false } })
        // On the next connection they stay unanswered again: maxAttempts (2) is used up.
        m.events.removeAll()
        _ = m.channelAttached(id: 2)
        _ = m.connectionReady(id: 2, initialLimit: 10)
        let again = Self.written(m.takeWork(id: 2, free: true).work)
        _ = m.connectionClosed(
            id: 2,
            results: again.map { .unknown($0, reason: "closed") },
            wasReady: true,
            reason: "closed"
        )
        let failed = Self.outcomes(&m)
        #expect(failed.map(\.tag).sorted() == [0, 1])
        #expect(failed.allSatisfy { $0.status == .indeterminate && $0.possibleDuplicate && $0.attempts == 2 })
    }

    @Test func tooManyRequestsAndServerErrorsAreRetriedAfterABackoff() {
        var m = machine {
            $0.retryBaseDelay = .seconds(1)
            $0.retryMaxDelay = .seconds(3)
        }
        let t0 = clocks.deadline
        let id = ready(&m, count: 2, limit: 10)
        var sent = Self.written(m.takeWork(id: id, free: true).work)
        let first = m.streamsFinished(
            id: id,
            results: [Self.answer(sent[0], 429, reason: "TooManyRequests"), Self.answer(sent[1], 503)],
            free: true
        )
        // Both wait a second (the first retry); one timer for the earliest.
        #expect(first.actions == [.armDelayedTimer(t0 + .seconds(1))])
        #expect(m.delayed.count == 2 && m.queue.isEmpty && Self.outcomes(&m).isEmpty)
        clocks.advance(.seconds(1))
        #expect(m.delayedTimerFired() == [.wake(id: id)])
        sent = Self.written(m.takeWork(id: id, free: true).work)
        #expect(sent.map(\.retries) == [1, 1])
        // Second and third retries: 2 s, then the 3 s maximum.
        for expected in [TimeAmount.seconds(2), .seconds(3)] {
            let start = clocks.deadline
            let again = m.streamsFinished(id: id, results: sent.map { Self.answer($0, 500) }, free: true)
            #expect(again.actions.contains(.armDelayedTimer(start + expected)))
            clocks.advance(expected)
            _ = m.delayedTimerFired()
            sent = Self.written(m.takeWork(id: id, free: true).work)
        }
        // The retry limit (3) is spent: the next failure is final.
        _ = m.streamsFinished(id: id, results: sent.map { Self.answer($0, 500) }, free: true)
        let failed = Self.outcomes(&m)
        #expect(failed.count == 2)
        #expect(
            failed.allSatisfy { $0.status?.rawValue == 500 && ($0.message ?? "").contains("gave up after 3 retries") }
        )
    }

    @Test func permanentFailuresAreReportedAtOnce() {
        var m = machine()
        let id = ready(&m, count: 1, limit: 10)
        let sent = Self.written(m.takeWork(id: id, free: true).work)
        _ = m.streamsFinished(id: id, results: [Self.answer(sent[0], 400, reason: "BadDeviceToken")], free: true)
        let failed = Self.outcomes(&m)
        #expect(failed.map(\.reason) == ["BadDeviceToken"] && failed.map(\.attempts) == [1])
        #expect(m.delayed.isEmpty && m.queue.isEmpty)
    }

    @Test func expiredProviderTokenReplacesTheConnectionAndRetriesOnANewOne() throws {
        var c = Machine.Configuration()
        c.clock = { [clocks] in clocks.deadline }
        c.providerTokens = true
        let provider = try ClientHarness.tokenProvider()
        var m = Machine(configuration: c)
        let id = Self.connectIDs(m.enqueue(Self.requests(0..<1), rejected: [])).first ?? -1
        _ = m.channelAttached(id: id)
        _ = m.connectionReady(id: id, initialLimit: 10)
        let work = m.takeWork(id: id, free: true, token: try Self.offer(provider)).work
        #expect(work.authorization?.hasPrefix("bearer ") == true)
        let sent = Self.written(work)
        // §6.10: the connection drains and closes; the request goes to a new connection.
        let answered = m.streamsFinished(
            id: id,
            results: [Self.answer(sent[0], 403, reason: "ExpiredProviderToken")],
            free: true,
            token: try Self.offer(provider)
        )
        #expect(answered.work.close)
        // The machine does not sign: it asks the client to refresh the token the connection used.
        let refreshes = answered.actions.compactMap { action -> APNSProviderToken?? in
            if case .refreshToken(id, let rejected) = action { rejected } else { nil }
        }
        #expect(refreshes.count == 1 && refreshes.first == .some(m.connections[id]?.currentToken))
        let next = Self.connectIDs(answered.actions)
        #expect(next.count == 1 && next.first != id)
        #expect(m.queue.map(\.tag) == [0] && m.queue.first?.retries == 0 && m.queue.first?.connectionResends == 1)
        #expect(Self.outcomes(&m).isEmpty)
    }

    @Test func repeatedConnectFailuresReportUnavailableBackOffAndAvailableAgain() {
        var m = machine {
            $0.connectionRetryLimit = nil
            $0.reconnectBaseDelay = .milliseconds(100)
            $0.reconnectMaxDelay = .seconds(5)
        }
        #expect(Self.connectIDs(m.enqueue(Self.requests(0..<1), rejected: [])) == [1])
        var id = 1
        for failure in 1...3 {
            let start = clocks.deadline
            let actions = m.connectionClosed(id: id, results: [], wasReady: false, reason: "refused")
            let backoff = TimeAmount.milliseconds(100 << (failure - 1))
            // The machine does not log: it asks the client to.
            #expect(
                actions == [
                    .logConnectFailure(id: id, reason: "refused", failures: failure),
                    .armReconnectTimer(start + backoff),
                ]
            )
            #expect(m.failures.inARow == failure)
            clocks.advance(backoff)
            let reconnect = m.reconnectTimerFired()
            #expect(Self.connectIDs(reconnect).count == 1)
            id = Self.connectIDs(reconnect).first ?? -1
        }
        let unavailable = m.events.filter { if case .unavailable = $0 { true } else { false } }
        #expect(unavailable.count == 1)
        #expect(m.failures.reportedUnavailable && m.queue.count == 1)
        _ = m.channelAttached(id: id)
        _ = m.connectionReady(id: id, initialLimit: 10)
        #expect(!m.failures.reportedUnavailable && m.failures.inARow == 0)
        #expect(m.events.contains { if case .available = $0 { true } else { false } })
    }

    @Test func staleRequestsExpireWhileTheServerIsUnreachable() {
        var m = machine { $0.connectionRetryLimit = nil }
        let now = clocks.wall.withLock { $0 }
        var queued = Self.requests(0..<2, staleAt: now + 500)
        queued.append(Self.request(2))  // no staleAt: waits however long it takes
        _ = m.enqueue(queued, rejected: [])
        _ = m.connectionClosed(id: 1, results: [], wasReady: false, reason: "refused")
        #expect(Self.outcomes(&m).isEmpty)  // not stale yet
        clocks.advance(.seconds(1))
        _ = m.reconnectTimerFired()
        _ = m.connectionClosed(id: 2, results: [], wasReady: false, reason: "refused")
        let expired = Self.outcomes(&m)
        #expect(expired.map(\.tag) == [0, 1])
        #expect(expired.allSatisfy { $0.status == .expired })
        #expect(m.queue.map(\.tag) == [2])
    }

    @Test func aRequestPastItsStaleAtWhenItsTurnComesIsFailedNotWritten() {
        var m = machine()
        let now = clocks.wall.withLock { $0 }
        var queued = [Self.request(0), Self.request(1, staleAt: now + 500)]
        queued.append(Self.request(2, staleAt: now + 5_000))
        let id = Self.connectIDs(m.enqueue(queued, rejected: [])).first ?? -1
        _ = m.channelAttached(id: id)
        // The connection is ready only after the second request's time has passed.
        clocks.advance(.seconds(1))
        _ = m.connectionReady(id: id, initialLimit: 10)
        let work = m.takeWork(id: id, free: true).work
        #expect(work.requests.map(\.tag) == [0, 2])
        let expired = Self.outcomes(&m).filter { $0.status == .expired }
        #expect(expired.map(\.tag) == [1])
        #expect(m.inFlight == 2 && m.queue.isEmpty)
    }

    @Test func connectionRetryLimitFailsWhatIsWaiting() {
        var m = machine { $0.connectionRetryLimit = 2 }
        _ = m.enqueue(Self.requests(0..<3), rejected: [])
        _ = m.connectionClosed(id: 1, results: [], wasReady: false, reason: "refused")
        #expect(Self.outcomes(&m).isEmpty)
        clocks.advance(.seconds(1))
        _ = m.reconnectTimerFired()
        _ = m.connectionClosed(id: 2, results: [], wasReady: false, reason: "refused")
        let failed = m.events.compactMap(\.outcome)
        #expect(failed.map(\.tag) == [0, 1, 2])
        #expect(failed.allSatisfy { $0.status == .connectionFailed && ($0.message ?? "").contains("after 2 attempts") })
        #expect(m.events.contains { if case .error(let e) = $0 { e.code == .connectionFailed } else { false } })
        #expect(m.queue.isEmpty && m.failures.inARow == 0)
    }

    @Test func shutdownWaitsForOpenStreamsThenClosesAndFinishes() {
        var m = machine()
        let id = ready(&m, count: 2, limit: 10)
        let sent = Self.written(m.takeWork(id: id, free: true).work)
        #expect(m.beginShutdown().isEmpty)  // two streams open
        let done = m.streamsFinished(id: id, results: sent.map { Self.answer($0, 200) }, free: true)
        #expect(done.actions == [.close(id: id)])
        #expect(!(m.lifecycle == .finished) && !m.events.isFinished)
        #expect(m.connectionClosed(id: id, results: [], wasReady: true, reason: "closed") == [.shutdownComplete])
        #expect((m.lifecycle == .finished) && m.events.isFinished)
        #expect(Self.outcomes(&m).count == 2)
    }

    @Test func shutdownWithoutConnectionsFinishesAtOnce() {
        var m = machine()
        #expect(m.beginShutdown() == [.shutdownComplete])
        #expect((m.lifecycle == .finished))
    }

    @Test func abandonFailsWaitingRequestsAndUnansweredStreams() {
        var m = machine()
        let id = ready(&m, count: 3, limit: 1)
        let sent = Self.written(m.takeWork(id: id, free: true).work)
        _ = m.beginShutdown()
        let actions = m.abandon(reason: "the grace period ran out")
        #expect(actions == [.close(id: id)])
        let notSent = Self.outcomes(&m)
        #expect(notSent.map(\.tag) == [1, 2] && notSent.allSatisfy { $0.status == .shutDown })
        let closing = m.connectionClosed(
            id: id,
            results: sent.map { .unknown($0, reason: "closed") },
            wasReady: true,
            reason: "closed"
        )
        #expect(closing == [.shutdownComplete])
        let unanswered = Self.outcomes(&m)
        #expect(unanswered.map(\.tag) == [0])
        #expect(unanswered.allSatisfy { $0.status == .indeterminate && $0.possibleDuplicate })
    }

    @Test func aConnectionCompletingAfterTheShutdownClosesAtOnce() {
        var m = machine()
        _ = m.start()
        _ = m.beginShutdown()
        let late = m.channelAttached(id: 1)
        #expect(late == [.close(id: 1)])
        // One the pool does not know: the client closes its channel itself.
        let unknown = m.channelAttached(id: 7)
        #expect(unknown.isEmpty && m.connections[7] == nil)
        // Its close was asked for: not a connect failure.
        #expect(m.connectionClosed(id: 1, results: [], wasReady: false, reason: "closed") == [.shutdownComplete])
        #expect(m.failures.inARow == 0)
    }
}

extension [HTTP2PoolStateMachine.Action] {
    /// The work a ``HTTP2PoolStateMachine/takeWork(id:free:token:)`` or
    /// ``HTTP2PoolStateMachine/streamsFinished(id:results:free:token:)`` handed out.
    var work: HTTP2PoolStateMachine.Work { first?.work ?? HTTP2PoolStateMachine.Work() }

    /// The actions besides the work.
    var actions: [HTTP2PoolStateMachine.Action] { filter { $0.work == nil } }
}
