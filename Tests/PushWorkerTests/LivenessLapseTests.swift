import APNSCore
import Foundation
import Testing

@testable import PushWorker

/// A worker whose liveness key may have expired while it held claims flags its own results of
/// them `possibleDuplicate`: another worker may have taken the claims over and sent them too.
@Suite(.timeLimit(.minutes(1))) struct LivenessLapseTests {
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }

    @Test func heartbeatsWithinTheTTLNeverLapse() {
        let watch = LivenessWatch(ttl: .seconds(5))
        watch.renewed(sentAt: at(0), at: at(0.01))
        let mark = watch.mark()
        for second in 1...20 { watch.renewed(sentAt: at(Double(second)), at: at(Double(second) + 0.5)) }
        #expect(!watch.mayHaveLapsed(since: mark, at: at(24.9)))
        // No heartbeat for the TTL after the last one sent: the key may be gone now.
        #expect(watch.mayHaveLapsed(since: mark, at: at(25)))
    }

    @Test func aClaimHeldAcrossALapseHasLapsedAfterwardsToo() {
        let watch = LivenessWatch(ttl: .seconds(5))
        watch.renewed(sentAt: at(0), at: at(0.01))
        let before = watch.mark()
        // The heartbeat sent at 1 s is answered only at 12 s (a path that held it): the key
        // expired at 5 s at the earliest.
        watch.renewed(sentAt: at(1), at: at(12))
        watch.renewed(sentAt: at(12), at: at(12.01))
        #expect(watch.mayHaveLapsed(since: before, at: at(12.5)))
        // A claim made after the lapse ended has not.
        let after = watch.mark()
        #expect(!watch.mayHaveLapsed(since: after, at: at(12.5)))
    }

    @Test func aClaimMadeDuringALapseHasLapsed() {
        let watch = LivenessWatch(ttl: .seconds(5))
        watch.renewed(sentAt: at(0), at: at(0.01))
        let during = watch.mark()
        #expect(watch.mayHaveLapsed(since: during, at: at(6)))
        watch.renewed(sentAt: at(7), at: at(7.01))
        #expect(watch.mayHaveLapsed(since: during, at: at(7.5)))
    }

    @Test func beforeTheFirstHeartbeatNothingLapses() {
        let watch = LivenessWatch(ttl: .seconds(5))
        let mark = watch.mark()
        #expect(!watch.mayHaveLapsed(since: mark, at: at(60)))
        watch.renewed(sentAt: at(60), at: at(60.01))
        #expect(!watch.mayHaveLapsed(since: mark, at: at(61)))
    }

    @Test func markingAResultChangesOnlyItsOwnFlag() throws {
        var result = WorkerResult(
            kind: .transmitted,
            resultId: "r1",
            jobId: #"j","possibleDuplicate":false"#,
            app: "a",
            environment: "production",
            token: "ab",
            possibleDuplicate: false,
            worker: "w1",
            at: 1
        )
        result.metadata = Array(#"{"possibleDuplicate":false}"#.utf8)
        let marked = try #require(WorkerResult.markingPossibleDuplicate(result.serialized()))
        let json = try #require(JSONSerialization.jsonObject(with: Data(marked)) as? [String: Any])
        #expect(json["possibleDuplicate"] as? Bool == true)
        #expect(json["jobId"] as? String == #"j","possibleDuplicate":false"#)
        #expect((json["metadata"] as? [String: Any])?["possibleDuplicate"] as? Bool == false)

        result.possibleDuplicate = true
        #expect(WorkerResult.markingPossibleDuplicate(result.serialized()) == nil)
        result.possibleDuplicate = nil
        #expect(WorkerResult.markingPossibleDuplicate(result.serialized()) == nil)
    }

    @Test func aBatchMarksTheResultsOfLapsedClaimsOnly() async throws {
        let stages = StageTests()
        let cs = try await stages.candidates(3)
        let contexts = [
            SentContext(candidate: cs[0], takeover: false, claimMark: 0),
            SentContext(candidate: cs[1], takeover: false, claimMark: 1),
        ]
        let outcomes = (0..<2).map {
            APNSDeliveryOutcome(
                tag: UInt64($0),
                token: cs[$0].token,
                status: nil,
                attempts: 1,
                possibleDuplicate: false
            )
        }
        var items = DeliveryStage.results(of: outcomes, contexts: contexts, factory: stages.factory).items
        // Decided without a send (device limit): never marked.
        items.append(stages.factory.decided(cs[2], status: .rateLimited, reason: "limit", at: 1))
        var plan = ResultStage.plan(items, topic: "apn.results")
        #expect(plan.sent.count == 2)
        // Lapses since mark 0 (one ended, mark 1 is after it).
        #expect(plan.markPossibleDuplicates { $0 != 1 } == 1)
        let flags = plan.messages.map {
            (try? JSONSerialization.jsonObject(with: Data($0.value)) as? [String: Any])?["possibleDuplicate"] as? Bool
        }
        #expect(flags == [true, false, false])
        #expect(plan.metrics.map(\.possibleDuplicate) == [true, false, false])
    }
}
