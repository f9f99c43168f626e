import Testing

@testable import APNSCore

/// The parts both connection pools share, each driven step by step as a value.
@Suite struct PoolPartsTests {
    struct Item: APNSQueuedNotification {
        var tag: UInt64
        var staleAt: Int64? = nil
        var possibleDuplicate = false
        var token = try! DeviceToken(bytes: [UInt8](repeating: 7, count: 32))
        var attempts = 0
        var writtenAt: UInt64? = nil
        var urgent = false

        func failure(_ status: APNSStatus, message: String) -> APNSDeliveryOutcome {
            APNSDeliveryOutcome(
                tag: tag,
                token: token,
                status: status,
                message: message,
                attempts: 1,
                possibleDuplicate: possibleDuplicate
            )
        }
    }

    static func outcomes(_ events: APNSEventBuffer) -> [APNSDeliveryOutcome] { events.compactMap(\.outcome) }

    static func connectionEvents(_ events: APNSEventBuffer) -> [String] {
        events.compactMap { event in
            switch event {
            case .unavailable(let reason): "unavailable: \(reason)"
            case .available: "available"
            default: nil
            }
        }
    }

    @Test func connectionIDsStartAtOneAndCountUp() {
        var ids = APNSConnectionIDs()
        #expect([ids.make(), ids.make(), ids.make()] == [1, 2, 3])
    }

    @Test func onlyDrainingAndAbandoningAreStopping() {
        #expect(!APNSPoolLifecycle.running.isStopping)
        #expect(APNSPoolLifecycle.draining.isStopping)
        #expect(APNSPoolLifecycle.abandoning.isStopping)
        #expect(!APNSPoolLifecycle.finished.isStopping)
    }

    @Test func urgentNotificationsAreWrittenBeforeTheOthersInTheirOwnOrder() {
        var queue = APNSPoolQueue<Item>()
        queue.append(contentsOf: [Item(tag: 1), Item(tag: 2)])
        queue.append(contentsOf: [Item(tag: 10, urgent: true), Item(tag: 3), Item(tag: 11, urgent: true)])
        queue.prepend(Item(tag: 0))
        queue.prepend(Item(tag: 9, urgent: true))
        #expect(queue.map(\.tag) == [9, 10, 11, 0, 1, 2, 3] && queue.count == 7)
        #expect(queue.first?.tag == 9)
        #expect(queue.popFirst()?.tag == 9)
        #expect(queue.removeFirst().tag == 10)
        #expect(queue.popFirst()?.tag == 11)
        #expect(queue.popFirst()?.tag == 0, "the others follow in their order once no urgent one waits")
    }

    @Test func theQueueKeepsOrderWithNewOnesAtTheBackAndResendsAtTheFront() {
        var queue = APNSPoolQueue<Item>()
        #expect(queue.isEmpty && queue.first == nil)
        queue.append(contentsOf: [Item(tag: 1), Item(tag: 2)])
        queue.append(Item(tag: 3))
        queue.prepend(Item(tag: 0))
        #expect(queue.map(\.tag) == [0, 1, 2, 3] && queue.count == 4)
        #expect(queue.popFirst()?.tag == 0)
        #expect(queue.removeFirst().tag == 1)
        #expect(queue.first?.tag == 2 && queue.count == 2)
    }

    @Test func staleNotificationsFailExpiredOrIndeterminateAndTheOthersKeepTheirOrder() {
        var queue = APNSPoolQueue<Item>()
        queue.append(contentsOf: [Item(tag: 1), Item(tag: 2), Item(tag: 3)])
        #expect(!queue.mayHoldStale)
        queue.append(contentsOf: [
            Item(tag: 4, staleAt: 1_000), Item(tag: 5, staleAt: 2_000),
            Item(tag: 6, staleAt: 1_000, possibleDuplicate: true),
        ])
        queue.prepend(Item(tag: 0, staleAt: 999))
        #expect(queue.mayHoldStale)
        var events = APNSEventBuffer(maxConnectionEvents: 10)
        queue.failStale(now: 1_000, peer: "the peer", duplicateNote: "it may have arrived", into: &events)
        #expect(queue.map(\.tag) == [1, 2, 3, 5])
        let failed = Self.outcomes(events)
        #expect(failed.map(\.tag) == [0, 4, 6])
        #expect(failed.map(\.status) == [.expired, .expired, .indeterminate])
        #expect(failed[0].message == "went stale while the peer was unreachable; not sent")
        #expect(failed[2].message == "went stale while the peer was unreachable; it may have arrived")
    }

    @Test func failuresReportUnavailableOnceWithNoConnectionOpenAndAvailableWhenOneOpens() {
        var failures = APNSConnectFailures(baseDelay: .milliseconds(100), maxDelay: .seconds(5), retryLimit: nil)
        var events = APNSEventBuffer(maxConnectionEvents: 10)
        failures.connectionOpened(into: &events)
        #expect(Self.connectionEvents(events).isEmpty)
        // With a connection open, failures count but nobody is told the peer is unavailable.
        for _ in 0..<APNSReconnectBackoff.unavailableAfter {
            failures.record("refused", peer: "gateway:443", noneOpen: false, into: &events)
        }
        #expect(failures.inARow == 3 && !failures.reportedUnavailable && events.count == 0)
        failures.record("refused", peer: "gateway:443", noneOpen: true, into: &events)
        failures.record("reset", peer: "gateway:443", noneOpen: true, into: &events)
        #expect(
            Self.connectionEvents(events) == [
                "unavailable: 4 connection attempts to gateway:443 failed in a row (last: refused)"
            ]
        )
        #expect(failures.reportedUnavailable && !failures.retryLimitReached)
        failures.connectionOpened(into: &events)
        failures.connectionOpened(into: &events)
        #expect(Self.connectionEvents(events).last == "available" && events.count == 2)
        // Opening does not reset the count; the pool decides when a connection proved itself.
        #expect(failures.inARow == 5)
        failures.reset()
        #expect(failures.inARow == 0)
    }

    @Test func theBackOffDoublesUpToItsMaximumAndTheRetryLimitIsReached() {
        var failures = APNSConnectFailures(baseDelay: .milliseconds(100), maxDelay: .milliseconds(500), retryLimit: 4)
        var events = APNSEventBuffer(maxConnectionEvents: 10)
        var delays: [Duration] = []
        for _ in 0..<4 {
            failures.record("refused", peer: "the gateway", noneOpen: true, into: &events)
            delays.append(failures.delay)
        }
        #expect(delays == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(500)])
        #expect(failures.retryLimitReached)
        #expect(
            failures.summary(peer: "the gateway", last: "refused")
                == "4 connection attempts to the gateway failed in a row (last: refused)"
        )
        failures.reset()
        #expect(!failures.retryLimitReached && failures.reportedUnavailable)
    }
}
