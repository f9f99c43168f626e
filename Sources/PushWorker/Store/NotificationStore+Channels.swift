import APNSHTTP2
import PushRedis

/// A change to the channel registry (``RedisKeys``, `ch:`): a channel created with its policy,
/// or deleted (`policy` `nil`).
struct ChannelRecord: Sendable, Hashable {
    var app: String
    var environment: String
    var channel: String
    var policy: APNSChannelStoragePolicy?
}

/// The broadcast channels the workers know, with their storage policies (`docs/jobs.md`,
/// "Broadcasts"): written by channel jobs and by broadcasts to channels read from Apple, read
/// to choose a broadcast's expiration, counted for `apn_worker_channels`.
extension NotificationStore {
    /// The storage policy of each of `channels` of an app environment, `nil` where unknown:
    /// one `HMGET`.
    func channelPolicies(
        app: String,
        environment: String,
        channels: [String]
    ) async throws(RedisError) -> [APNSChannelStoragePolicy?] {
        guard !channels.isEmpty else { return [] }
        var commands = RedisCommands(capacity: 64 + channels.reduce(0) { $0 + $1.utf8.count + 16 })
        commands.begin(.hmget, arguments: 1 + channels.count)
        commands.appendKey(keys.channels(app: app, environment: environment))
        for channel in channels { commands.append(channel) }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        guard let values = replies.first?.array, values.count == channels.count else {
            throw RedisError(
                .server("ERR"),
                "Redis answered the channel registry's HMGET with \(replies.first.map { "\($0)" } ?? "nothing")"
            )
        }
        return values.map { $0.int.flatMap { APNSChannelStoragePolicy(rawValue: Int($0)) } }
    }

    /// Records channels created (and their policies) or deleted: one round trip.
    func recordChannels(_ records: [ChannelRecord]) async throws(RedisError) {
        var commands = RedisCommands(capacity: records.count * 128)
        appendChannels(records, to: &commands)
        guard !commands.isEmpty else { return }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused a channel record: \(failure.errorMessage ?? "")")
        }
    }

    /// Appends `HSET` (created) or `HDEL` (deleted) for each record.
    func appendChannels(_ records: [ChannelRecord], to commands: inout RedisCommands) {
        for record in records {
            let key = keys.channels(app: record.app, environment: record.environment)
            if let policy = record.policy {
                commands.hset(key, field: record.channel, value: Int64(policy.rawValue))
            } else {
                commands.hdel(key, fields: [record.channel])
            }
        }
    }

    /// How many channels the registry holds for each app environment: one `HLEN` each.
    func channelCounts(_ environments: [(app: String, environment: String)]) async throws(RedisError) -> [Int] {
        guard !environments.isEmpty else { return [] }
        var commands = RedisCommands(capacity: environments.count * 96)
        for entry in environments {
            commands.hlen(keys.channels(app: entry.app, environment: entry.environment))
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        return try replies.map { reply throws(RedisError) in
            guard let count = reply.int else {
                throw RedisError(.server("ERR"), "Redis answered HLEN with \(reply)")
            }
            return Int(count)
        }
    }
}
