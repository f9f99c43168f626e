import Foundation
import PushTestSupport
import Testing

/// How the workers heal, as `apn-worker bench-failover` measures it, at a small scale: three
/// worker processes under a steady load on the embedded Kafka (three brokers) while one is
/// killed, stopped or restarted, or while the gateway is away. Each run reports lost and
/// unflagged duplicate notifications, 515s and the slowest notification.
@Suite("Failover", .serialized, .timeLimit(.minutes(4)))
struct FailoverTests {
    /// Runs one scenario and returns its report.
    private func failover(_ scenario: String, _ extra: [String] = []) async throws -> [String: Any] {
        let result = try await run(Paths.executable, [
            "bench-failover", "--scenario", scenario, "--rate", "200", "--seconds", "20", "--event-at", "5",
            "--drain-seconds", "60",
        ] + extra)
        let line = result.stdout.split(separator: "\n").last { $0.hasPrefix("{") }
        let report = try #require(line.flatMap { jsonObject(String($0)) }, "no report: \(result.stdout)\n\(result.stderr.suffix(3000))")
        #expect(result.status == 0, "\(report)")
        return report
    }

    private func expectNoLossAndNoUnflaggedDuplicate(_ report: [String: Any]) {
        #expect(report["lost"] as? Int == 0, "\(report)")
        #expect(report["unflaggedDuplicates"] as? Int == 0, "\(report)")
        #expect(report["connectionFailed515"] as? Int == 0, "\(report)")
    }

    @Test func aKilledWorkerRestartedTwoSecondsLaterLosesNothing() async throws {
        let report = try await failover("kill")
        expectNoLossAndNoUnflaggedDuplicate(report)
        // The target is 12 s; on two shared cores, running beside the rest of the suite, a
        // margin for the machine.
        #expect((report["slowestMs"] as? Int ?? .max) <= 20_000, "\(report)")
    }

    @Test func aStoppedWorkerHandsOverWithoutWritingResultsTwice() async throws {
        let report = try await failover("term")
        expectNoLossAndNoUnflaggedDuplicate(report)
        #expect((report["slowestMs"] as? Int ?? .max) <= 20_000, "\(report)")
        // Its offsets are committed on the way out: (almost) nothing is consumed twice.
        #expect((report["writtenTwicePercent"] as? Double ?? 100) <= 1, "\(report)")
    }

    @Test func aWorkerStoppedBeforeItsFirstAssignmentLeavesPromptly() async throws {
        let report = try await failover("term-early")
        expectNoLossAndNoUnflaggedDuplicate(report)
        #expect((report["slowestMs"] as? Int ?? .max) <= 20_000, "\(report)")
        #expect((report["stoppedWorkerExitS"] as? Double ?? .infinity) <= 15, "\(report)")
    }

    @Test func aGatewayOutageIsWaitedOutWithoutA515() async throws {
        let report = try await failover("outage", ["--outage-seconds", "8"])
        expectNoLossAndNoUnflaggedDuplicate(report)
        #expect((report["otherFailures"] as? [String: Any])?.isEmpty == true, "\(report)")
        // Everything held during the outage is delivered soon after the gateway is back.
        #expect((report["lastResultAfterReturnS"] as? Double ?? .infinity) <= 15, "\(report)")
    }
}
