/// Waits with a deadline, written once: `wait` answers, or the deadline passes first and the
/// answer is `false`.
///
/// `wait` must end when its task is cancelled (a cancellation handler that resumes its
/// continuation with `false`): that is how it gives up at the deadline, and when the caller is
/// cancelled. ``SharedLedger/waitUntil(deadline:_:)`` and
/// ``PipelineControl/waitForProgress(until:)`` wait this way.
func answer(
    before deadline: ContinuousClock.Instant,
    _ wait: @escaping @Sendable () async -> Bool
) async -> Bool {
    await withTaskGroup(of: Bool?.self) { group in
        group.addTask { await wait() }
        group.addTask {
            // Cancelled by the group once `wait` answered: no answer of its own then.
            guard (try? await Task.sleep(until: deadline)) != nil else { return nil }
            return false
        }
        var answer = false
        if let first = await group.next(), let first { answer = first }
        group.cancelAll()
        return answer
    }
}
