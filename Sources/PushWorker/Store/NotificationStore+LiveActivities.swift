import APNSCore
import Foundation
import PushRedis

/// A Live Activity's newest update Apple accepted (``RedisKeys``, `la:`).
struct AcceptedActivity: Sendable {
    var app: String
    var environment: String
    /// Its push token (hex) or broadcast channel.
    var target: String
    var mark: APNSActivityMark
    var jobId: String
    /// How long it is remembered: until the update's `staleDate`, at most
    /// ``NotificationStore/acceptedActivityTTL``.
    var ttlSeconds: Int64
    /// The update's ticket, held until Redis has the update: until then the worker's
    /// ``APNSLatestWins`` keeps it as its activity's newest, so that no older update is sent
    /// between the answer and the write.
    var ticket: APNSActivityTicket? = nil

    /// `<rank><timestamp>|<jobId>`.
    var value: [UInt8] {
        var bytes: [UInt8] = [UInt8(ascii: "0") + mark.rank]
        DecimalText.append(mark.timestamp, to: &bytes)
        bytes.append(UInt8(ascii: "|"))
        bytes += jobId.utf8
        return bytes
    }

    /// Reads ``value``; `nil` for anything else.
    static func parse(_ text: String) -> (mark: APNSActivityMark, jobId: String)? {
        guard let rank = text.utf8.first, rank == UInt8(ascii: "0") || rank == UInt8(ascii: "1"),
            let bar = text.firstIndex(of: "|"),
            let timestamp = Int64(text[text.index(after: text.startIndex)..<bar])
        else { return nil }
        return (
            APNSActivityMark(end: rank == UInt8(ascii: "1"), timestamp: timestamp),
            String(text[text.index(after: bar)...])
        )
    }
}

/// Live Activities' state (`docs/delivery.md`, "Latest wins"; `docs/jobs.md`, "Priority
/// budget"): the newest update Apple accepted per activity, and each activity's priority-10
/// count.
extension NotificationStore {
    /// The longest an accepted update is remembered: Apple ends a Live Activity after 8 hours.
    static let acceptedActivityTTL: Int64 = 8 * 3600

    /// The newest accepted update of each `(app, environment, target)`, `nil` where none is
    /// remembered: one round trip (per primary on a cluster).
    func acceptedActivities(
        _ activities: [(app: String, environment: String, target: String)]
    ) async throws(RedisError) -> [(mark: APNSActivityMark, jobId: String)?] {
        guard !activities.isEmpty else { return [] }
        var commands = RedisCommands(capacity: activities.count * 160)
        for activity in activities {
            commands.get(
                keys.liveActivity("la:", app: activity.app, environment: activity.environment, target: activity.target)
            )
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused a Live Activity read: \(failure.errorMessage ?? "")")
        }
        return replies.map { $0.string.flatMap(AcceptedActivity.parse) }
    }

    /// Appends the commands that remember accepted updates, each unless a newer one is.
    func appendAccepted(_ activities: [AcceptedActivity], to commands: inout RedisCommands) {
        for activity in activities {
            commands.beginEvalsha(Scripts.keepNewestActivity, keyCount: 1, argumentCount: 2)
            commands.appendKey(
                keys.liveActivity("la:", app: activity.app, environment: activity.environment, target: activity.target)
            )
            commands.append(activity.value)
            commands.append(activity.ttlSeconds)
        }
    }

    /// Counts one priority-10 update for each activity and returns each count (in the hour
    /// since its first).
    func countHighPriority(
        _ activities: [(app: String, environment: String, target: String)]
    ) async throws(RedisError) -> [Int64] {
        guard !activities.isEmpty else { return [] }
        var commands = RedisCommands(capacity: activities.count * 160)
        for activity in activities {
            commands.beginEvalsha(Scripts.countHighPriority, keyCount: 1, argumentCount: 0)
            commands.appendKey(
                keys.liveActivity("lp:", app: activity.app, environment: activity.environment, target: activity.target)
            )
        }
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(commands, scripts: [Scripts.countHighPriority])
        }
        return try replies.map { reply throws(RedisError) in
            guard let count = reply.int else {
                throw RedisError(
                    .server("ERR"),
                    "Redis refused a Live Activity count: \(reply.errorMessage ?? "an answer that is not a number")"
                )
            }
            return count
        }
    }
}
