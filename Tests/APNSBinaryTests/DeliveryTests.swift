import APNSCore
import APNSSimulator
import Foundation
import Testing

@testable import APNSBinary

/// Lossless, duplicate-free delivery against the simulator over TLS (§1.5, §6.1).
@Suite(.serialized, .timeLimit(.minutes(10)))
struct DeliveryTests {
    /// 20,000 notifications over 20,000 tokens, 1% bad tokens spread evenly.
    static let count = 20_000
    static func isBad(_ i: Int) -> Bool { i % 100 == 50 }

    static func submissions(count: Int = count) -> [APNSSubmission] {
        let n = Harness.notification()
        return (0..<count).map { APNSSubmission(tag: UInt64($0), token: Harness.token($0), notification: n) }
    }

    static var badTokens: Set<DeviceToken> {
        Set((0..<count).filter(isBad).map(Harness.token))
    }

    /// Every valid token accepted by the simulator exactly once and reported transmitted once;
    /// every bad one reported once with status 8 and never accepted.
    static func expectExactlyOnce(_ run: Harness.Run, _ simulator: APNSSimulator, count: Int = count) {
        #expect(run.duplicateOutcomes == 0)
        #expect(run.outcomes.count == count)
        let accepted = simulator.acceptedByToken
        var wrong: [String] = []
        for i in 0..<count {
            let token = Harness.token(i)
            let outcome = run.outcomes[UInt64(i)]
            if isBad(i) {
                if outcome?.status != .invalidToken {
                    wrong.append("bad token \(i): outcome \(String(describing: outcome?.status))")
                }
                if accepted[token] != nil { wrong.append("bad token \(i) accepted") }
            } else {
                if outcome?.isTransmitted != true {
                    wrong.append("token \(i): outcome \(String(describing: outcome?.status))")
                }
                if accepted[token] != 1 { wrong.append("token \(i) accepted \(accepted[token] ?? 0) times") }
            }
            if outcome?.possibleDuplicate == true { wrong.append("token \(i) marked possibleDuplicate") }
        }
        let problems = wrong.count
        #expect(problems == 0, "first problems: \(wrong.prefix(5))")
        if problems > 0 { summarize(run) }
        #expect(accepted.values.reduce(0, +) == count - count / 100)
    }

    /// Prints what happened, to diagnose a failed run.
    static func summarize(_ run: Harness.Run) {
        var kinds: [String: Int] = [:]
        for event in run.events {
            switch event {
            case .connected: kinds["connected", default: 0] += 1
            case .disconnected(_, let reason): kinds["disconnected: \(reason.prefix(60))", default: 0] += 1
            case .timeout(_, let reason): kinds["timeout: \(reason)", default: 0] += 1
            case .socketError(_, let e): kinds["socketError: \(e.prefix(80))", default: 0] += 1
            case .error(let e): kinds["error: \(e)", default: 0] += 1
            default: break
            }
        }
        print("events: \(kinds.sorted { $0.key < $1.key })")
        print("outcomes: \(run.outcomes.count), duplicates: \(run.duplicateOutcomes)")
    }

    @Test func everyNotificationExactlyOnceOverOneConnection() async throws {
        let simulator = try await Harness.simulator {
            $0.badTokens = Self.badTokens
            $0.errorDelay = .milliseconds(200)
        }
        let client = try Harness.client(simulator)
        let run = try await Harness.run(client, Self.submissions())
        Self.expectExactlyOnce(run, simulator)
        #expect(simulator.statistics.errorResponses >= 200)
        #expect(client.snapshot().retransmissions > 0)
        await simulator.stop()
    }

    @Test func everyNotificationExactlyOnceOverFourConnections() async throws {
        let simulator = try await Harness.simulator {
            $0.badTokens = Self.badTokens
            $0.errorDelay = .milliseconds(200)
        }
        let client = try Harness.client(simulator) { $0.maxConnections = 4 }
        let run = try await Harness.run(client, Self.submissions())
        Self.expectExactlyOnce(run, simulator)
        // Four connections were really used at once.
        let connectedIDs = Set(run.events.compactMap { if case .connected(let id) = $0 { id } else { nil } })
        #expect(connectedIDs.count >= 4)
        await simulator.stop()
    }

