import APNSCore
import APNSHTTP2Core
import NIOCore
import NIOHPACK
import Synchronization
import Testing

@testable import APNSHTTP2

// MARK: Snapshot

extension HTTP2PoolStateMachineTests {
    /// Enqueues one request on a pool without connections, brings the connection it opens to
    /// ready, and has the request answered with 200; returns the connection.
    func openAndUse(_ m: inout Machine, tag: Int) -> Int {
        let ids = Self.connectIDs(m.enqueue([Self.request(tag)], rejected: []))
        #expect(ids.count == 1)
        let id = ids.first ?? -1
        _ = m.channelAttached(id: id)
        _ = m.connectionReady(id: id, initialLimit: 10)
        let sent = Self.written(m.takeWork(id: id, free: true).work)
        _ = m.streamsFinished(id: id, results: sent.map { Self.answer($0, 200) }, free: true)
        return id
    }

    @Test func snapshotCountsConnectionsStreamsWritesResendsAnd429s() {
        var m = machine()
        #expect(
            m.snapshot()
                == {
                    var s = APNSPoolSnapshot()
                    s.streamsInUse = 0
                    return s
                }()
        )
        _ = m.enqueue(Self.requests(0..<5), rejected: [])
        var s = m.snapshot()
        #expect(s.connecting == 1 && s.open == 0 && s.queued == 5)
        _ = m.channelAttached(id: 1)
        _ = m.connectionReady(id: 1, initialLimit: 10)
        let sent = Self.written(m.takeWork(id: 1, free: true).work)
        s = m.snapshot()
        #expect(s.open == 1 && s.connecting == 0 && s.connectionsOpened == 1)
        #expect(s.streamsInUse == 5 && s.queued == 0)
        #expect(s.cachedNotifications == nil && s.cachedBytes == nil)
        // Three accepted, one 429 (retried after a delay), one refused (resent at once).
        let results =
            sent[..<3].map { Self.answer($0, 200) } + [
                Self.answer(sent[3], 429, reason: "TooManyRequests"), .unprocessed(sent[4]),
            ]
        let again = Self.written(m.streamsFinished(id: 1, results: results, free: true).work)
        s = m.snapshot()
        #expect(again.map(\.tag) == [4])
        #expect(s.writes == 5 && s.retransmissions == 0 && s.tooManyRequests == 1)
        #expect(s.streamsInUse == 1 && s.queued == 1)
        _ = m.streamsFinished(id: 1, results: again.map { Self.answer($0, 200) }, free: true)
        clocks.advance(.seconds(1))
        _ = m.delayedTimerFired()
        let retried = Self.written(m.takeWork(id: 1, free: true).work)
        #expect(retried.map(\.tag) == [3])
        _ = m.streamsFinished(id: 1, results: retried.map { Self.answer($0, 200) }, free: true)
        s = m.snapshot()
        #expect(s.writes == 7 && s.retransmissions == 2 && s.tooManyRequests == 1)
        #expect(s.streamsInUse == 0 && s.queued == 0)
        #expect(Self.outcomes(&m).count == 5)
    }

    @Test func closesAreCountedByWhyTheyHappened() {
        var m = machine()
        // The server sends GOAWAY.
        let first = openAndUse(&m, tag: 0)
        _ = m.goAway(id: first)
        _ = m.connectionClosed(id: first, results: [], wasReady: true, reason: "GOAWAY")
        // The server closes without a word.
        let second = openAndUse(&m, tag: 1)
        _ = m.connectionClosed(id: second, results: [], wasReady: true, reason: "the server closed the connection")
        // The handler gives up on a PING.
        let third = openAndUse(&m, tag: 2)
        _ = m.connectionClosed(id: third, results: [], wasReady: true, reason: "no PING answer", cause: .other)
        // Idle.
        let fourth = openAndUse(&m, tag: 3)
        let idle = m.closeIfIdle(id: fourth)
        #expect(idle == [.close(id: fourth)])
        _ = m.connectionClosed(id: fourth, results: [], wasReady: true, reason: "idle")
        // Shutdown.
        let fifth = openAndUse(&m, tag: 4)
        let closing = m.beginShutdown()
        #expect(closing == [.close(id: fifth)])
        let closed = m.connectionClosed(id: fifth, results: [], wasReady: true, reason: "closed")
        #expect(closed == [.shutdownComplete])
        let s = m.snapshot()
        #expect(s.connectionsClosed == [.goaway: 1, .silentClose: 1, .other: 1, .idle: 1, .shutdown: 1])
        #expect(s.connectionsOpened == 5 && s.open == 0 && s.connectFailures.isEmpty)
    }

    @Test func failedConnectsAreCountedByKindAndTheBackOffShows() {
        var m = machine {
            $0.connectionRetryLimit = nil
            $0.maxConnections = 2
        }
        #expect(Self.connectIDs(m.enqueue(Self.requests(0..<1), rejected: [])) == [1, 2])
        _ = m.connectionClosed(id: 1, results: [], wasReady: false, reason: "refused", failure: .refused)
        let timedOut = m.connectTimedOut(id: 2)
        #expect(timedOut == [.close(id: 2)])
        _ = m.connectionClosed(id: 2, results: [], wasReady: false, reason: "closed")
        var s = m.snapshot()
        #expect(s.connectFailures == [.refused: 1, .timeout: 1])
        #expect(s.backingOff == 2 && s.connecting == 0 && s.queued == 1)
        clocks.advance(.seconds(1))
        let ids = Self.connectIDs(m.reconnectTimerFired())
        #expect(ids == [3, 4])
        s = m.snapshot()
        #expect(s.backingOff == 0 && s.connecting == 2)
        _ = m.connectionClosed(id: 3, results: [], wasReady: false, reason: "certificate", failure: .tls)
        #expect(m.snapshot().connectFailures == [.refused: 1, .timeout: 1, .tls: 1])
        // A connection the client closed before it was ready is not a failure.
        _ = m.beginShutdown()
        _ = m.abandon(reason: "done")
        let late = m.channelAttached(id: 4)
        #expect(late == [.close(id: 4)])
        _ = m.connectionClosed(id: 4, results: [], wasReady: false, reason: "closed")
        s = m.snapshot()
        #expect(s.connectFailures == [.refused: 1, .timeout: 1, .tls: 1])
        #expect(s.connectionsOpened == 0 && s.connectionsClosed.isEmpty)
    }

    @Test func eachNewProviderTokenIsCounted() throws {
        let clock = ManualClock()
        var c = Machine.Configuration()
        c.clock = { [clocks] in clocks.deadline }
        c.providerTokens = true
        let provider = try ClientHarness.tokenProvider(clock: { clock.now })
        var m = Machine(configuration: c)
        let id = ready(&m, count: 2, limit: 1)
        var sent = Self.written(m.takeWork(id: id, free: true, token: try Self.offer(provider)).work)
        #expect(m.snapshot().providerTokenRefreshes == 1)
        sent = Self.written(
            m.streamsFinished(
                id: id,
                results: sent.map { Self.answer($0, 200) },
                free: true,
                token: try Self.offer(provider)
            ).work
        )
        #expect(sent.count == 1 && m.snapshot().providerTokenRefreshes == 1)
        // Past the refresh interval (50 minutes) the provider signs a new one.
        clock.advance(by: 51 * 60)
        _ = m.enqueue(Self.requests(2..<3), rejected: [])
        let next = m.streamsFinished(
            id: id,
            results: sent.map { Self.answer($0, 200) },
            free: true,
            token: try Self.offer(provider)
        ).work
        #expect(next.requests.count == 1)
        #expect(m.snapshot().providerTokenRefreshes == 2)
    }

    @Test func aProviderTokenCountsAsAcceptedOnlyOnA200OrA4xxOtherThan403And429() throws {
        var c = Machine.Configuration()
        c.clock = { [clocks] in clocks.deadline }
        c.providerTokens = true
        c.retryBaseDelay = .seconds(60)
        let provider = try ClientHarness.tokenProvider()
        let token = try provider.currentToken()
        var m = Machine(configuration: c)
        let id = ready(&m, count: 6, limit: 10)
        let sent = Self.written(m.takeWork(id: id, free: true, token: try Self.offer(provider)).work)
        #expect(sent.count == 6 && sent.allSatisfy { Int64($0.providerTokenIssuedAt) == token.issuedAt })
        // Refusals of the token, and answers that say nothing about it.
        _ = m.streamsFinished(
            id: id,
            results: [
                Self.answer(sent[0], 403, reason: "InvalidProviderToken"),
                Self.answer(sent[1], 429, reason: "TooManyProviderTokenUpdates"),
                Self.answer(sent[2], 500, reason: "InternalServerError"),
                Self.answer(sent[3], 503, reason: "ServiceUnavailable"),
            ],
            free: false
        )
        #expect(m.snapshot().providerTokenAcceptedAt == nil)
        // A 400 is an answer about the notification: the token was taken.
        _ = m.streamsFinished(id: id, results: [Self.answer(sent[4], 400, reason: "BadDeviceToken")], free: false)
        #expect(m.snapshot().providerTokenAcceptedAt == token.issuedAt)
        // An answer to a request written with an older token (one a connection used before it
        // adopted the current one) leaves the newest one.
        var older = sent[5]
        older.providerTokenIssuedAt = UInt32(token.issuedAt - 3000)
        _ = m.streamsFinished(id: id, results: [Self.answer(older, 200)], free: false)
        #expect(m.snapshot().providerTokenAcceptedAt == token.issuedAt)
    }

    @Test func outcomesCarryWhenTheRequestWasLastWritten() {
        var m = machine()
        let rejected = APNSDeliveryOutcome(
            tag: 9,
            token: try! DeviceToken(bytes: [UInt8](repeating: 9, count: 32)),
            status: .invalidPayload,
            attempts: 0,
            possibleDuplicate: false
        )
        _ = m.enqueue([], rejected: [rejected])
        let id = ready(&m, count: 2, limit: 10)
        let first: UInt64 = 1_000_000_000
        let second = first + 7_000_000
        let sent = Self.written(m.takeWork(id: id, free: true).work, at: first)
        let resent = Self.written(
            m.streamsFinished(id: id, results: [Self.answer(sent[0], 200), .unprocessed(sent[1])], free: true).work,
            at: second
        )
        _ = m.streamsFinished(id: id, results: resent.map { Self.answer($0, 200) }, free: true)
        let got = Dictionary(uniqueKeysWithValues: Self.outcomes(&m).map { ($0.tag, $0) })
        #expect(got[9]?.writtenAt == nil)
        #expect(got[0]?.writtenAt == first)
        #expect(got[1]?.writtenAt == second)
    }
}

