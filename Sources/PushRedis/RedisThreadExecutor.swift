import Foundation

/// A `SerialExecutor` that runs every job on one dedicated OS thread it owns.
///
/// Each ``RedisConnection`` over hiredis' socket has one: its core, `RedisSocketConnectionCore`,
/// uses it as its executor, so every hiredis call on that connection's context happens on this thread,
/// one at a time, and blocking socket I/O never occupies Swift's cooperative thread pool.
///
/// The thread blocks `SIGPIPE` for itself only: hiredis 0.14 writes with `write(2)`, which
/// would otherwise kill the process when the server has gone away. With the signal
/// blocked the write fails with `EPIPE` and PushRedis reports a `.connection` error,
/// without changing the signal disposition of the rest of the process.
final class RedisThreadExecutor: SerialExecutor, @unchecked Sendable {
    // All mutable state is guarded by `condition`.
    private let condition = NSCondition()
    private var pending: [UnownedJob] = []
    private var stopping = false
    private var finalWork: (@Sendable () -> Void)?

    /// Starts the thread.
    init(name: String) {
        let thread = Thread { [self] in self.run() }
        thread.name = name
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        pending.append(job)
        condition.signal()
        condition.unlock()
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Lets the thread finish the jobs already queued, run `finally` and exit. Never waits.
    func shutdown(finally: @escaping @Sendable () -> Void) {
        condition.lock()
        stopping = true
        finalWork = finally
        condition.signal()
        condition.unlock()
    }

    private func run() {
        Self.blockSIGPIPEOnCurrentThread()
        while true {
            condition.lock()
            while pending.isEmpty && !stopping { condition.wait() }
            if pending.isEmpty {
                let work = finalWork
                finalWork = nil
                condition.unlock()
                work?()
                return
            }
            let batch = pending
            pending = []
            condition.unlock()
            for job in batch {
                job.runSynchronously(on: asUnownedSerialExecutor())
            }
        }
    }

    private static func blockSIGPIPEOnCurrentThread() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Consumes a `SIGPIPE` left pending on this thread by a failed write, so it cannot be
    /// delivered later. Call only on the executor thread, after an I/O error.
    static func discardPendingSIGPIPE() {
        var pendingSet = sigset_t()
        sigpending(&pendingSet)
        guard sigismember(&pendingSet, SIGPIPE) == 1 else { return }
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        var signal: Int32 = 0
        sigwait(&set, &signal)
    }
}
