import Foundation
import PushTestSupport
import Testing

/// Network partitions of one worker, as `apn-bench partitions` measures them, at a small scale:
/// three workers, each in a network namespace of its own, under a steady load of binary and
/// HTTP/2 jobs while worker w2 alone is cut from Kafka, Redis or the gateways (packets dropped,
/// or connections refused and reset) and then healed (docs/architecture.md, "The partition
/// harness"). Each run must lose nothing, let no notification be accepted twice without
/// `possibleDuplicate`, and see the cut worker take up work again after the heal without a
/// restart.
///
/// A 3 s session timeout, as in ``FailoverTests``: the embedded broker makes every rebalance wait
/// `session.timeout.ms` − 1 s. How soon the others' latency is back to normal is measured by the
/// benchmark (docs/benchmarks.md); here it is only bounded, with room for the rest of the suite
/// running beside it on two cores.
@Suite("Partitions", .serialized, .timeLimit(.minutes(4)))
struct PartitionTests {
    /// The seconds after the cut within which the other workers' latency must be back to normal
    /// in a full parallel test run.
    private static let othersBackBound = 12

    /// Runs one scenario and returns its report.
    private func partition(_ scenario: String, _ extra: [String] = []) async throws -> [String: Any] {
        let result = try await run(
            Paths.benchExecutable,
            [
                "partitions", "--scenario", scenario, "--rate", "300", "--cut-at", "4", "--cut-seconds", "8",
                "--seconds", "22", "--drain-seconds", "60", "--session-timeout-ms", "3000", "--normal-ms", "2000",
            ] + extra
        )
        let line = result.stdout.split(separator: "\n").last { $0.hasPrefix("{") }
        let report = try #require(
            line.flatMap { jsonObject(String($0)) },
            "no report: \(result.stdout)\n\(result.stderr.suffix(3000))"
        )
        print("apn-bench partitions \(scenario): \(line ?? "")")
        #expect(report["lost"] as? Int == 0, "\(report)")
        #expect(result.status == 0, "\(report)")
        // Judged by each notification's first result, the one a reader that deduplicates keeps.
        #expect(
            report["unflaggedDuplicates"] as? Int == 0,
            "\(report)\n\(result.stderr.split(separator: "\n").filter { $0.contains("unflagged duplicate") }.prefix(5))"
        )
        #expect(report["cutWorkerResumedAfterHealS"] is Double, "the cut worker did not take up work again: \(report)")
        #expect((report["othersSecondsToNormal"] as? Int ?? .max) <= Self.othersBackBound, "\(report)")
        return report
    }

    @Test func aWorkerCutFromKafkaByDroppedPacketsLosesNothingAndRejoins() async throws {
        // A cut of 20 s: the others take its partitions over after the 3 s session, and answer
        // what it had claimed from the outcomes it records in Redis while its results wait for
        // Kafka (12 s at worst when measured). A notification that waited for the heal would
        // take 20 s or more.
        let report = try await partition("kafka-drop", ["--cut-seconds", "20", "--seconds", "34"])
        #expect((report["slowestMs"] as? Int ?? .max) < 18_000, "\(report)")
    }

    @Test func aWorkerCutFromKafkaByRefusedConnectionsLosesNothingAndRejoins() async throws {
        _ = try await partition("kafka-reject")
    }

    @Test func aWorkerCutFromRedisByDroppedPacketsLosesNothingAndResumes() async throws {
        let report = try await partition("redis-drop")
        // Its partitions stay its own: nothing is handed over, nothing is written twice.
        #expect(report["writtenTwice"] as? Int == 0, "\(report)")
    }

    @Test func aWorkerCutFromRedisByRefusedConnectionsLosesNothingAndResumes() async throws {
        let report = try await partition("redis-reject")
        #expect(report["writtenTwice"] as? Int == 0, "\(report)")
    }

    @Test func aWorkerCutFromTheGatewaysLosesNothingAndDeliversWhenHealed() async throws {
        let report = try await partition("apns-drop")
        #expect(report["writtenTwice"] as? Int == 0, "\(report)")
        #expect(report["acceptedTwice"] as? Int == 0, "\(report)")
    }

    @Test func aZombieCutFromEverythingWakesWithoutLossOrUnflaggedDuplicatesAndRejoins() async throws {
        // Its liveness key lapses during the 8 s cut, so the others take its claims over and
        // send them again, flagged; its own results of them are often the first written (they
        // were held in its connection to Kafka), so they must say possibleDuplicate too.
        _ = try await partition("all-drop")
    }

    @Test func aFlappingKafkaPathLosesNothing() async throws {
        _ = try await partition("kafka-flap", ["--flap-period", "2"])
    }
}
