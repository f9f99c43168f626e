#if APN_WORKER_TEST_HOOKS
import Foundation

/// Faults that end-to-end tests inject into `apn-worker run` processes. Compiled only into
/// builds with `-D APN_WORKER_TEST_HOOKS` (`scripts/lib/common.sh`: the tests, demo and
/// benchmarks); a build without it, such as the container image's, has none of them.
enum TestHooks {
    /// `APN_WORKER_TEST_EXIT_ON_JOB`: the id of a job whose parsing makes the worker trap, as a
    /// crash in code that meets the job would (the ``StopGuard``'s end-to-end test).
    static let exitOnJob = ProcessInfo.processInfo.environment["APN_WORKER_TEST_EXIT_ON_JOB"]

    /// Intake parsed the job `id`.
    static func parsed(job id: String) {
        guard let exitOnJob, exitOnJob == id else { return }
        fatalError("APN_WORKER_TEST_EXIT_ON_JOB: stopping while processing job \(id)")
    }
}
#endif
