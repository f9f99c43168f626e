import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import PushTestSupport
import Testing

@testable import APNSHTTP2

/// `retryLimit` counts retries after 429 and 5xx answers about the service only: answers about
/// the connection or its provider token are resent on another connection even with
/// `retryLimit` 0 (§3.4, §6.10).
@Suite("HTTP/2 client: the retry limit against the simulator", .timeLimit(.minutes(3)))
struct ClientRetryBudgetTests {
    /// Notifications that may not be retried after a 429 or a 5xx.
    static func unretried(_ range: Range<Int>) -> [APNSSubmission] {
        var notification = ClientHarness.notification()
        notification.retryLimit = 0
        return ClientHarness.submissions(range, notification)
    }

    @Test("retryLimit 0: after ExpiredProviderToken the token is refreshed and every notification is delivered once")
    func expiredProviderTokenWithRetryLimitZero() async throws {
        // The shared token is 59 minutes old; the server's clock runs two minutes ahead, so it
        // finds the token over an hour old (§4).
        let clock = ManualClock(Date() - 59 * 60)
        let provider = try APNSTokenProvider(
            signingKey: ClientHarness.signingKey,
            teamID: ClientHarness.teamID,
            refreshInterval: .seconds(3600),
            clock: { clock.now }
        )
        let stale = try provider.currentToken()
        clock.set(Date())
        let simulator = try await ClientHarness.simulator { $0.now = { Date() + 120 } }
        let client = try ClientHarness.tokenClient(port: simulator.port, provider: provider) {
            $0.maxConnections = 1
            $0.defaultRetryLimit = 0
        }
        let run = try await ClientHarness.run(client, Self.unretried(0..<50))
        let stats = simulator.statistics
        let accepted = simulator.acceptedByToken
        await simulator.stop()

        #expect(run.outcomes.count == 50)
        #expect(
            run.outcomes.values.allSatisfy { $0.isTransmitted },
            "\(run.outcomes.values.filter { !$0.isTransmitted })"
        )
        #expect(accepted.count == 50 && accepted.values.allSatisfy { $0 == 1 })
        #expect(stats.rejectionsByReason["ExpiredProviderToken", default: 0] >= 1)
        #expect(stats.connections >= 2)
        #expect(try provider.currentToken() != stale)
    }

    @Test(
        "retryLimit 0: a request answered IdleTimeout or Shutdown is resent on a new connection and delivered once",
        arguments: [APNSReason.idleTimeout, .shutdown]
    )
    func connectionReasonsWithRetryLimitZero(reason: APNSReason) async throws {
        let simulator = try await ClientHarness.simulator { $0.answerFirst = (reason, 3) }
        let client = try ClientHarness.tokenClient(port: simulator.port) {
            $0.maxConnections = 1
            $0.defaultRetryLimit = 0
        }
        let run = try await ClientHarness.run(client, Self.unretried(0..<20))
        let stats = simulator.statistics
        let accepted = simulator.acceptedByToken
        await simulator.stop()

        #expect(run.outcomes.count == 20)
        #expect(
            run.outcomes.values.allSatisfy { $0.isTransmitted },
            "\(run.outcomes.values.filter { !$0.isTransmitted })"
        )
        #expect(accepted.count == 20 && accepted.values.allSatisfy { $0 == 1 })
        #expect(stats.rejectionsByReason[reason.rawValue, default: 0] == 3)
        // The answering connection was replaced.
        #expect(stats.connections >= 2)
    }

    @Test("retryLimit 0: a 429 TooManyRequests is final")
    func tooManyRequestsWithRetryLimitZero() async throws {
        let simulator = try await ClientHarness.simulator { $0.status429Every = 1 }
        let client = try ClientHarness.tokenClient(port: simulator.port) { $0.defaultRetryLimit = 0 }
        let run = try await ClientHarness.run(client, Self.unretried(0..<5))
        await simulator.stop()
        #expect(run.outcomes.count == 5)
        #expect(
            run.outcomes.values.allSatisfy {
                $0.status == .tooManyRequests && $0.reason == "TooManyRequests" && $0.attempts == 1
            }
        )
        #expect(simulator.statistics.tooManyRequests == 5)
    }
}
