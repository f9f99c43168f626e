import PushRedis

extension NotificationStore {
    /// Takes the feedback lock for `app`/`environment` for `ttl` if nobody holds it.
    func tryFeedbackLock(app: String, environment: String, ttlMilliseconds: Int) async throws(RedisError) -> Bool {
        var command = RedisCommands()
        command.set(
            keys.feedbackLock(app: app, environment: environment),
            owner,
            expiry: .milliseconds(Int64(ttlMilliseconds)),
            onlyIfAbsent: true
        )
        let reply = try await redis.pipeline(command)[0]
        if let message = reply.errorMessage {
            throw RedisError(.server("ERR"), "Redis refused the feedback lock: \(message)")
        }
        return !reply.isNull
    }
}
