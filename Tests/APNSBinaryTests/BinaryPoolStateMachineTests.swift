import APNSCore
import NIOCore
import Testing

@testable import APNSBinary

private func item(_ tag: Int, retryLimit: Int? = nil) -> PendingNotification {
    PendingNotification(
        tag: UInt64(tag),
        token: try! DeviceToken(bytes: [UInt8](repeating: UInt8(tag & 0xff), count: 32)),
        payload: Array(#"{"aps":{"alert":"hello"}}"#.utf8),
        expiry: 0,
        priority: 10,
        retryLimit: retryLimit
    )
}

private func config(
    _ change: (inout BinaryPoolStateMachine.Configuration) -> Void = { _ in }
) -> BinaryPoolStateMachine.Configuration {
    var c = BinaryPoolStateMachine.Configuration()
    c.confirmationWindow = .seconds(1)
    c.jitter = { $0 }
    change(&c)
    return c
}

/// Drives a machine through connecting its first connection.
private func connected(_ machine: inout BinaryPoolStateMachine, items: Int) -> Int {
    let actions = machine.enqueue((0..<items).map { item($0) })
    guard case .connect(let id, _) = actions.first(where: { if case .connect = $0 { true } else { false } }) else {
        Issue.record("expected a connect action in \(actions)")
        return -1
    }
    _ = machine.connectionEstablished(id: id)
    return id
}

private func outcomes(_ machine: inout BinaryPoolStateMachine) -> [APNSDeliveryOutcome] {
    let all = machine.events.compactMap(\.outcome)
    machine.events.removeAll()
    return all
}

private let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)
/// The write time an outcome reports for a write at `now`.
private func instant(_ now: NIODeadline) -> UInt64 { now.uptimeNanoseconds }

extension BinaryPoolStateMachine {
    /// Takes a batch and reports it written at `now`, as the client does once the kernel has it.
    /// The batch is the taken ``Action/write(id:frames:)``; the actions are the others.
    mutating func send(id: Int, now: NIODeadline) -> (batch: [Frame], actions: [Action]) {
        var actions = takeBatch(id: id)
        let batch = actions.compactMap(\.frames).first ?? []
        actions.removeAll { $0.frames != nil }
        if let last = batch.last {
            actions += written(id: id, through: last.identifier, now: now)
        }
        return (batch, actions)
    }

}

@Test func errorResponseAcceptsEarlierFailsOneAndResendsLaterInOrder() {
    var m = BinaryPoolStateMachine(configuration: config())
    let id = connected(&m, items: 10)
    let (batch, _) = m.send(id: id, now: t0)
    #expect(batch.map(\.identifier) == Array(1...10))
    let actions = m.errorResponse(id: id, ErrorResponse(status: .invalidToken, identifier: 4), now: t0)
    #expect(actions.contains(.close(id: id)))
    let got = outcomes(&m)
    #expect(got.filter(\.isTransmitted).map(\.tag) == [0, 1, 2])
    #expect(got.filter { !$0.isTransmitted }.map(\.tag) == [3])
    #expect(got.first { !$0.isTransmitted }?.status == .invalidToken)
    #expect(got.allSatisfy { !$0.possibleDuplicate })
    // Tags 4...9 wait for another connection, in their original order.
    #expect(m.queue.map(\.tag) == [4, 5, 6, 7, 8, 9])
    #expect(m.queue.allSatisfy { !$0.possibleDuplicate && $0.attempts == 1 })
    // A replacement connection is opened at once: an error response is not a connection failure.
    #expect(actions.contains { if case .connect(_, .zero) = $0 { true } else { false } })
}

@Test func shutdownStatusNamesTheLastGoodNotification() {
    var m = BinaryPoolStateMachine(configuration: config())
    let id = connected(&m, items: 6)
    _ = m.send(id: id, now: t0)
    _ = m.errorResponse(id: id, ErrorResponse(status: .shutdown, identifier: 3), now: t0)
    let got = outcomes(&m)
    // §1.5.3: identifier 3 was processed; nothing is reported as failed.
    #expect(got.map(\.tag) == [0, 1, 2])
    #expect(got.allSatisfy { $0.isTransmitted })
    #expect(m.queue.map(\.tag) == [3, 4, 5])
}

