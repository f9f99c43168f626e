import Testing

@testable import APNSHTTP2

/// `minConnections` in the HTTP/2 pool's logic: opened by `start()`, left open by the idle
/// timeout, replaced when one closes while nothing is queued.
@Suite struct HTTP2WarmConnectionsTests {
    typealias Machine = HTTP2PoolStateMachine
    typealias Steps = HTTP2PoolStateMachineTests

    @Test func startOpensTheMinimumAndTheIdleTimeoutLeavesItOpen() {
        var m = Steps().machine {
            $0.maxConnections = 3
            $0.minConnections = 2
        }
        let warm = Steps.connectIDs(m.start())
        #expect(warm.count == 2)
        for id in warm {
            _ = m.channelAttached(id: id)
            _ = m.connectionReady(id: id, initialLimit: 10)
        }
        #expect(Steps.connectIDs(m.start()).isEmpty, "started twice: nothing more")
        // Work opens the third connection; once it is done, only the one above the minimum may close.
        let third = Steps.connectIDs(m.enqueue(Steps.requests(0..<2), rejected: []))
        #expect(third.count == 1)
        for id in warm {
            let written = Steps.written(m.takeWork(id: id, free: true).work)
            _ = m.streamsFinished(id: id, results: written.map { Steps.answer($0, 200) }, free: true)
        }
        #expect(m.queue.isEmpty && m.inFlight == 0)
        let first = m.closeIfIdle(id: warm[0])
        let second = m.closeIfIdle(id: warm[1])
        #expect(first == [.close(id: warm[0])])
        #expect(second.isEmpty, "the pool is down to its minimum")
    }

    @Test func aWarmConnectionThatClosesIsReplacedWhileNothingIsQueued() {
        var m = Steps().machine { $0.minConnections = 1 }
        let ids = Steps.connectIDs(m.start())
        #expect(ids.count == 1)
        _ = m.channelAttached(id: ids[0])
        _ = m.connectionReady(id: ids[0], initialLimit: 10)
        let actions = m.connectionClosed(id: ids[0], results: [], wasReady: true, reason: "GOAWAY")
        #expect(Steps.connectIDs(actions).count == 1)
    }

    @Test func withoutAMinimumStartOpensOneAndTheIdleTimeoutClosesIt() {
        var m = Steps().machine()
        let ids = Steps.connectIDs(m.start())
        #expect(ids.count == 1)
        _ = m.channelAttached(id: ids[0])
        _ = m.connectionReady(id: ids[0], initialLimit: 10)
        let closes = m.closeIfIdle(id: ids[0])
        #expect(closes == [.close(id: ids[0])])
    }
}