    @Test func everyNotificationExactlyOnceWithShutdownsEverySixtyOnAConnection() async throws {
        // Every 100th token is bad, and a bad token ends its connection: a shutdown must come
        // sooner than that to happen at all.
        let simulator = try await Harness.simulator {
            $0.badTokens = Self.badTokens
            $0.errorDelay = .milliseconds(200)
            $0.shutdownEvery = 60
        }
        let client = try Harness.client(simulator) { $0.maxConnections = 4 }
        let run = try await Harness.run(client, Self.submissions())
        Self.expectExactlyOnce(run, simulator)
        #expect(simulator.statistics.shutdowns > 0, "the simulator never shut a connection down")
        await simulator.stop()
    }

    @Test func aCacheFarSmallerThanTheErrorDelayNeedsSlowsSendingButLosesNothing() async throws {
        let simulator = try await Harness.simulator {
            $0.badTokens = Self.badTokens
            $0.errorDelay = .milliseconds(200)
        }
        // At thousands of notifications per second a 200 ms error delay needs thousands of
        // cache entries; 64 per connection forces sending to wait for confirmations.
        // The queue is small too, so that the wait for confirmations reaches the sender.
        let client = try Harness.client(simulator) {
            $0.maxConnections = 4
            $0.cacheMaxCount = 64
            $0.maxPending = 256
            $0.confirmationWindow = .milliseconds(400)
        }
        let run = try await Harness.run(client, Self.submissions())
        Self.expectExactlyOnce(run, simulator)
        // The premise: sending did wait for the cache to free.
        #expect(client.snapshot().backpressureWaits > 0, "sending never waited for the sent cache")
        await simulator.stop()
    }

    @Test func silentDropsLoseNothingAndFlagPossibleDuplicates() async throws {
        let count = 4000
        let simulator = try await Harness.simulator {
            $0.dropEvery = 300
        }
        // A 500 ms window: the binary protocol confirms nothing but errors, so a notification is
        // taken as delivered once the window passes with its connection open. With 100 ms, a
        // machine loaded by other builds delayed the client's sight of a silent close past the
        // window, and notifications the gateway never read were taken as delivered.
        let client = try Harness.client(simulator) {
            $0.maxConnections = 2
            $0.confirmationWindow = .milliseconds(500)
            $0.connectionRetryLimit = 50
        }
        let run = try await Harness.run(client, Self.submissions(count: count))
        #expect(run.duplicateOutcomes == 0)
        #expect(run.outcomes.count == count)
        let accepted = simulator.acceptedByToken
        var lost = 0
        var unflaggedDuplicates = 0
        var flagged = 0
        for i in 0..<count {
            let outcome = run.outcomes[UInt64(i)]
            #expect(outcome?.isTransmitted == true)
            let times = accepted[Harness.token(i)] ?? 0
            if times == 0 { lost += 1 }
            if times > 1 && outcome?.possibleDuplicate != true { unflaggedDuplicates += 1 }
            if outcome?.possibleDuplicate == true { flagged += 1 }
        }
        #expect(lost == 0)
        #expect(unflaggedDuplicates == 0)
        #expect(simulator.statistics.silentDrops > 0)
        #expect(flagged > 0)
        await simulator.stop()
    }

    @Test func silentDropsWithoutResendReportIndeterminateAndNeverDuplicate() async throws {
        let simulator = try await Harness.simulator { $0.dropEvery = 500 }
        let client = try Harness.client(simulator) {
            $0.resendOnUnknown = false
            $0.confirmationWindow = .seconds(2)
        }
        let all = Self.submissions(count: 700)
        // Phase 1: 300 notifications, confirmed by the window on a healthy connection.
        let first = try await Harness.run(client, Array(all[..<300]), shutdown: false)
        #expect(first.outcomes.count == 300)
        #expect(first.outcomes.values.allSatisfy { $0.isTransmitted && !$0.possibleDuplicate })
        // Phase 2: 400 more on the same connection; the gateway accepts 200 of them, then hangs
        // up without an error packet. None of the 400 can be confirmed, so all are indeterminate.
        let second = try await Harness.run(client, Array(all[300...]))
        #expect(second.outcomes.count == 400)
        #expect(second.outcomes.values.allSatisfy { $0.status == .indeterminate && $0.possibleDuplicate })
        let accepted = simulator.acceptedByToken
        #expect(accepted.count == 500)
        #expect(accepted.values.allSatisfy { $0 == 1 })
        #expect((300..<700).filter { accepted[Harness.token($0)] != nil }.count == 200)
        await simulator.stop()
    }