@Test func errorForAnIdentifierNotInTheCacheResendsEverythingAsPossibleDuplicates() {
    var m = BinaryPoolStateMachine(configuration: config())
    let id = connected(&m, items: 3)
    _ = m.send(id: id, now: t0)
    _ = m.errorResponse(id: id, ErrorResponse(status: .invalidToken, identifier: 999), now: t0)
    let errors = m.events.filter { if case .error(let e) = $0 { e.code == .cacheInconsistency } else { false } }
    #expect(errors.count == 1)
    #expect(outcomes(&m).isEmpty)
    #expect(m.queue.map(\.tag) == [0, 1, 2])
    #expect(m.queue.allSatisfy { $0.possibleDuplicate })
}

@Test func silentCloseResendsUnconfirmedAsPossibleDuplicatesAndNarrowsTheWindow() {
    var m = BinaryPoolStateMachine(configuration: config { $0.cacheMaxCount = 100 })
    let id = connected(&m, items: 10)
    _ = m.send(id: id, now: t0)
    let actions = m.connectionClosed(id: id, reason: "peer closed")
    #expect(outcomes(&m).isEmpty)
    #expect(m.queue.map(\.tag) == Array(0..<10).map(UInt64.init))
    #expect(m.queue.allSatisfy { $0.possibleDuplicate })
    #expect(m.inflightLimit == 5)
    // Nothing was confirmed on it, so it counts as a failed connection and the next connect backs off.
    #expect(m.failures.inARow == 1)
    #expect(actions.contains { if case .connect(_, let d) = $0 { d > .zero } else { false } })

    // The resent notifications carry the flag into their outcome.
    guard case .connect(let next, _) = actions.first(where: { if case .connect = $0 { true } else { false } }) else {
        return
    }
    #expect(m.backoffElapsed(id: next) == [.connect(id: next, delay: .zero)])
    _ = m.connectionEstablished(id: next)
    let (batch, _) = m.send(id: next, now: t0)
    #expect(batch.count == 5)
    _ = m.timerFired(id: next, now: t0 + .seconds(1))
    let got = outcomes(&m)
    #expect(got.count == 5)
    #expect(got.allSatisfy { $0.isTransmitted && $0.possibleDuplicate && $0.attempts == 2 })
    #expect(m.failures.inARow == 0)
}

@Test func silentCloseWithoutResendReportsIndeterminate() {
    var m = BinaryPoolStateMachine(configuration: config { $0.resendOnUnknown = false })
    let id = connected(&m, items: 4)
    _ = m.send(id: id, now: t0)
    _ = m.connectionClosed(id: id, reason: "peer closed")
    let got = outcomes(&m)
    #expect(got.count == 4)
    #expect(got.allSatisfy { $0.status == .indeterminate && $0.possibleDuplicate })
    #expect(m.queue.isEmpty)
}

@Test func notificationsAreConfirmedOnlyAfterTheWindow() {
    var m = BinaryPoolStateMachine(configuration: config { $0.confirmationWindow = .milliseconds(500) })
    let id = connected(&m, items: 2)
    let (_, actions) = m.send(id: id, now: t0)
    #expect(actions.contains(.armTimer(id: id, deadline: t0 + .milliseconds(500))))
    _ = m.timerFired(id: id, now: t0 + .milliseconds(499))
    #expect(outcomes(&m).isEmpty)
    _ = m.timerFired(id: id, now: t0 + .milliseconds(500))
    #expect(outcomes(&m).map(\.tag) == [0, 1])
    #expect(m.unconfirmedCount == 0)
}

@Test func fullCacheMakesSendingWaitInsteadOfEvicting() {
    var m = BinaryPoolStateMachine(configuration: config { $0.cacheMaxCount = 5 })
    let id = connected(&m, items: 12)
    let first = m.send(id: id, now: t0)
    #expect(first.batch.count == 5)
    // The cache is full: no pump is scheduled and a pump that runs anyway takes nothing.
    #expect(!first.actions.contains(.schedulePump(id: id)))
    #expect(m.send(id: id, now: t0).batch.isEmpty)
    #expect(m.queuedCount == 7)
    #expect(m.unconfirmedCount == 5)
    // Confirmation frees the cache and sending resumes.
    let actions = m.timerFired(id: id, now: t0 + .seconds(1))
    #expect(actions.contains(.schedulePump(id: id)))
    #expect(m.send(id: id, now: t0 + .seconds(1)).batch.map(\.notification?.tag) == [5, 6, 7, 8, 9])
}

