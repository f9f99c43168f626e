import Testing

/// Polls `condition` until it holds or `timeout` has passed, every `interval`: the one way the
/// tests wait for something that happens in another process or on another thread. The pause is
/// the poll's rhythm; the condition is what the test waits for.
///
/// When the time is up it records an issue naming `what`, at the caller's line, and returns
/// false, so that a wait that fails is never silent; a caller that needs the result to go on can
/// `guard` on it. Cancelled, it stops polling and records the same issue.
@discardableResult
public func eventually(
    _ what: Comment,
    within timeout: Duration = .seconds(20),
    every interval: Duration = .milliseconds(100),
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while true {
        if try await condition() { return true }
        guard ContinuousClock.now < deadline else { break }
        do {
            try await Task.sleep(for: interval)
        } catch {
            break
        }
    }
    Issue.record("Timed out after \(timeout) waiting for: \(what)", sourceLocation: sourceLocation)
    return false
}
