import PushRedis

/// The tokens' environments that `environmentFallback` found (``RedisKeys``, `e:`).
extension NotificationStore {
    /// The remembered environment of each token of `app` (`production`, `sandbox`), `nil` where
    /// none is: one round trip (per primary on a cluster).
    func rememberedEnvironments(app: String, tokens: [String]) async throws(RedisError) -> [String?] {
        guard !tokens.isEmpty else { return [] }
        var commands = RedisCommands(capacity: tokens.count * (prefix(app) + 90))
        for token in tokens {
            commands.get(keys.tokenEnvironment(app: app, token: token, tag: keys.tag(token: token)))
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused a token environment: \(failure.errorMessage ?? "")")
        }
        return replies.map(\.string)
    }

    /// Appends the commands that remember (`SET … EX`, for ``RedisKeys/verdictPeriod``) or
    /// forget (`DEL`) tokens' environments.
    func appendEnvironments(_ environments: [TokenEnvironment], to commands: inout RedisCommands) {
        for entry in environments {
            let key = keys.tokenEnvironment(app: entry.app, token: entry.token, tag: keys.tag(token: entry.token))
            if let environment = entry.environment {
                commands.set(key, environment, expiry: .seconds(keys.verdictPeriod))
            } else {
                commands.del(key)
            }
        }
    }

    private func prefix(_ app: String) -> Int { keys.prefix.utf8.count + app.utf8.count }
}