@Test func cacheIsBoundedInBytesToo() {
    var m = BinaryPoolStateMachine(configuration: config { $0.cacheMaxBytes = 3 * item(0).wireSize })
    let id = connected(&m, items: 10)
    #expect(m.send(id: id, now: t0).batch.count == 3)
}

@Test func identifiersWrapAroundAndStillLocateTheFailedNotification() {
    var m = BinaryPoolStateMachine(configuration: config())
    let id = connected(&m, items: 6)
    m.setNextIdentifier(UInt32.max - 2, connection: id)
    let (batch, _) = m.send(id: id, now: t0)
    #expect(batch.map(\.identifier) == [UInt32.max - 2, UInt32.max - 1, UInt32.max, 0, 1, 2])
    _ = m.errorResponse(id: id, ErrorResponse(status: .invalidToken, identifier: 1), now: t0)
    let got = outcomes(&m)
    #expect(got.filter(\.isTransmitted).map(\.tag) == [0, 1, 2, 3])
    #expect(got.filter { !$0.isTransmitted }.map(\.tag) == [4])
    #expect(m.queue.map(\.tag) == [5])
}

@Test func retryLimitStopsResending() {
    var m = BinaryPoolStateMachine(configuration: config())
    _ = m.enqueue([item(0), item(1, retryLimit: 0), item(2, retryLimit: 1)])
    let id = m.connections.keys.first!
    _ = m.connectionEstablished(id: id)
    _ = m.send(id: id, now: t0)
    _ = m.errorResponse(id: id, ErrorResponse(status: .invalidToken, identifier: 1), now: t0)
    let got = outcomes(&m)
    // Tag 1 may be written only once; tag 2 may be resent once.
    #expect(got.contains { $0.tag == 1 && $0.status == .retryLimitExceeded })
    #expect(m.queue.map(\.tag) == [2])
}

@Test func connectionRetryLimitFailsQueuedNotificationsWithBackoffInBetween() {
    var m = BinaryPoolStateMachine(configuration: config { $0.connectionRetryLimit = 3 })
    var actions = m.enqueue([item(0), item(1)])
    var delays: [TimeAmount] = []
    for _ in 0..<3 {
        guard case .connect(let id, let delay) = actions.first(where: { if case .connect = $0 { true } else { false } })
        else {
            Issue.record("expected a connect in \(actions)")
            return
        }
        delays.append(delay)
        if delay > .zero {
            #expect(m.backoffElapsed(id: id) == [.connect(id: id, delay: .zero)])
        }
        actions = m.connectFailed(id: id, reason: "connection refused")
    }
    #expect(delays == [.zero, .milliseconds(100), .milliseconds(200)])
    let got = outcomes(&m)
    #expect(got.count == 2)
    #expect(got.allSatisfy { $0.status == .connectionFailed && $0.message?.contains("connection refused") == true })
    #expect(m.queue.isEmpty)
}

/// Fails `count` connects in a row, starting from `actions`; returns the delays asked for.
private func failConnects(
    _ m: inout BinaryPoolStateMachine,
    _ actions: [BinaryPoolStateMachine.Action],
    count: Int
) -> [TimeAmount] {
    var actions = actions
    var delays: [TimeAmount] = []
    for _ in 0..<count {
        guard case .connect(let id, let delay) = actions.first(where: { if case .connect = $0 { true } else { false } })
        else {
            Issue.record("expected a connect in \(actions)")
            return delays
        }
        delays.append(delay)
        if delay > .zero { _ = m.backoffElapsed(id: id) }
        actions = m.connectFailed(id: id, reason: "connection refused")
    }
    return delays
}

@Test func withoutARetryLimitQueuedNotificationsWaitThroughAnOutageWithCappedBackoff() {
    var m = BinaryPoolStateMachine(configuration: config { $0.connectionRetryLimit = nil })
    let delays = failConnects(&m, m.enqueue([item(0), item(1)]), count: 40)
    #expect(delays.count == 40)
    #expect(delays.max() == .seconds(5))
    #expect(m.events.compactMap(\.outcome).isEmpty)
    #expect(m.queue.map(\.tag) == [0, 1])
    // Reported unavailable once, after the third failure in a row.
    let unavailable = m.events.filter { if case .unavailable = $0 { true } else { false } }
    #expect(unavailable.count == 1)
}

