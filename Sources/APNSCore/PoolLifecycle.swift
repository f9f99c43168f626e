/// Where a connection pool is in its life. Both pools go `running` → `draining` (a shutdown:
/// nothing new is taken, what is held is finished) → `finished`; a shutdown that runs out of
/// time goes to `abandoning` (what is held fails) before `finished`.
package enum APNSPoolLifecycle: Sendable, Hashable {
    case running
    case draining
    case abandoning
    /// Everything is settled and every connection closed; the event buffer is finished.
    case finished

    /// Shutting down and not finished yet: draining or abandoning.
    package var isStopping: Bool { self == .draining || self == .abandoning }
}

/// Connection identifiers of one pool: 1, 2, 3, … in the order the connections are made. Logs
/// (`apns.connection`), events and actions name connections by them.
package struct APNSConnectionIDs: Sendable {
    private var next = 1

    package init() {}

    /// The identifier of the next connection.
    package mutating func make() -> Int {
        defer { next += 1 }
        return next
    }
}
