import PushLocalStack
import PushRedis
import PushTestSupport
import Testing

/// Starts a server, runs `body`, and stops the server however `body` ends.
func withRedisServer<T>(
    _ extraArguments: [String] = [],
    _ body: (RedisServerProcess) async throws -> T
) async throws -> T {
    let server = try await RedisServerProcess.start(extraArguments)
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

/// Runs `body` and returns the RedisError it throws, or `nil` (recording an issue) if it
/// throws nothing or another error.
func redisError<T>(
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> T
) async -> RedisError? {
    do {
        _ = try await body()
        Issue.record("expected a RedisError, but the call succeeded", sourceLocation: sourceLocation)
        return nil
    } catch let error as RedisError {
        return error
    } catch {
        Issue.record("expected a RedisError, got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}