@Test func theGatewayAnsweringAgainIsReportedAvailableAndTheQueueIsSent() {
    var m = BinaryPoolStateMachine(configuration: config { $0.connectionRetryLimit = nil })
    var actions = m.enqueue([item(0), item(1)])
    for _ in 0..<3 {
        guard case .connect(let id, let delay) = actions.first(where: { if case .connect = $0 { true } else { false } })
        else {
            Issue.record("expected a connect in \(actions)")
            return
        }
        if delay > .zero { _ = m.backoffElapsed(id: id) }
        actions = m.connectFailed(id: id, reason: "connection refused")
    }
    guard case .connect(let id, _) = actions.first(where: { if case .connect = $0 { true } else { false } }) else {
        Issue.record("expected a connect in \(actions)")
        return
    }
    _ = m.backoffElapsed(id: id)
    m.events.removeAll()
    _ = m.connectionEstablished(id: id)
    #expect(m.events.contains { if case .available = $0 { true } else { false } })
    let (batch, _) = m.send(id: id, now: t0)
    #expect(batch.map { $0.notification?.tag } == [0, 1])
}

@Test func aStaleNotificationFailsAsExpiredWhileTheGatewayIsUnreachable() {
    var m = BinaryPoolStateMachine(
        configuration: config {
            $0.connectionRetryLimit = nil
            $0.now = { 10_000 }
        }
    )
    var stale = item(0)
    stale.staleAt = 9_999
    var fresh = item(1)
    fresh.staleAt = 10_001
    let waiting = item(2)
    _ = failConnects(&m, m.enqueue([stale, fresh, waiting]), count: 1)
    let got = outcomes(&m)
    #expect(got.map(\.tag) == [0])
    #expect(got.first?.status == .expired)
    #expect(m.queue.map(\.tag) == [1, 2])
}

@Test func aNotificationPastItsStaleAtWhenItsTurnComesIsFailedNotWritten() {
    var m = BinaryPoolStateMachine(configuration: config { $0.now = { 10_000 } })
    var stale = item(1)
    stale.staleAt = 9_999
    var fresh = item(2)
    fresh.staleAt = 10_001
    let actions = m.enqueue([item(0), stale, fresh])
    guard case .connect(let id, _) = actions.first(where: { if case .connect = $0 { true } else { false } }) else {
        Issue.record("expected a connect action in \(actions)")
        return
    }
    _ = m.connectionEstablished(id: id)
    m.events.removeAll()
    let (batch, _) = m.send(id: id, now: t0)
    #expect(batch.map { $0.notification?.tag } == [0, 2])
    let got = outcomes(&m)
    #expect(got.map(\.tag) == [1])
    #expect(got.first?.status == .expired)
    #expect(m.queue.isEmpty)
}

@Test func shutdownDrainsWithAProbeThatConfirmsEverythingBeforeIt() {
    var m = BinaryPoolStateMachine(configuration: config())
    let id = connected(&m, items: 3)
    _ = m.send(id: id, now: t0)
    let actions = m.beginShutdown()
    #expect(actions.contains(.schedulePump(id: id)))
    let (probe, _) = m.send(id: id, now: t0)
    #expect(probe.count == 1)
    #expect(probe[0].notification == nil)
    let probeID = probe[0].identifier
    _ = m.errorResponse(id: id, ErrorResponse(status: .missingPayload, identifier: probeID), now: t0)
    let got = outcomes(&m)
    #expect(got.map(\.tag) == [0, 1, 2])
    #expect(got.allSatisfy { $0.isTransmitted })
    let final = m.connectionClosed(id: id, reason: "closed")
    #expect(final.contains(.shutdownComplete))
    #expect(m.lifecycle == .finished)
}

@Test func abandonFailsWhatIsLeftWhenTheGracePeriodEnds() {
    var m = BinaryPoolStateMachine(configuration: config { $0.cacheMaxCount = 2 })
    let id = connected(&m, items: 5)
    _ = m.send(id: id, now: t0)
    _ = m.beginShutdown()
    _ = m.abandon(reason: "grace period over")
    let got = outcomes(&m)
    #expect(got.filter { $0.status == .indeterminate }.count == 2)
    #expect(got.filter { $0.status == .shutDown }.count == 3)
}

