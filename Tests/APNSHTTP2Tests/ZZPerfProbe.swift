import APNSCore
import Foundation
import Testing
@testable import APNSHTTP2

@Suite struct ZZPerfProbe {
    @Test func probeThroughput() async throws {
        guard ProcessInfo.processInfo.environment["H2_PROBE"] != nil else { return }
        let simulator = try await ClientHarness.simulator { $0.maxConcurrentStreams = Int(ProcessInfo.processInfo.environment["H2_STREAMS"] ?? "1000")!; $0.acceptedListLimit = 0 }
        let client = try ClientHarness.tokenClient(port: simulator.port) { $0.maxConnections = 2 }
        let n = 200_000
        var subs: [APNSSubmission] = []
        let note = ClientHarness.notification(String(repeating: "x", count: 200))
        for i in 0..<n { subs.append(APNSSubmission(tag: UInt64(i), token: ClientHarness.token(i % 10_000), notification: note)) }
        let start = ContinuousClock.now
        let run = try await ClientHarness.run(client, subs)
        let elapsed = ContinuousClock.now - start
        print("PROBE rate", Double(n) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18), run.outcomes.count, simulator.statistics.accepted)
        await simulator.stop()
    }
}
