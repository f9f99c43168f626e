/// The answer of one health check: healthy, or failing with a one-line reason.
public enum HealthCheck: Sendable, Hashable {
    case ok
    /// Failing; `reason` is a short sentence such as `redis unreachable`.
    case failing(reason: String)

    public var isOK: Bool {
        if case .ok = self { return true }
        return false
    }
}

/// What the status server asks the worker on each request.
///
/// Every method is called on the server's request path, possibly from several connections at
/// once: it must be synchronous, thread-safe and cheap (read a few fields under a lock; never
/// wait for I/O).
public protocol StatusProvider: Sendable {
    /// `GET /health/live`: ok while the worker's loops are making progress.
    func liveness() -> HealthCheck
    /// `GET /health/ready`: ok while the worker is a consuming member of its group with Redis
    /// reachable.
    func readiness() -> HealthCheck
    /// `GET /status`: the worker's state for a person (`apn-worker status`) or a script.
    func status() -> WorkerStatus
}
