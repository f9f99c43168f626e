import APNSCore
import APNSHTTP2
import Foundation
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

/// Broadcast channels at the claim (`docs/jobs.md`, "Broadcasts"): a broadcast's expiration
/// follows its channel's storage policy, and the channels of each app environment are counted.
extension ClaimStage {
    /// The longest a broadcast to a *Most Recent Message Stored* channel is kept for a device
    /// that is offline: Apple ends a Live Activity after 8 hours.
    static let broadcastStorage: UInt32 = 8 * 3600

    /// Chooses the expiration of each broadcast to a channel the registry knows: up to 8 hours
    /// on a *Most Recent Message Stored* channel (the job's own expiration when it gives one,
    /// within 8 hours), 0 on a *No Message Stored* channel. A channel it does not know (made
    /// outside the workers) keeps the job's; so does every broadcast while Redis does not answer.
    func chooseBroadcastExpirations(_ sends: [SentContext], key: PoolKey) async {
        let broadcasts = sends.filter { $0.candidate.job.broadcast && $0.candidate.activity != nil }
        guard !broadcasts.isEmpty else { return }
        let policies: [APNSChannelStoragePolicy?]
        do {
            policies = try await store.channelPolicies(
                app: key.app,
                environment: key.environment.rawValue,
                channels: broadcasts.map(\.candidate.tokenHex)
            )
        } catch {
            logger.warning(
                "Cannot read the channel registry; broadcasts go with their jobs' expiration",
                metadata: ["error": "\(error.message)", "broadcasts": "\(broadcasts.count)"]
            )
            return
        }
        let now = Date()
        let cap = UInt32(clamping: Int64(now.timeIntervalSince1970)) &+ Self.broadcastStorage
        for (context, policy) in zip(broadcasts, policies) {
            guard let policy, let ticket = context.candidate.activity else { continue }
            switch policy {
            case .none: ticket.expiration = 0
            case .mostRecent:
                let asked = context.candidate.job.content.notification.expiry.unixSeconds(now: now)
                ticket.expiration = asked == 0 ? cap : min(asked, cap)
            }
        }
    }

    /// Sets `apn_worker_channels` for every HTTP/2 app environment from the registry.
    func countChannels() async {
        guard control.metrics.isEnabled else { return }
        let environments = delivery.pools.all.compactMap { key, settings -> PoolKey? in
            settings.channelManager == nil ? nil : key
        }
        guard !environments.isEmpty else { return }
        do {
            let counts = try await store.channelCounts(environments.map { ($0.app, $0.environment.rawValue) })
            for (key, count) in zip(environments, counts) {
                control.metrics.set(MetricCatalogue.channels, [key.app, key.environment.rawValue], to: count)
            }
        } catch {
            logger.debug("Cannot count the channel registry's channels", metadata: ["error": "\(error.message)"])
        }
    }
}
