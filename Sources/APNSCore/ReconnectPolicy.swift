/// The reconnect back-off both transports use: `base` doubled per failure in a row, at most
/// `maximum`. Both pool machines add jitter (``jittered(_:)``, their `jitter` setting) to the
/// delays they ask for.
public enum APNSReconnectBackoff {
    /// Failures in a row after which a client reports ``APNSDeliveryEvent/unavailable(reason:)``.
    public static let unavailableAfter = 3

    /// The delay before the next connect after `failures` failures in a row (at least 1).
    public static func delay(
        afterFailures failures: Int,
        base: Duration = .milliseconds(100),
        maximum: Duration = .seconds(5)
    ) -> Duration {
        let exponent = min(max(failures - 1, 0), 30)
        let delay = base * (1 << exponent)
        return min(delay, maximum)
    }

    /// `delay` with jitter: a random duration between half of it and all of it, so that clients
    /// that failed together do not retry together.
    public static func jittered(_ delay: Duration) -> Duration {
        let (seconds, attoseconds) = delay.components
        let nanos = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        return .nanoseconds(nanos / 2 + Int64.random(in: 0...max(1, nanos / 2)))
    }
}

/// The part of a connection pool's reconnect policy that both transports share: connects that
/// failed in a row, the back-off before the next one (``APNSReconnectBackoff``), the retry
/// limit after which queued notifications fail, and the ``APNSDeliveryEvent/unavailable(reason:)``
/// and ``APNSDeliveryEvent/available`` events.
///
/// What counts as a failure, and what resets the count, is the pool's to say: it calls
/// ``record(_:peer:noneOpen:into:)`` and ``reset()``.
package struct APNSConnectFailures: Sendable {
    package let baseDelay: Duration
    package let maxDelay: Duration
    /// Failures in a row after which queued notifications fail; `nil`: they wait.
    package let retryLimit: Int?
    /// Failures since the last reset.
    package private(set) var inARow = 0
    /// ``APNSDeliveryEvent/unavailable(reason:)`` was reported and no connection opened since.
    package private(set) var reportedUnavailable = false

    package init(baseDelay: Duration, maxDelay: Duration, retryLimit: Int?) {
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.retryLimit = retryLimit
    }

    /// Counts a failure. With no connection of the pool open (`noneOpen`), the
    /// ``APNSReconnectBackoff/unavailableAfter``-th failure in a row reports `unavailable`, once
    /// until a connection opens.
    package mutating func record(_ reason: String, peer: String, noneOpen: Bool, into events: inout APNSEventBuffer) {
        inARow += 1
        guard noneOpen, inARow >= APNSReconnectBackoff.unavailableAfter, !reportedUnavailable else { return }
        reportedUnavailable = true
        events.append(connectionEvent: .unavailable(reason: summary(peer: peer, last: reason)), force: true)
    }

    /// A connection opened: reports `available` if `unavailable` was reported. The count of
    /// failures stays: the pool resets it when the connection proves itself.
    package mutating func connectionOpened(into events: inout APNSEventBuffer) {
        guard reportedUnavailable else { return }
        reportedUnavailable = false
        events.append(connectionEvent: .available, force: true)
    }

    /// Starts counting again from zero.
    package mutating func reset() { inARow = 0 }

    /// True when the failures in a row reached the retry limit.
    package var retryLimitReached: Bool { retryLimit.map { inARow >= $0 } ?? false }

    /// The back-off before the next connect after ``inARow`` failures, without jitter.
    package var delay: Duration {
        APNSReconnectBackoff.delay(afterFailures: inARow, base: baseDelay, maximum: maxDelay)
    }

    /// "N connection attempts to `peer` failed in a row (last: `reason`)".
    package func summary(peer: String, last reason: String) -> String {
        "\(inARow) connection attempts to \(peer) failed in a row (last: \(reason))"
    }
}
