import Foundation
import PushTestSupport
import Testing

/// How the workers heal, as `apn-bench failover` measures it, at a small scale: three
/// worker processes under a steady load on the embedded Kafka (three brokers) while one is
/// killed, stopped or restarted, or while the gateway is away. Each run reports lost and
/// unflagged duplicate notifications, 515s and the slowest notification.
///
/// The embedded broker makes every rebalance wait `session.timeout.ms` − 1 s whatever the
/// members do (docs/architecture.md), so these runs use a 3 s session timeout: what is checked
/// is the workers' part of a hand-over. The benchmark's target is 12 s (`scripts/bench-failover`,
/// measured on a quiet machine); here, with the rest of the suite running beside it on two
/// cores, a hand-over is allowed ``healBoundMs``: a guard against a hand-over that hangs, with
/// room for a loaded machine, not the measurement.
@Suite("Failover", .serialized, .timeLimit(.minutes(4)))
struct FailoverTests {
    /// The slowest notification a hand-over may leave behind in a full parallel test run.
    private static let healBoundMs = 30_000

    /// Runs one scenario and returns its report.
    private func failover(_ scenario: String, _ extra: [String] = []) async throws -> [String: Any] {
        let result = try await run(
            Paths.benchExecutable,
            [
                "failover", "--scenario", scenario, "--rate", "200", "--seconds", "20", "--event-at", "5",
                "--drain-seconds", "60", "--session-timeout-ms", "3000",
            ] + extra
        )
        let line = result.stdout.split(separator: "\n").last { $0.hasPrefix("{") }
        let report = try #require(
            line.flatMap { jsonObject(String($0)) },
            "no report: \(result.stdout)\n\(result.stderr.suffix(3000))"
        )
        // Every run's figures, failed or not: the margins to the targets show in the log.
        print("apn-bench failover \(scenario): \(line ?? "")")
        #expect(result.status == 0, "\(report)")
        return report
    }

    private func expectNoLossAndNoUnflaggedDuplicate(_ report: [String: Any]) {
        #expect(report["lost"] as? Int == 0, "\(report)")
        #expect(report["unflaggedDuplicates"] as? Int == 0, "\(report)")
        #expect(report["connectionFailed515"] as? Int == 0, "\(report)")
    }

    @Test func aKilledWorkerRestartedLosesNothingAndHeals() async throws {
        // Restarted 4 s later here: the embedded broker waits for a member whose session expires
        // just after a rejoin's election (docs/architecture.md), which a restart within
        // about one session of the kill risks; the benchmark measures both.
        let report = try await failover("kill", ["--restart-after", "4"])
        expectNoLossAndNoUnflaggedDuplicate(report)
        #expect((report["writtenTwicePercent"] as? Double ?? 100) <= 1, "\(report)")
        #expect((report["slowestMs"] as? Int ?? .max) <= Self.healBoundMs, "\(report)")
    }

    @Test func aStoppedWorkerHandsOverWithoutWritingResultsTwice() async throws {
        let report = try await failover("term")
        expectNoLossAndNoUnflaggedDuplicate(report)
        #expect((report["slowestMs"] as? Int ?? .max) <= Self.healBoundMs, "\(report)")
        // Its offsets are committed on the way out: (almost) nothing is consumed twice.
        #expect((report["writtenTwicePercent"] as? Double ?? 100) <= 1, "\(report)")
    }

    @Test func aRollingRestartOfEveryWorkerLosesNothing() async throws {
        let report = try await failover("rolling")
        expectNoLossAndNoUnflaggedDuplicate(report)
        #expect((report["slowestMs"] as? Int ?? .max) <= Self.healBoundMs, "\(report)")
        #expect((report["writtenTwicePercent"] as? Double ?? 100) <= 1, "\(report)")
    }

    @Test func aWorkerStoppedBeforeItsFirstAssignmentLeavesPromptly() async throws {
        let report = try await failover("term-early")
        expectNoLossAndNoUnflaggedDuplicate(report)
        #expect((report["slowestMs"] as? Int ?? .max) <= Self.healBoundMs, "\(report)")
        #expect((report["stoppedWorkerExitS"] as? Double ?? .infinity) <= 15, "\(report)")
        #expect((report["writtenTwicePercent"] as? Double ?? 100) <= 1, "\(report)")
    }

    @Test func aGatewayOutageIsWaitedOutWithoutA515() async throws {
        // Every other job is for a second app, over HTTP/2, whose gateway stays up.
        let report = try await failover("outage", ["--outage-seconds", "8", "--second-app"])
        expectNoLossAndNoUnflaggedDuplicate(report)
        // The unreachable app's notifications wait; the other app's go on meanwhile: none of
        // them waited out the 8 s outage.
        #expect((report["secondAppSlowestMs"] as? Int ?? .max) < 8_000, "\(report)")
        #expect((report["slowestMs"] as? Int ?? 0) >= 8_000, "the outage held nothing back: \(report)")
        #expect((report["otherFailures"] as? [String: Any])?.isEmpty == true, "\(report)")
        // Everything held during the outage is delivered soon after the gateway is back.
        #expect((report["lastResultAfterReturnS"] as? Double ?? .infinity) <= 15, "\(report)")
    }

    // MARK: Kafka faults on the embedded broker (docs/simulator.md, "Kafka faults")

    /// Each Kafka fault scenario, with 6 s of fault where the benchmark holds it 15 s: what is
    /// checked, that nothing is lost and every duplicate flagged, needs the fault to outlast the
    /// 3 s session timeout (a broker or the coordinator down) and two bursts (errors). The
    /// scenarios: the broker leading half the partitions down, every partition's leadership
    /// moved twice, bursts of retriable errors on Produce, Fetch, OffsetCommit and Heartbeat,
    /// and the group coordinator's broker down.
    @Test(arguments: ["broker-down", "leader-moves", "request-errors", "coordinator-down"])
    func aKafkaFaultLosesNothingInTheWorkersAndLetsNoDuplicateThroughUnflagged(_ scenario: String) async throws {
        let report = try await failover(scenario, ["--fault-seconds", "6"])
        // The workers lose nothing; what the mock broker lost after acknowledging it (a refused
        // produce with later ones in flight, docs/simulator.md) no worker ever saw.
        let lostBeforeTheWorkers = report["lostBeforeTheWorkers"] as? Int ?? -1
        #expect(report["lost"] as? Int == lostBeforeTheWorkers, "\(report)")
        #expect(report["unflaggedDuplicates"] as? Int == 0, "\(report)")
        #expect(report["connectionFailed515"] as? Int == 0, "\(report)")
        withKnownIssue("the embedded broker can lose an acknowledged produce", isIntermittent: true) {
            #expect(lostBeforeTheWorkers == 0, "\(report)")
        }
    }
}
