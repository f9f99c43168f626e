import APNSCore
import APNSHTTP2Core
import NIOCore
import Testing

@testable import APNSHTTP2

/// The two retry budgets of the pool (§3.4): `retryLimit` for 429 and 5xx answers about the
/// service; ``HTTP2PoolStateMachine/Configuration/maxConnectionResends`` for answers about the
/// connection or its provider token, which are resent at once on another connection.
extension HTTP2PoolStateMachineTests {
    /// Enqueues request 0 with `retryLimit`; the id of the connection it opens.
    func start(_ m: inout Machine, retryLimit: Int) -> Int {
        let ids = Self.connectIDs(m.enqueue([Self.request(0, retryLimit: retryLimit)], rejected: []))
        #expect(ids.count == 1)
        return ids.first ?? -1
    }

    /// Brings connection `id` to ready and writes what it takes.
    func write(_ m: inout Machine, on id: Int) -> [QueuedRequest] {
        _ = m.channelAttached(id: id)
        _ = m.connectionReady(id: id, initialLimit: 10)
        return Self.written(m.takeWork(id: id, free: true).work)
    }

    static func armsRetryTimer(_ actions: [Machine.Action]) -> Bool {
        actions.contains { if case .armDelayedTimer = $0 { true } else { false } }
    }

    @Test(
        "With retryLimit 0, an answer about the connection or its token is resent at once on a new connection",
        arguments: [
            (403, "ExpiredProviderToken"), (400, "IdleTimeout"), (429, "TooManyProviderTokenUpdates"),
            (403, "UnrelatedKeyIdInToken"), (503, "Shutdown"),
        ]
    )
    func connectionAnswersDoNotSpendTheRetryLimit(status: Int, reason: String) {
        var m = machine()
        let first = start(&m, retryLimit: 0)
        let sent = write(&m, on: first)
        #expect(sent.map(\.tag) == [0])
        let answered = m.streamsFinished(
            id: first,
            results: [Self.answer(sent[0], status, reason: reason)],
            free: true
        )
        // The answering connection closes; no back-off; a new connection is opened at once.
        #expect(answered.work.close)
        #expect(!Self.armsRetryTimer(answered.actions) && m.delayed.isEmpty)
        let next = Self.connectIDs(answered.actions)
        #expect(next.count == 1 && next.first != first)
        #expect(Self.outcomes(&m).isEmpty)
        #expect(m.queue.map(\.retries) == [0] && m.queue.map(\.connectionResends) == [1])
        // The new connection delivers it.
        let second = next.first ?? -1
        let again = write(&m, on: second)
        #expect(again.map(\.tag) == [0])
        _ = m.streamsFinished(id: second, results: [Self.answer(again[0], 200)], free: true)
        let outcomes = Self.outcomes(&m)
        #expect(outcomes.map(\.tag) == [0] && outcomes.allSatisfy(\.isTransmitted))
    }

    @Test func connectionResendsStopAtTheirOwnCap() {
        var m = machine { $0.maxConnectionResends = 3 }
        var id = start(&m, retryLimit: 5)
        for resends in 0...3 {
            let sent = write(&m, on: id)
            #expect(sent.map { Int($0.connectionResends) } == [resends])
            let answered = m.streamsFinished(
                id: id,
                results: [Self.answer(sent[0], 400, reason: "IdleTimeout")],
                free: true
            )
            if resends < 3 {
                #expect(Self.outcomes(&m).isEmpty)
                id = Self.connectIDs(answered.actions).first ?? -1
            }
        }
        let failed = Self.outcomes(&m)
        #expect(failed.map(\.reason) == ["IdleTimeout"] && failed.map(\.status?.rawValue) == [400])
        #expect(failed.first?.message?.contains("gave up after 3 resends on new connections") == true)
        #expect(m.queue.isEmpty && m.delayed.isEmpty)
    }

    @Test func aTokenRefreshLeavesTheWholeRetryLimitForServerErrors() {
        var m = machine { $0.retryBaseDelay = .seconds(1) }
        var id = start(&m, retryLimit: 1)
        var sent = write(&m, on: id)
        let refreshed = m.streamsFinished(
            id: id,
            results: [Self.answer(sent[0], 403, reason: "ExpiredProviderToken")],
            free: true
        )
        id = Self.connectIDs(refreshed.actions).first ?? -1
        sent = write(&m, on: id)
        // The one 5xx retry `retryLimit` 1 allows, after the back-off.
        let t0 = clocks.deadline
        let failedOnce = m.streamsFinished(
            id: id,
            results: [Self.answer(sent[0], 500, reason: "InternalServerError")],
            free: true
        )
        #expect(failedOnce.actions.contains(.armDelayedTimer(t0 + .seconds(1))))
        #expect(Self.outcomes(&m).isEmpty)
        clocks.advance(.seconds(1))
        #expect(m.delayedTimerFired().contains(.wake(id: id)))
        sent = Self.written(m.takeWork(id: id, free: true).work)
        #expect(sent.map(\.retries) == [1] && sent.map(\.connectionResends) == [1])
        _ = m.streamsFinished(id: id, results: [Self.answer(sent[0], 500, reason: "InternalServerError")], free: true)
        let failed = Self.outcomes(&m)
        #expect(failed.map(\.status?.rawValue) == [500])
        #expect(failed.first?.message?.contains("gave up after 1 retries") == true)
    }

    @Test(
        "With retryLimit 0, 429 TooManyRequests and a 5xx about the service are final",
        arguments: [(429, "TooManyRequests"), (500, "InternalServerError"), (503, "ServiceUnavailable")]
    )
    func serviceAnswersSpendTheRetryLimit(status: Int, reason: String) {
        var m = machine()
        let id = start(&m, retryLimit: 0)
        let sent = write(&m, on: id)
        let answered = m.streamsFinished(id: id, results: [Self.answer(sent[0], status, reason: reason)], free: true)
        #expect(!Self.armsRetryTimer(answered.actions) && Self.connectIDs(answered.actions).isEmpty)
        let failed = Self.outcomes(&m)
        #expect(failed.map(\.reason) == [reason] && failed.map(\.status?.rawValue) == [status])
        #expect(failed.first?.message?.contains("gave up after 0 retries") == true)
        #expect(m.queue.isEmpty && m.delayed.isEmpty)
    }
}
