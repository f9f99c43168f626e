import PushKafka
import PushRedis

extension NotificationStore {
    /// Where a partition was handed on without a commit: its messages before `offset` that were
    /// produced at or before `at` (UNIX ms) have all their results written.
    struct HandoffMark: Sendable, Hashable {
        var offset: Int64
        var at: Int64

        /// Whether the message at `offset`, produced at `timestamp`, needs nothing more. A message
        /// produced after the hand-off is not one of its owner's, whatever its offset (the
        /// topic was deleted and made again), so it is consumed as usual, as is one without
        /// a timestamp.
        func covers(offset: Int64, timestamp: Int64?) -> Bool {
            guard let timestamp else { return false }
            return offset < self.offset && timestamp <= at
        }
    }

    /// Leaves hand-off marks for `positions` (written positions of partitions handed on without
    /// a commit), made at `at`. One round trip (per primary on a cluster).
    func storeHandoffs(_ positions: [TopicPartitionOffset], at: Int64, ttlSeconds: Int) async throws(RedisError) {
        guard !positions.isEmpty else { return }
        var commands = RedisCommands()
        for position in positions {
            commands.set(
                keys.handoff(position.topicPartition),
                "\(position.offset)|\(at)",
                expiry: .seconds(Int64(ttlSeconds))
            )
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let message = replies.lazy.compactMap(\.errorMessage).first {
            throw RedisError(.server("ERR"), "Redis refused a hand-off mark: \(message)")
        }
    }

    /// The hand-off marks of `partitions` that have one. One round trip (per primary on a cluster).
    func handoffs(_ partitions: [TopicPartition]) async throws(RedisError) -> [TopicPartition: HandoffMark] {
        guard !partitions.isEmpty else { return [:] }
        var commands = RedisCommands()
        for partition in partitions { commands.get(keys.handoff(partition)) }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        var marks: [TopicPartition: HandoffMark] = [:]
        for (partition, reply) in zip(partitions, replies) {
            if let message = reply.errorMessage {
                throw RedisError(.server("ERR"), "Redis refused a hand-off mark: \(message)")
            }
            guard let text = reply.string else { continue }
            let parts = text.split(separator: "|")
            guard parts.count == 2, let offset = Int64(parts[0]), let at = Int64(parts[1]) else {
                throw RedisError(
                    .protocol,
                    "the hand-off mark of \(partition) is \"\(text.prefix(64))\", not <offset>|<at>"
                )
            }
            marks[partition] = HandoffMark(offset: offset, at: at)
        }
        return marks
    }
}
