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

/// Runs `body` for at most `timeout`: the way the tests wait for something that arrives rather
/// than something polled (the next event of a stream). When the time is up `body` is cancelled,
/// an issue naming `what` is recorded at the caller's line, and the answer is `nil`. A body that
/// ignores cancellation is waited for still (a task group ends with its children): the suite's
/// time limit is then what stops the test.
public func within<T: Sendable>(
    _ timeout: Duration = .seconds(30),
    _ what: Comment,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () async -> T?
) async -> T? {
    let finish = await withTaskGroup(of: WithinFinish<T>.self) { group in
        group.addTask { .answered(await body()) }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return .timedOut
        }
        let first = await group.next() ?? .timedOut
        group.cancelAll()
        return first
    }
    guard case .answered(let value) = finish else {
        Issue.record("Timed out after \(timeout) waiting for: \(what)", sourceLocation: sourceLocation)
        return nil
    }
    return value
}

/// How ``within(_:_:sourceLocation:_:)``'s race ended.
private enum WithinFinish<T: Sendable>: Sendable {
    case answered(T?)
    case timedOut
}
