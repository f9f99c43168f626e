import APNSCore

/// What a delivery-client test run produced: one outcome per tag, and the connection events.
public struct DeliveryRun: Sendable {
    public var outcomes: [UInt64: APNSDeliveryOutcome] = [:]
    /// Outcomes for a tag that already had one (there should be none).
    public var duplicateOutcomes = 0
    public var events: [APNSDeliveryEvent] = []

    public init() {}
}

/// The run loop of the delivery-client tests, for the binary and the HTTP/2 client alike.
public enum DeliveryHarness {
    public struct TimeLimitExceeded: Error, CustomStringConvertible {
        public var limit: Duration
        public var description: String { "the run did not finish within \(limit)" }
    }

    /// Sends `submissions` while reading ``APNSDeliveryClient/events``, until every submission
    /// has its outcome, then (unless `shutdown` is false) shuts the client down with
    /// `gracePeriod`. Throws ``TimeLimitExceeded`` if that takes longer than `limit`.
    public static func run(
        _ client: some APNSDeliveryClient,
        _ submissions: [APNSSubmission],
        limit: Duration,
        shutdown: Bool = true,
        gracePeriod: Duration
    ) async throws -> DeliveryRun {
        try await withThrowingTaskGroup(of: DeliveryRun?.self) { group in
            group.addTask {
                try await client.send(submissions)
                return nil
            }
            group.addTask {
                var run = DeliveryRun()
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
            var result: DeliveryRun? = nil
            while let next = try await group.next() {
                if let run = next {
                    result = run
                    break
                }
            }
            group.cancelAll()
            if shutdown { await client.shutdown(gracePeriod: gracePeriod) }
            return result ?? DeliveryRun()
        }
    }

    public struct ConditionNotMet: Error, CustomStringConvertible {
        public var condition: String
        public var last: APNSPoolSnapshot
        public var description: String { "the pool never reached \(condition); last snapshot: \(last)" }
    }

    /// Takes snapshots of `client` every few milliseconds until one satisfies `condition`, and
    /// returns it; throws ``ConditionNotMet`` (with the last one) after `limit`.
    @discardableResult
    public static func snapshot(
        of client: some APNSDeliveryClient,
        _ condition: String,
        within limit: Duration = .seconds(30),
        where satisfied: (APNSPoolSnapshot) -> Bool
    ) async throws -> APNSPoolSnapshot {
        let deadline = ContinuousClock.now + limit
        while true {
            let snapshot = client.snapshot()
            if satisfied(snapshot) { return snapshot }
            guard ContinuousClock.now < deadline else { throw ConditionNotMet(condition: condition, last: snapshot) }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Device token number `i`: 32 bytes of `fill`, the last eight `i` in big-endian order.
    public static func token(_ i: Int, fill: UInt8) -> DeviceToken {
        var bytes = [UInt8](repeating: fill, count: 32)
        withUnsafeBytes(of: UInt64(i).bigEndian) { raw in
            for (k, b) in raw.enumerated() { bytes[24 + k] = b }
        }
        return try! DeviceToken(bytes: bytes)
    }

    /// An alert with a badge.
    public static func notification(_ text: String = "Hello") -> APNSNotification {
        var n = APNSNotification()
        n.alert = .text(text)
        n.badge = 1
        return n
    }
}
