import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// Apple's permanent verdicts on tokens (`docs/jobs.md`, "Invalid tokens"): `BadDeviceToken`,
/// `DeviceTokenNotForTopic` and `Unregistered` are remembered per app and environment, a later job
/// for the token is answered at once with status 519, and both results carry `tokenVerdict`.
@Suite("Invalid tokens end to end", .serialized, .timeLimit(.minutes(3)))
struct InvalidTokenEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    @Test("A token Apple refused is not sent again: the later job gets 519, both results carry the verdict")
    func refusedTokensAreRemembered() async throws {
        let bad = DeviceToken.numbered(1, salt: 71)
        let gone = DeviceToken.numbered(2, salt: 71)
        let good = DeviceToken.numbered(3, salt: 71)
        let stack = try await WorkerStack.start(
            http2: (badTokens: [bad], unregistered: [gone: Date(timeIntervalSince1970: 1_790_000_000)])
        )
        await Jobs.withStack(stack) { stack in
            let h2 = WorkerStack.http2App
            try await stack.produce([Jobs.job("first", [bad, gone, good], app: h2, #""alert":"one""#)])
            let first = try await Jobs.results(stack, [bad, gone, good].map { Jobs.id("first", $0) })
            let refused = first[Jobs.id("first", bad)]
            #expect(refused?["status"] == .int(400) && refused?["reason"] == "BadDeviceToken", "\(refused ?? [:])")
            #expect(refused?["tokenVerdict"]?["reason"] == "BadDeviceToken")
            let unregistered = first[Jobs.id("first", gone)]
            #expect(unregistered?["status"] == .int(410))
            #expect(unregistered?["tokenVerdict"] == ["reason": "Unregistered", "since": 1_790_000_000])
            #expect(first[Jobs.id("first", good)]?["tokenVerdict"] == nil)
            let requestsBefore = stack.http2Simulator?.statistics.requests ?? 0

            // A later job: the refused tokens are answered without a request to Apple.
            try await stack.produce([Jobs.job("second", [bad, gone, good], app: h2, #""alert":"two""#)])
            let second = try await Jobs.results(stack, [bad, gone, good].map { Jobs.id("second", $0) })
            for (token, reason) in [(bad, "BadDeviceToken"), (gone, "Unregistered")] {
                let result = second[Jobs.id("second", token)]
                #expect(result?["status"] == .int(519) && result?["attempts"] == .int(0), "\(result ?? [:])")
                #expect(result?["tokenVerdict"]?["reason"]?.stringValue == reason)
            }
            #expect(second[Jobs.id("second", good)]?["type"] == "transmitted")
            #expect(
                (stack.http2Simulator?.statistics.requests ?? 0) == requestsBefore + 1,
                "a refused token was sent again"
            )

            // Registered again after the verdict: sent.
            let later = Int64(Date().timeIntervalSince1970) + 60
            try await stack.produce([Jobs.job("third", [bad], app: h2, #""alert":"three","registeredAt":\#(later)"#)])
            let third = try await Jobs.results(stack, [Jobs.id("third", bad)])
            #expect(third[Jobs.id("third", bad)]?["status"] == .int(400), "\(third)")
        }
    }
}
