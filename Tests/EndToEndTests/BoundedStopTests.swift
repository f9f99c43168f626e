import APNSCore
import Foundation
import PushTestSupport
import Testing

/// A stop ends within `shutdownTimeoutSeconds` + 10 s whatever is unreachable, and loses
/// nothing: the messages of what the stopped worker could not finish are consumed again by the
/// next owner (`docs/architecture.md`, "Healing").
@Suite("Bounded stop", .serialized, .timeLimit(.minutes(4)))
struct BoundedStopTests {
    /// What goes away while the worker has notifications in flight.
    enum Gone: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case kafka
        case redis
        case apple
        case all

        var testDescription: String { rawValue }
    }

    static let shutdownTimeoutSeconds = 3

    @Test(
        "A worker stopped while Kafka, Redis, Apple or all three are gone exits within its bound and loses nothing",
        arguments: Gone.allCases
    )
    func aStopEndsWithinItsBound(_ gone: Gone) async throws {
        // A 5 s confirmation window: what the worker sends is still unconfirmed when things go.
        let stack = try await WorkerStack.start(confirmationWindowMs: 5000)
        do {
            try await stack.startWorker(
                "w1",
                environment: ["APN_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "\(Self.shutdownTimeoutSeconds)"]
            )
            let jobs = (0..<50).map { ("\(gone.rawValue)-\($0)", [DeviceToken.numbered($0)]) }
            try await stack.produce(jobs.map { WorkerStack.job(id: $0.0, tokens: $0.1) })
            let sent = await eventually("every notification sent", every: .milliseconds(50)) {
                stack.acceptedByToken.values.reduce(0, +) >= jobs.count
            }
            #expect(sent, "the worker did not send the notifications")

            if gone == .kafka || gone == .all { try stack.kafka.setBrokerDown(1) }
            if gone == .redis || gone == .all { await stack.redis.stop() }
            if gone == .apple || gone == .all { await stack.stopGateway() }
            let stopping = ContinuousClock.now
            let stopped = await stack.stopWorkerReporting("w1")
            let took = ContinuousClock.now - stopping
            let bound = Duration.seconds(Self.shutdownTimeoutSeconds + 10)
            #expect(took < bound, "stopping took \(took), over shutdownTimeoutSeconds + 10 s\n\(stack.log(of: "w1"))")
            // Exited by itself: not killed by the test (status 9), and not aborted by the last-resort bound.
            #expect(stopped.status == 0, "exit status \(stopped.status)\n\(stack.log(of: "w1"))")

            if gone == .kafka || gone == .all { try stack.kafka.setBrokerUp(1) }
            if gone == .redis || gone == .all { try await stack.redis.start() }
            if gone == .apple || gone == .all { try await stack.restartGateway() }
            try await stack.startWorker("w2")
            let expected = WorkerEndToEndTests.expectedIds(jobs)
            try await stack.readResults(timeout: .seconds(120)) { results in
                Set(results.compactMap { $0["resultId"]?.stringValue }).count >= expected.count
            }
            WorkerEndToEndTests.checkDelivered(expected, bad: [], stack: stack, allowPossibleDuplicates: true)
            #expect(try await stack.waitForAllCommitted())
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))\nw2: \(stack.log(of: "w2"))")
        }
        await stack.shutdown()
    }
}
