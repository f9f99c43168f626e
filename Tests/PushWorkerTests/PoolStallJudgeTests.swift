import Testing

@testable import PushWorker

/// Which pools are stalled (``PoolStallJudge``): observations a second apart, as the worker takes
/// them, with the counters a busy, a dead, a slow and a rate-limited pool show.
@Suite struct PoolStallJudgeTests {
    let key = PoolKey(app: "a", environment: .production)
    let start = ContinuousClock.now

    /// Observations at whole seconds from `start`: (writes, outcomes, held, queued) each.
    func observe(
        _ judge: inout PoolStallJudge,
        _ samples: [(writes: Int, outcomes: Int, held: Int, queued: Int)]
    ) -> [Bool] {
        samples.enumerated().map { second, s in
            judge.observe(
                key,
                .init(
                    at: start + .seconds(second),
                    writes: s.writes,
                    outcomes: s.outcomes,
                    held: s.held,
                    queued: s.queued
                )
            )
        }
    }

    @Test func aBusyPoolIsNeverStalled() {
        var judge = PoolStallJudge(least: 1_000)
        // 60,000 a second through a pool that holds a second's worth, 5,000 of them queued.
        let busy = (0..<12).map {
            (writes: 60_000 * $0, outcomes: max(0, 60_000 * ($0 - 1)), held: 60_000, queued: 5_000)
        }
        #expect(observe(&judge, busy).allSatisfy { !$0 })
        #expect(judge.stalled.isEmpty)
    }

    @Test func aPoolThatWritesNothingIsStalledAtItsSecondObservation() {
        var judge = PoolStallJudge(least: 1_000)
        let dead = Array(repeating: (writes: 0, outcomes: 0, held: 20_000, queued: 20_000), count: 3)
        #expect(observe(&judge, dead) == [false, true, true], "the first observation has nothing to compare with")
        #expect(judge.stalled == [key])
    }

    @Test func aSlowGatewayStallsItsPoolAndItCatchesUpOnceItsQueueIsShort() {
        var judge = PoolStallJudge(least: 1_000)
        // 2,000 streams answered after 5 s: 400 written a second, 18,000 queued behind them.
        var slow = (0..<4).map { (writes: 400 * $0, outcomes: 0, held: 20_000, queued: 18_000 - 400 * $0) }
        #expect(observe(&judge, slow) == [false, true, true, true])
        // No more comes in: the queue empties at the gateway's pace, and the pool catches up once
        // fewer than `least` wait and it finishes what it held five seconds before.
        var judge2 = PoolStallJudge(least: 1_000)
        slow = [
            (0, 0, 2_900, 900), (400, 400, 2_500, 500), (800, 800, 2_100, 100), (1_200, 1_200, 1_700, 0),
            (1_600, 1_600, 1_300, 0), (2_000, 2_000, 900, 0), (2_400, 2_400, 500, 0),
        ]
        #expect(observe(&judge2, slow).allSatisfy { !$0 }, "fewer than least queued; held done within 5 s")
    }

    @Test func aPoolAnswered429IsStalledWhenItFinishesLessInFiveSecondsThanItHeld() {
        var judge = PoolStallJudge(least: 1_000)
        // Every request answered at once with 429 and retried after 1, 2 and 4 s: it writes a lot,
        // queues little, and finishes nothing for 7 s.
        let limited = (0..<7).map { (writes: 3_000 * $0, outcomes: 0, held: 20_000, queued: 500) }
        #expect(observe(&judge, limited) == [false, false, false, false, false, true, true])
    }

    @Test func aSmallPoolIsNeverStalled() {
        var judge = PoolStallJudge(least: 1_000)
        let small = Array(repeating: (writes: 0, outcomes: 0, held: 999, queued: 999), count: 8)
        #expect(observe(&judge, small).allSatisfy { !$0 })
    }

    @Test func aReplacedPoolIsJudgedAfresh() {
        var judge = PoolStallJudge(least: 1_000)
        let before = Array(repeating: (writes: 50_000, outcomes: 0, held: 20_000, queued: 20_000), count: 2)
        #expect(observe(&judge, before) == [false, true])
        // The replacement's counters start at 0: it has no history to be judged by yet.
        let replaced = judge.observe(
            key,
            .init(at: start + .seconds(2), writes: 0, outcomes: 0, held: 5_000, queued: 5_000)
        )
        #expect(!replaced)
        judge.forget(key)
        #expect(judge.stalled.isEmpty)
    }
}
