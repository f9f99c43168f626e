import PushRedis

extension NotificationStore {
    /// Takes the feedback lock for `app`/`environment` for `ttl` if nobody holds it.
    func tryFeedbackLock(app: String, environment: String, ttlMilliseconds: Int) async throws(RedisError) -> Bool {
        let reply = try await redis.send([
            Array("SET".utf8), keys.feedbackLock(app: app, environment: environment), Array(owner.utf8),
            Array("NX".utf8),
            Array("PX".utf8), Array(String(ttlMilliseconds).utf8),
        ])
        return !reply.isNull
    }
}