extension HTTP2PoolStateMachineTests {
    @Test("Outcomes carry the apns-id sent and the apns-unique-id the server answered with (sandbox, §3.4)")
    func outcomesCarryTheIdsOfTheAnswer() {
        var m = machine()
        let id = ready(&m, count: 3, limit: 10)
        let written = Self.written(m.takeWork(id: id, free: true).work)
        func answered(_ request: QueuedRequest, _ status: Int, unique: String?, body: String = "") -> StreamResult {
            var headers = HPACKHeaders([(":status", "\(status)"), ("apns-id", request.apnsID)])
            if let unique { headers.add(name: "apns-unique-id", value: unique) }
            return .answered(request, status: status, headers: headers, body: Array(body.utf8))
        }
        _ = m.streamsFinished(
            id: id,
            results: [
                answered(written[0], 200, unique: "u-0"), answered(written[1], 200, unique: nil),
                answered(written[2], 400, unique: "u-2", body: #"{"reason":"BadDeviceToken"}"#),
            ],
            free: true
        )
        let outcomes = Dictionary(uniqueKeysWithValues: Self.outcomes(&m).map { ($0.tag, $0) })
        #expect(outcomes[0]?.apnsID == "id-0" && outcomes[0]?.apnsUniqueID == "u-0")
        #expect(outcomes[1]?.apnsID == "id-1" && outcomes[1]?.apnsUniqueID == nil)
        #expect(
            outcomes[2]?.status == .badRequest && outcomes[2]?.apnsID == "id-2" && outcomes[2]?.apnsUniqueID == "u-2"
        )
    }
}
