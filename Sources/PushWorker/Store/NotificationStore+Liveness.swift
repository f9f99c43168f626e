import PushRedis

/// Worker liveness: each incarnation keeps `w:<owner>` alive while it runs; a claim or summary
/// held by an owner whose key is gone is taken over.
extension NotificationStore {
    /// Marks this worker incarnation alive for `ttl`.
    func heartbeat(ttlMilliseconds: Int) async throws(RedisError) {
        try await redis.send([
            Array("SET".utf8), keys.liveness(owner: owner), Array("1".utf8), Array("PX".utf8),
            Array(String(ttlMilliseconds).utf8),
        ])
    }

    /// Marks this incarnation gone, so its claims can be taken over at once.
    func retire() async throws(RedisError) {
        try await redis.send([Array("DEL".utf8), keys.liveness(owner: owner)])
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
}
