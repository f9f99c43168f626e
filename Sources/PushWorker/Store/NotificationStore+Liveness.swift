import PushRedis

/// Worker liveness: each incarnation keeps `w:<owner>` (read for summaries) and `w:#<claim id>`
/// (read for claims) alive while it runs; a claim or summary held by an owner whose key is gone
/// is taken over.
extension NotificationStore {
    /// Marks this worker incarnation alive for `ttl`.
    func heartbeat(ttlMilliseconds: Int) async throws(RedisError) {
        var commands = RedisCommands()
        commands.set(keys.liveness(owner: owner), 1, expiry: .milliseconds(Int64(ttlMilliseconds)))
        commands.set(keys.liveness(claimId: claimId), 1, expiry: .milliseconds(Int64(ttlMilliseconds)))
        let replies = try await redis.pipeline(commands)
        if let message = replies.lazy.compactMap(\.errorMessage).first {
            throw RedisError(.server("ERR"), "Redis refused a heartbeat: \(message)")
        }
    }

    /// Marks this incarnation gone, so its claims can be taken over at once.
    func retire() async throws(RedisError) {
        var commands = RedisCommands()
        commands.del(keys.liveness(owner: owner))
        commands.del(keys.liveness(claimId: claimId))
        let replies = try await redis.pipeline(commands)
        if let message = replies.lazy.compactMap(\.errorMessage).first {
            throw RedisError(.server("ERR"), "Redis refused to retire this worker: \(message)")
        }
    }

    /// Which of `owners` (worker incarnations holding claims) are no longer alive: their
    /// liveness keys are gone. One round trip.
    func deadOwners(_ owners: Set<String>) async throws(RedisError) -> Set<String> {
        let list = owners.sorted()
        var commands = RedisCommands()
        for owner in list { commands.exists(keys.liveness(owner: owner)) }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        var dead = Set<String>()
        for (owner, reply) in zip(list, replies) {
            guard let exists = reply.int else { throw RedisError(.protocol, "Redis answered EXISTS with \(reply)") }
            if exists == 0 { dead.insert(owner) }
        }
        return dead
    }

    /// Which of the owners named by `ids` in claims (``claimId``) are no longer alive: their
    /// `w:#` keys are gone. One round trip.
    func deadClaimOwners(_ ids: Set<[UInt8]>) async throws(RedisError) -> Set<[UInt8]> {
        let list = Array(ids)
        var commands = RedisCommands()
        for id in list { commands.exists(keys.liveness(claimId: id)) }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        var dead = Set<[UInt8]>()
        for (id, reply) in zip(list, replies) {
            guard let exists = reply.int else { throw RedisError(.protocol, "Redis answered EXISTS with \(reply)") }
            if exists == 0 { dead.insert(id) }
        }
        return dead
    }
}
