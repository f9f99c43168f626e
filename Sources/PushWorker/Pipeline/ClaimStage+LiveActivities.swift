import APNSCore
import Logging

/// Live Activities at the claim (`docs/delivery.md`, "Latest wins"; `docs/jobs.md`, "Priority
/// budget"): an update older than one Apple accepted for its activity is not sent, and an
/// update of a `"priority": "auto"` job gets its priority from its activity's hourly budget.
extension ClaimStage {
    /// By index in `ready`, for each update claimed to be sent: the job of a newer update of
    /// its activity that Apple accepted, when Redis remembers one. Without an answer from Redis
    /// none is found (the device ignores an older update; it only costs the send).
    func acceptedNewer(_ ready: [Candidate], _ decisions: [NotificationStore.ClaimDecision]) async -> [Int: String] {
        let indices = ready.indices.filter { ready[$0].activity != nil && decisions[$0] == .send }
        guard !indices.isEmpty else { return [:] }
        let accepted: [(mark: APNSActivityMark, jobId: String)?]
        do {
            accepted = try await store.acceptedActivities(
                indices.map { (ready[$0].job.app, ready[$0].job.environment.rawValue, ready[$0].tokenHex) }
            )
        } catch {
            logger.warning(
                "Cannot read the Live Activity updates Apple accepted; sending without comparing",
                metadata: ["error": "\(error.message)"]
            )
            return [:]
        }
        var newer: [Int: String] = [:]
        for (index, found) in zip(indices, accepted) {
            guard let found, let ticket = ready[index].activity, ticket.mark < found.mark else { continue }
            newer[index] = found.jobId
        }
        return newer
    }

    /// Chooses the priority of each update of a `"priority": "auto"` job with a budget: 10 while
    /// its activity has sent fewer than the budget at 10 in the hour since the first, 5 after.
    /// Without an answer from Redis, 5: the budget is Apple's to enforce, and 5 never spends it.
    func choosePriorities(_ sends: [SentContext]) async {
        let budgeted = sends.filter { ($0.candidate.job.activity?.highPriorityPerHour ?? 0) > 0 }
        guard !budgeted.isEmpty else { return }
        let counts: [Int64]
        do {
            counts = try await store.countHighPriority(
                budgeted.map {
                    ($0.candidate.job.app, $0.poolKey.environment.rawValue, $0.candidate.tokenHex)
                }
            )
        } catch {
            logger.warning(
                "Cannot count Live Activity updates at priority 10; sending these at 5",
                metadata: ["error": "\(error.message)", "updates": "\(budgeted.count)"]
            )
            counts = Array(repeating: .max, count: budgeted.count)
        }
        for (context, count) in zip(budgeted, counts) {
            let budget = Int64(context.candidate.job.activity?.highPriorityPerHour ?? 0)
            context.candidate.activity?.priority = count <= budget ? 10 : 5
        }
    }
}
