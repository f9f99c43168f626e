import APNSCore
import APNSSimulator
import Foundation
import NIOCore
import Testing

@testable import APNSBinary

/// Shared fixtures: certificates made once per test process, simulators and clients on 127.0.0.1.
enum Harness {
    static let certificates: TestCertificates = try! TestCertificates()

    static func clientCredentials(environment: APNSEnvironment = .sandbox) throws -> APNSCredentials {
        try APNSCredentials(
            certificate: .data(Array(certificates.client.certificatePEM.utf8)),
            key: .data(Array(certificates.client.keyPEM.utf8)),
            ca: [.data(Array(certificates.ca.certificatePEM.utf8))],
            environment: environment
        )
    }

    static func simulator(_ change: (inout APNSSimulator.Configuration) -> Void = { _ in }) async throws -> APNSSimulator {
        var config = APNSSimulator.Configuration(
            certificateChainPEM: certificates.server.certificatePEM,
            privateKeyPEM: certificates.server.keyPEM,
            clientCAPEM: certificates.ca.certificatePEM
        )
        change(&config)
        return try await APNSSimulator.start(configuration: config)
    }

    static func client(
        _ simulator: APNSSimulator,
        credentials: APNSCredentials? = nil,
        _ change: (inout APNSBinaryConfiguration) -> Void = { _ in }
    ) throws -> APNSBinaryClient {
        var config = APNSBinaryConfiguration(host: "127.0.0.1", port: simulator.binaryPort, credentials: try credentials ?? clientCredentials())
        change(&config)
        return try APNSBinaryClient(configuration: config)
    }

    /// Token number `i`: 32 distinct bytes.
    static func token(_ i: Int) -> DeviceToken {
        var bytes = [UInt8](repeating: 0xA5, count: 32)
        withUnsafeBytes(of: UInt64(i).bigEndian) { raw in
            for (k, b) in raw.enumerated() { bytes[24 + k] = b }
        }
        return try! DeviceToken(bytes: bytes)
    }

    static func notification(_ text: String = "Hello") -> APNSNotification {
        var n = APNSNotification()
        n.alert = .text(text)
        n.badge = 1
        return n
    }

    struct Run {
        var outcomes: [UInt64: APNSDeliveryOutcome] = [:]
        var duplicateOutcomes = 0
        var events: [APNSDeliveryEvent] = []
    }

    /// Sends `submissions` while reading events, until every submission has its outcome, then
    /// (unless `shutdown` is false) shuts the client down. Fails the test if it takes longer than `limit`.
    static func run(
        _ client: APNSBinaryClient,
        _ submissions: [APNSSubmission],
        limit: Duration = .seconds(240),
        shutdown: Bool = true
    ) async throws -> Run {
        try await withThrowingTaskGroup(of: Run?.self) { group in
            group.addTask {
                try await client.send(submissions)
                return nil
            }
            group.addTask {
                var run = Run()
                let expected = submissions.count
                if expected == 0 { return run }
                for await event in client.events {
                    if let outcome = event.outcome {
                        if run.outcomes.updateValue(outcome, forKey: outcome.tag) != nil { run.duplicateOutcomes += 1 }
                        if run.outcomes.count == expected { break }
                    } else {
                        run.events.append(event)
                    }
                }
                return run
            }
            group.addTask {
                try await Task.sleep(for: limit)
                // Abandon what is left, so that the event stream ends and the group can finish
                // with the error instead of waiting for the reader for ever.
                await client.shutdown(gracePeriod: .milliseconds(100))
                throw TimeLimitExceeded(limit: limit)
            }
            var result: Run? = nil
            while let next = try await group.next() {
                if let run = next {
                    result = run
                    break
                }
            }
            group.cancelAll()
            if shutdown { await client.shutdown(gracePeriod: .seconds(30)) }
            return result!
        }
    }

    struct TimeLimitExceeded: Error, CustomStringConvertible {
        var limit: Duration
        var description: String { "the run did not finish within \(limit)" }
    }
}