@Test func workSpreadsOverTheLeastLoadedConnections() {
    var m = BinaryPoolStateMachine(
        configuration: config {
            $0.maxConnections = 2
            $0.batchMaxCount = 4
        }
    )
    let actions = m.enqueue((0..<8).map { item($0) })
    let ids = actions.compactMap { if case .connect(let id, _) = $0 { id } else { nil } }
    #expect(ids.count == 2)
    _ = m.connectionEstablished(id: ids[0])
    let second = m.connectionEstablished(id: ids[1])
    // The first pump took nothing yet; the second connection gets a pump too, since 8 > one batch.
    #expect(second.contains(.schedulePump(id: ids[1])))
    let a = m.send(id: ids[0], now: t0).batch.count
    let b = m.send(id: ids[1], now: t0).batch.count
    #expect(a == 4 && b == 4)
}

@Test func idleConnectionsCloseButTheWarmMinimumStays() {
    var m = BinaryPoolStateMachine(
        configuration: config {
            $0.minConnections = 1
            $0.maxConnections = 2
        }
    )
    let start = m.start()
    #expect(start.count == 1)
    let actions = m.enqueue((0..<600).map { item($0) })
    let extra = actions.compactMap { if case .connect(let id, _) = $0 { id } else { nil } }
    #expect(extra.count == 1)
    for id in m.connections.keys { _ = m.connectionEstablished(id: id) }
    for id in m.connections.keys { _ = m.send(id: id, now: t0) }
    for id in m.connections.keys { _ = m.send(id: id, now: t0) }
    #expect(m.queuedCount == 0)
    for id in m.connections.keys { _ = m.timerFired(id: id, now: t0 + .seconds(2)) }
    let ids = m.connections.keys.sorted()
    let firstIdle = m.idleTimeout(id: ids[0])
    let secondIdle = m.idleTimeout(id: ids[1])
    #expect(firstIdle == [.close(id: ids[0])])
    #expect(secondIdle.isEmpty)
}

@Test func lateErrorResponsesWidenTheConfirmationWindow() {
    var m = BinaryPoolStateMachine(configuration: config { $0.confirmationWindow = .milliseconds(400) })
    let id = connected(&m, items: 3)
    _ = m.send(id: id, now: t0)
    // The gateway answered after 300 ms: more than half the window, so the window doubles that.
    _ = m.errorResponse(id: id, ErrorResponse(status: .invalidToken, identifier: 2), now: t0 + .milliseconds(300))
    #expect(m.confirmationWindow == .milliseconds(600))
    #expect(m.events.contains { if case .error(let e) = $0 { e.code == .slowGateway } else { false } })
    // A prompt answer leaves it alone.
    var fast = BinaryPoolStateMachine(configuration: config { $0.confirmationWindow = .milliseconds(400) })
    let f = connected(&fast, items: 3)
    _ = fast.send(id: f, now: t0)
    _ = fast.errorResponse(id: f, ErrorResponse(status: .invalidToken, identifier: 2), now: t0 + .milliseconds(100))
    #expect(fast.confirmationWindow == .milliseconds(400))
}

// MARK: Snapshot

@Test func snapshotCountsConnectionsWritesAndTheSentCache() {
    var m = BinaryPoolStateMachine(configuration: config())
    #expect(
        m.snapshot()
            == {
                var s = APNSPoolSnapshot()
                s.cachedNotifications = 0
                s.cachedBytes = 0
                return s
            }()
    )
    _ = m.enqueue((0..<10).map { item($0) })
    var s = m.snapshot()
    #expect(s.connecting == 1 && s.open == 0 && s.queued == 10 && s.connectionsOpened == 0)
    let id = m.connections.keys.first!
    _ = m.connectionEstablished(id: id)
    _ = m.send(id: id, now: t0)
    s = m.snapshot()
    #expect(s.open == 1 && s.connecting == 0 && s.connectionsOpened == 1)
    #expect(s.writes == 10 && s.retransmissions == 0 && s.queued == 0)
    #expect(s.cachedNotifications == 10 && s.cachedBytes == 10 * item(0).wireSize)
    #expect(s.streamsInUse == nil && s.providerTokenRefreshes == 0 && s.tooManyRequests == 0)
    _ = m.timerFired(id: id, now: t0 + .seconds(1))
    s = m.snapshot()
    #expect(s.cachedNotifications == 0 && s.cachedBytes == 0)
    #expect(s.writes == 10)
}

