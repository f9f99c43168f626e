import Logging
import PushConfiguration
import PushRedis
import ServiceLifecycle
import Synchronization

/// The worker's two Redis clients as a service of its group: one for claims, one for the
/// rest (records, written positions, liveness, feedback), so that a claim round trip never waits
/// behind a record pipeline. Each is one connection to a server, or one per primary of a Redis
/// Cluster (`redis.cluster`). It connects (retrying until Redis answers: nothing can be sent
/// without dedupe), hands the connections to the worker, and closes them once the group has
/// shut the worker down.
final class WorkerRedis: Service, Sendable {
    struct Connections: Sendable {
        var claims: RedisClient
        var state: RedisClient
    }

    private let configuration: WorkerConfiguration
    private let owner: String
    private let logger: Logger
    private let connected: AsyncStream<Connections>
    private let connectedIn: AsyncStream<Connections>.Continuation

    init(configuration: WorkerConfiguration, owner: String, logger: Logger) {
        self.configuration = configuration
        self.owner = owner
        self.logger = logger
        (connected, connectedIn) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func run() async throws {
        defer { connectedIn.finish() }
        guard let connections = await Self.connect(configuration: configuration, owner: owner, logger: logger) else {
            return
        }
        connectedIn.yield(connections)
        try? await gracefulShutdown()
        await connections.claims.close()
        await connections.state.close()
    }

    /// The connections once ``run()`` made them; `nil` if it ended first (cancelled). One caller.
    func connections() async -> Connections? {
        for await connections in connected { return connections }
        return nil
    }

    /// Both connections, each retried until Redis answers; `nil` when cancelled meanwhile.
    private static func connect(configuration: WorkerConfiguration, owner: String, logger: Logger) async -> Connections?
    {
        guard let claims = await connect(purpose: "claims", configuration: configuration, owner: owner, logger: logger)
        else { return nil }
        guard let state = await connect(purpose: "state", configuration: configuration, owner: owner, logger: logger)
        else {
            await claims.close()
            return nil
        }
        return Connections(claims: claims, state: state)
    }

    private static func connect(
        purpose: String,
        configuration: WorkerConfiguration,
        owner: String,
        logger: Logger
    ) async -> RedisClient? {
        var delay: Duration = .milliseconds(100)
        while !Task.isCancelled {
            do throws(RedisError) {
                let client = try await RedisClient.connect(
                    seeds: configuration.redisSeeds,
                    cluster: configuration.redisCluster
                )
                do {
                    try await NotificationStore(redis: client, prefix: Worker.redisKeyPrefix, owner: owner).prepare()
                } catch {
                    await client.close()
                    throw error
                }
                return client
            } catch {
                logger.warning(
                    "Redis is unreachable; retrying",
                    metadata: [
                        "endpoint": "\(configuration.redis.endpoint)", "purpose": "\(purpose)",
                        "error": "\(error.message)",
                    ]
                )
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
        return nil
    }
}