    @Test func shutdownDrainsWithAProbeInsteadOfWaitingForTheWindow() async throws {
        let simulator = try await Harness.simulator()
        // With a one-hour window only the shutdown probe can confirm these notifications.
        let client = try Harness.client(simulator) { $0.confirmationWindow = .seconds(3600) }
        let count = 1000
        let collector = Task {
            var outcomes: [APNSDeliveryOutcome] = []
            for await event in client.events {
                if let o = event.outcome { outcomes.append(o) }
            }
            return outcomes
        }
        try await client.send(Self.submissions(count: count))
        await client.shutdown()
        let outcomes = await collector.value
        #expect(outcomes.count == count)
        #expect(outcomes.allSatisfy { $0.isTransmitted })
        #expect(simulator.acceptedByToken.count == count)
        #expect(simulator.statistics.errorResponses == 1)
        await simulator.stop()
    }

    @Test func sendAfterShutdownThrows() async throws {
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator)
        await client.shutdown()
        await #expect(throws: APNSError.self) {
            try await client.send(Harness.notification(), to: Harness.token(1), tag: 1)
        }
        await simulator.stop()
    }

    @Test func enhancedFramesAreDeliveredToo() async throws {
        let simulator = try await Harness.simulator {
            $0.badTokens = [Harness.token(5)]
        }
        let client = try Harness.client(simulator) { $0.frameFormat = .enhanced }
        let run = try await Harness.run(client, Self.submissions(count: 50))
        #expect(run.outcomes.count == 50)
        #expect(run.outcomes[5]?.status == .invalidToken)
        #expect(run.outcomes.values.filter { $0.isTransmitted }.count == 49)
        #expect(simulator.acceptedByToken.count == 49)
        await simulator.stop()
    }

    @Test func invalidPayloadIsReportedWithoutBeingSent() async throws {
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator)
        var big = Harness.notification(String(repeating: "x", count: 3000))
        big.truncateAtWordEnd = false
        let run = try await Harness.run(
            client,
            [
                APNSSubmission(tag: 1, token: Harness.token(1), notification: big),
                APNSSubmission(tag: 2, token: Harness.token(2), notification: Harness.notification()),
            ]
        )
        #expect(run.outcomes[1]?.status == .invalidPayload)
        #expect(run.outcomes[1]?.message?.contains("2048") == true)
        #expect(run.outcomes[2]?.isTransmitted == true)
        #expect(simulator.acceptedByToken[Harness.token(1)] == nil)
        await simulator.stop()
    }

    @Test func simulatorAnswersEachKindOfBadFrameWithItsStatus() async throws {
        let simulator = try await Harness.simulator {
            $0.maxPayload = 100
        }
        let client = try Harness.client(simulator) { $0.payloadLimit = 2048 }
        // Payload over the simulator's limit → 7; a 20-byte token → 5.
        let long = Harness.notification(String(repeating: "y", count: 200))
        let run = try await Harness.run(
            client,
            [
                APNSSubmission(tag: 1, token: Harness.token(1), notification: long),
                APNSSubmission(
                    tag: 2,
                    token: try DeviceToken(bytes: [UInt8](repeating: 1, count: 20)),
                    notification: Harness.notification()
                ),
                APNSSubmission(tag: 3, token: Harness.token(3), notification: Harness.notification()),
            ]
        )
        #expect(run.outcomes[1]?.status == .invalidPayloadSize)
        #expect(run.outcomes[2]?.status == .invalidTokenSize)
        #expect(run.outcomes[3]?.isTransmitted == true)
        await simulator.stop()
    }
}