@Test func anErrorResponseCountsItsCloseAndTheResendsAsRetransmissions() {
    var m = BinaryPoolStateMachine(configuration: config())
    let id = connected(&m, items: 10)
    _ = m.send(id: id, now: t0)
    let actions = m.errorResponse(id: id, ErrorResponse(status: .invalidToken, identifier: 4), now: t0)
    // Closing, not yet closed: still open.
    #expect(m.snapshot().open == 1)
    _ = m.connectionClosed(id: id, reason: "error response, status 8")
    var s = m.snapshot()
    #expect(s.connectionsClosed == [.errorResponse: 1])
    #expect(s.queued == 6)
    guard case .connect(let next, _) = actions.first(where: { if case .connect = $0 { true } else { false } }) else {
        Issue.record("expected a connect in \(actions)")
        return
    }
    _ = m.connectionEstablished(id: next)
    _ = m.send(id: next, now: t0 + .milliseconds(10))
    s = m.snapshot()
    #expect(s.writes == 16 && s.retransmissions == 6)
    #expect(s.connectionsOpened == 2 && s.open == 1)
}

@Test func closesAreCountedByWhyTheyHappened() {
    var m = BinaryPoolStateMachine(
        configuration: config {
            $0.maxConnections = 3
            $0.batchMaxCount = 2
        }
    )
    let actions = m.enqueue((0..<6).map { item($0) })
    let ids = actions.compactMap { if case .connect(let id, _) = $0 { id } else { nil } }
    #expect(ids.count == 3)
    for id in ids { _ = m.connectionEstablished(id: id) }
    for id in ids { _ = m.send(id: id, now: t0) }
    for id in ids { _ = m.timerFired(id: id, now: t0 + .seconds(1)) }
    // The gateway ends the first; the client's handler gives up on the second (a write that
    // did not complete); the third goes idle.
    _ = m.connectionClosed(id: ids[0], reason: "closed by the gateway without an error packet")
    _ = m.connectionClosed(id: ids[1], reason: "the gateway stopped reading", cause: .other)
    let idle = m.idleTimeout(id: ids[2])
    #expect(idle == [.close(id: ids[2])])
    _ = m.connectionClosed(id: ids[2], reason: "closed by the gateway without an error packet")
    // The pool closed the idle one: the reason is the pool's, not the channel's default.
    #expect(m.events.contains { if case .disconnected(ids[2], "idle timeout") = $0 { true } else { false } })
    let s = m.snapshot()
    #expect(s.connectionsClosed == [.silentClose: 1, .other: 1, .idle: 1])
    #expect(s.open == 0 && s.connectionsOpened == 3)
}

@Test func aShutdownCountsItsClosesAsShutdownEvenWhenAProbeEndsThem() {
    var m = BinaryPoolStateMachine(
        configuration: config {
            $0.maxConnections = 2
            $0.batchMaxCount = 2
        }
    )
    let actions = m.enqueue((0..<4).map { item($0) })
    let ids = actions.compactMap { if case .connect(let id, _) = $0 { id } else { nil } }
    #expect(ids.count == 2)
    for id in ids { _ = m.connectionEstablished(id: id) }
    // The first connection's notifications are confirmed, the second's wait for the probe.
    for id in ids { _ = m.send(id: id, now: t0) }
    _ = m.timerFired(id: ids[0], now: t0 + .seconds(1))
    #expect(m.queue.isEmpty)
    // Nothing closes before everything is confirmed.
    var closing = m.beginShutdown()
    #expect(!closing.contains { if case .close = $0 { true } else { false } })
    let (probe, _) = m.send(id: ids[1], now: t0 + .milliseconds(10))
    #expect(probe.count == 1 && probe.last?.notification == nil)
    #expect(m.unconfirmedCount == 3 && m.snapshot().cachedNotifications == 2)
    closing = m.errorResponse(
        id: ids[1],
        ErrorResponse(status: .missingPayload, identifier: probe[0].identifier),
        now: t0 + .milliseconds(10)
    )
    #expect(closing.contains(.close(id: ids[1])) && closing.contains(.close(id: ids[0])))
    _ = m.connectionClosed(id: ids[0], reason: "closed")
    _ = m.connectionClosed(id: ids[1], reason: "closed")
    #expect(m.snapshot().connectionsClosed == [.shutdown: 2])
    #expect(m.lifecycle == .finished)
}

