import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// `environmentFallback` (`docs/jobs.md`, "Environment"): an app with both environments, each
/// served by a simulator of its own that refuses the other's tokens. A token refused in the job's
/// environment is sent once in the other; delivered there, its result names that environment and
/// says `redirected`, and later notifications to it go straight there. Refused in both, the result
/// is the first refusal. Without the setting, nothing changes.
@Suite("Environment fallback end to end", .serialized, .timeLimit(.minutes(3)))
struct EnvironmentFallbackEndToEndTests {
    typealias Jobs = JobFeaturesEndToEndTests

    /// A token of the sandbox only, one of neither environment, one of production only.
    static let sandboxOnly = DeviceToken.numbered(1, salt: 83)
    static let nowhere = DeviceToken.numbered(2, salt: 83)
    static let productionOnly = DeviceToken.numbered(3, salt: 83)
    static var tokens: [DeviceToken] { [sandboxOnly, nowhere, productionOnly] }

    @Test("HTTP/2: a sandbox token sent to production is delivered by sandbox, then sent straight there")
    func http2() async throws {
        let stack = try await WorkerStack.start(
            http2: (badTokens: [Self.sandboxOnly, Self.nowhere], unregistered: [:]),
            http2AppSettings: ["environmentFallback: true"],
            http2SandboxBadTokens: [Self.nowhere, Self.productionOnly]
        )
        await Jobs.withStack(stack) { stack in
            let h2 = WorkerStack.http2App
            try await stack.produce([Jobs.job("first", Self.tokens, app: h2, #""alert":"one""#)])
            let first = try await Jobs.results(stack, Self.tokens.map { Jobs.id("first", $0) })
            Self.expectFirstResults(first, refusal: (400, "BadDeviceToken"))
            let production = try #require(stack.http2Simulator)
            let sandbox = try #require(stack.sandboxHTTP2Simulator)
            #expect(production.statistics.rejectionsByReason["BadDeviceToken"] == 2)
            #expect(sandbox.statistics.accepted == 1 && sandbox.statistics.rejectionsByReason["BadDeviceToken"] == 1)
            let productionRequests = production.statistics.requests

            // The token's environment is remembered: the next job goes straight to the sandbox.
            try await stack.produce([Jobs.job("second", [Self.sandboxOnly], app: h2, #""alert":"two""#)])
            let second = try await Jobs.results(stack, [Jobs.id("second", Self.sandboxOnly)])
            Self.expectRedirected(second[Jobs.id("second", Self.sandboxOnly)])
            #expect(production.statistics.requests == productionRequests, "production saw the token again")
            #expect(sandbox.statistics.accepted == 2)
        }
    }

    @Test("Binary: a sandbox token refused with status 8 is delivered by sandbox, then sent straight there")
    func binary() async throws {
        // A confirmation window long enough for a loaded machine: an error packet later than it
        // would leave the refused notification counted as transmitted (docs/delivery.md).
        let stack = try await WorkerStack.start(
            badTokens: [Self.sandboxOnly, Self.nowhere],
            confirmationWindowMs: 3000,
            appSettings: ["environmentFallback: true"],
            sandboxBadTokens: [Self.nowhere, Self.productionOnly]
        )
        await Jobs.withStack(stack) { stack in
            try await stack.produce([Jobs.job("first", Self.tokens, #""alert":"one""#)])
            let first = try await Jobs.results(stack, Self.tokens.map { Jobs.id("first", $0) })
            Self.expectFirstResults(first, refusal: (8, "Invalid token"))
            let sandbox = try #require(stack.sandboxSimulator)
            #expect(stack.simulator.statistics.errorResponses == 2)
            #expect(sandbox.acceptedByToken[Self.sandboxOnly] == 1 && sandbox.statistics.errorResponses == 1)

            try await stack.produce([Jobs.job("second", [Self.sandboxOnly], #""alert":"two""#)])
            let second = try await Jobs.results(stack, [Jobs.id("second", Self.sandboxOnly)])
            Self.expectRedirected(second[Jobs.id("second", Self.sandboxOnly)])
            #expect(stack.simulator.statistics.errorResponses == 2, "production saw the token again")
            #expect(stack.simulator.acceptedByToken[Self.sandboxOnly] == nil)
            #expect(sandbox.acceptedByToken[Self.sandboxOnly] == 2)
        }
    }

    @Test("Without environmentFallback a token refused in production is not sent to the sandbox")
    func offByDefault() async throws {
        let stack = try await WorkerStack.start(
            http2: (badTokens: [Self.sandboxOnly], unregistered: [:]),
            http2SandboxBadTokens: []
        )
        await Jobs.withStack(stack) { stack in
            let h2 = WorkerStack.http2App
            try await stack.produce([Jobs.job("off", [Self.sandboxOnly], app: h2, #""alert":"one""#)])
            let result = try await Jobs.results(stack, [Jobs.id("off", Self.sandboxOnly)])[
                Jobs.id("off", Self.sandboxOnly)
            ]
            #expect(result?["status"] == .int(400) && result?["reason"] == "BadDeviceToken", "\(result ?? [:])")
            #expect(result?["env"] == "production" && result?["redirected"] == nil)
            #expect(stack.sandboxHTTP2Simulator?.statistics.requests == 0)
        }
    }

    /// The first job's results: the sandbox token delivered by the sandbox, the token of neither
    /// environment refused with production's answer (and condemned there), the production token
    /// delivered as usual.
    static func expectFirstResults(_ results: [String: [String: JSONValue]], refusal: (status: Int, reason: String)) {
        expectRedirected(results[Jobs.id("first", sandboxOnly)])
        let refused = results[Jobs.id("first", nowhere)]
        #expect(refused?["status"] == .int(Int64(refusal.status)), "\(refused ?? [:])")
        #expect(refused?["reason"]?.stringValue == refusal.reason)
        #expect(refused?["env"] == "production" && refused?["redirected"] == nil)
        #expect(refused?["tokenVerdict"] != nil)
        let direct = results[Jobs.id("first", productionOnly)]
        #expect(direct?["type"] == "transmitted" && direct?["env"] == "production", "\(direct ?? [:])")
        #expect(direct?["redirected"] == nil)
    }

    static func expectRedirected(_ result: [String: JSONValue]?) {
        #expect(result?["type"] == "transmitted", "\(result ?? [:])")
        #expect(result?["env"] == "sandbox")
        #expect(result?["redirected"] == .bool(true))
        #expect(result?["possibleDuplicate"] == .bool(false))
    }
}
