import PushRedis

/// Worker liveness: each incarnation keeps `w:<owner>` (read for summaries) and `w:#<claim id>`
/// (read for claims) alive while it runs; a claim or summary held by an owner whose key is gone
/// is taken over.
extension NotificationStore {
    /// Marks this worker incarnation alive for `ttl`.
    func heartbeat(ttlMilliseconds: Int) async throws(RedisError) {
        let ttl = Array(String(ttlMilliseconds).utf8)
        let replies = try await redis.pipeline([
            [Array("SET".utf8), keys.liveness(owner: owner), Array("1".utf8), Array("PX".utf8), ttl],
            [Array("SET".utf8), keys.liveness(claimId: claimId), Array("1".utf8), Array("PX".utf8), ttl],
        ])
        if let message = replies.lazy.compactMap(\.errorMessage).first {
            throw RedisError(.server("ERR"), "Redis refused a heartbeat: \(message)")
        }
    }

    /// Marks this incarnation gone, so its claims can be taken over at once.
    func retire() async throws(RedisError) {
        let replies = try await redis.pipeline([
            [Array("DEL".utf8), keys.liveness(owner: owner)],
            [Array("DEL".utf8), keys.liveness(claimId: claimId)],
        ])
        if let message = replies.lazy.compactMap(\.errorMessage).first {
            throw RedisError(.server("ERR"), "Redis refused to retire this worker: \(message)")
        }
    }

    /// Which of `owners` (worker incarnations holding claims) are no longer alive: their
    /// liveness keys are gone. One round trip.
    func deadOwners(_ owners: Set<String>) async throws(RedisError) -> Set<String> {
        let list = owners.sorted()
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(list.map { [Array("EXISTS".utf8), keys.liveness(owner: $0)] })
        }
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
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(list.map { [Array("EXISTS".utf8), keys.liveness(claimId: $0)] })
        }
        var dead = Set<[UInt8]>()
        for (id, reply) in zip(list, replies) {
            guard let exists = reply.int else { throw RedisError(.protocol, "Redis answered EXISTS with \(reply)") }
            if exists == 0 { dead.insert(id) }
        }
        return dead
    }
}