@Test func failedConnectsAreCountedByKindAndTheBackOffShows() {
    var m = BinaryPoolStateMachine(configuration: config { $0.connectionRetryLimit = nil })
    var actions = m.enqueue([item(0)])
    for failure in [APNSPoolSnapshot.ConnectFailure.refused, .tls, .timeout, .refused] {
        guard case .connect(let id, let delay) = actions.first(where: { if case .connect = $0 { true } else { false } })
        else {
            Issue.record("expected a connect in \(actions)")
            return
        }
        if delay > .zero {
            #expect(m.snapshot().backingOff == 1 && m.snapshot().connecting == 0)
            _ = m.backoffElapsed(id: id)
        }
        #expect(m.snapshot().connecting == 1)
        actions = m.connectFailed(id: id, reason: "failed", failure: failure)
    }
    let s = m.snapshot()
    #expect(s.connectFailures == [.refused: 2, .tls: 1, .timeout: 1])
    #expect(s.connectionsOpened == 0 && s.connectionsClosed.isEmpty && s.writes == 0)
    #expect(s.backingOff == 1 && s.queued == 1)
    // A timed-out connect is reported as a timeout, the others as socket errors.
    #expect(m.events.filter { if case .timeout = $0 { true } else { false } }.count == 1)
}

@Test func outcomesCarryWhenTheNotificationWasLastWritten() {
    var m = BinaryPoolStateMachine(configuration: config())
    _ = m.enqueue([], rejected: [(item(99), "too big")])
    let id = connected(&m, items: 4)
    _ = m.send(id: id, now: t0)
    // Identifier 2 is tag 1: tag 0 was accepted, tags 2 and 3 are written again.
    _ = m.errorResponse(id: id, ErrorResponse(status: .invalidToken, identifier: 2), now: t0 + .milliseconds(5))
    var got = outcomes(&m)
    #expect(got.count == 3)
    #expect(got.first { $0.tag == 99 }?.writtenAt == nil)
    #expect(got.first { $0.tag == 0 }.map { $0.isTransmitted && $0.writtenAt == instant(t0) } == true)
    #expect(got.first { $0.tag == 1 }.map { $0.status == .invalidToken && $0.writtenAt == instant(t0) } == true)
    _ = m.connectionClosed(id: id, reason: "error response")
    let next = m.connections.keys.first!
    _ = m.connectionEstablished(id: next)
    _ = m.send(id: next, now: t0 + .milliseconds(20))
    _ = m.timerFired(id: next, now: t0 + .seconds(2))
    got = outcomes(&m)
    #expect(got.map(\.tag) == [2, 3])
    #expect(got.allSatisfy { $0.writtenAt == instant(t0 + .milliseconds(20)) && $0.attempts == 2 })
}

@Test func aConnectionsStateFollowsItsLife() {
    var m = BinaryPoolStateMachine(configuration: config())
    let id = connected(&m, items: 4)
    // Ready, with a pump scheduled for what is queued.
    #expect(m.connections[id]?.state == .ready(.init(pumpScheduled: true)))
    _ = m.send(id: id, now: t0)
    #expect(m.connections[id]?.state == .ready(.init()))
    _ = m.timerFired(id: id, now: t0 + .seconds(1))
    #expect(m.connections[id]?.state == .ready(.init(productive: true)))
    #expect(m.idleTimeout(id: id) == [.close(id: id)])
    #expect(m.connections[id]?.state == .closing(.idle))
    // A closing connection takes nothing more.
    #expect(m.takeBatch(id: id).isEmpty)
    _ = m.connectionClosed(id: id, reason: "closed")
    // The next one connects at once, and fails on an error response.
    let next = m.enqueue([item(9)]).compactMap { if case .connect(let id, .zero) = $0 { id } else { nil } }.first
    guard let next else {
        Issue.record("expected a connect without delay")
        return
    }
    #expect(m.connections[next]?.state == .connecting)
    _ = m.connectionEstablished(id: next)
    _ = m.send(id: next, now: t0)
    let identifier = m.connections[next]?.cache.first?.identifier ?? 0
    let actions = m.errorResponse(id: next, ErrorResponse(status: .invalidToken, identifier: identifier), now: t0)
    #expect(actions.contains(.close(id: next)))
    #expect(m.connections[next]?.state == .failed(.errorResponse))
}
