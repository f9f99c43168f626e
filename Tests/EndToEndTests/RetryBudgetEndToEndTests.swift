import APNSCore
import APNSHTTP2Core
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// `retryLimit` counts only retries after 429 and 5xx answers (`docs/jobs.md`, "Fields"): an
/// answer about the connection or the provider token is resent on a new connection without
/// spending it, so a job with `retryLimit: 0` is still delivered through Kafka.
@Suite("Retry budget end to end", .serialized, .timeLimit(.minutes(3)))
struct RetryBudgetEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    @Test(
        "A job with retryLimit 0 is delivered after its first answer is ExpiredProviderToken or IdleTimeout",
        arguments: [APNSReason.expiredProviderToken, .idleTimeout]
    )
    func retryLimitZeroSurvivesConnectionAnswers(reason: APNSReason) async throws {
        let token = DeviceToken.numbered(1, salt: 97)
        let stack = try await WorkerStack.start(
            http2: (badTokens: [], unregistered: [:]),
            http2AnswerFirst: (reason, 1)
        )
        await Jobs.withStack(stack) { stack in
            try await stack.produce([
                Jobs.job("budget", [token], app: WorkerStack.http2App, #""alert":"hi","retryLimit":0"#)
            ])
            let result = try await Jobs.results(stack, [Jobs.id("budget", token)])[Jobs.id("budget", token)]
            #expect(result?["type"] == "transmitted", "\(result ?? [:])")
            #expect(result?["possibleDuplicate"] == .bool(false))
            let simulator = try #require(stack.http2Simulator)
            #expect(simulator.statistics.rejectionsByReason[reason.rawValue] == 1)
            #expect(simulator.acceptedByToken[token] == 1)
        }
    }
}
