import APNSCore
import APNSHTTP2
import PushConfiguration
import PushRedis

/// Broadcast channels of a configured app (`docs/apns-protocol.md` §7): the channel management
/// client for one of its environments, with the credentials of its HTTP/2 pool and the
/// environment's `channelManagement` endpoint.
public enum ChannelManagement {
    /// The manager of `app`'s channels in `environment` (the app's default environment when
    /// `nil`). Fails with a sentence naming the setting when the app is not configured, is not
    /// delivered over HTTP/2, or its credentials cannot be loaded.
    public static func manager(
        for configuration: WorkerConfiguration,
        app name: String,
        environment: APNSEnvironment?
    ) throws(ConfigurationError) -> APNSChannelManager {
        guard let app = configuration.apps[name] else {
            let configured = configuration.apps.keys.sorted().joined(separator: ", ")
            throw ConfigurationError("app \"\(name)\" is not configured; configured apps: \(configured)")
        }
        let environment = environment ?? app.defaultEnvironment
        guard let settings = app.environments[environment] else {
            throw ConfigurationError(
                "app \"\(name)\" configures no \(environment.rawValue) environment; configure it under apps.\(name).environments"
            )
        }
        let pool = try PoolSettings(app: app, environment: settings, maxPending: 1)
        guard let manager = pool.channelManager else {
            throw ConfigurationError(
                "broadcast channels are part of the HTTP/2 API, and app \"\(name)\" is delivered over the binary protocol; configure it with transport http2"
            )
        }
        return manager
    }
}

extension ChannelManagement {
    /// Records a channel created (with its storage policy) or deleted (`policy` `nil`) outside a
    /// channel job, such as by `apn-worker channels`, in the workers' channel registry in Redis
    /// (`docs/jobs.md`, "Broadcasts"). Throws a sentence when Redis cannot be reached or refuses.
    public static func record(
        channel: String,
        policy: APNSChannelStoragePolicy?,
        app: String,
        environment: APNSEnvironment?,
        configuration: WorkerConfiguration
    ) async throws(ConfigurationError) {
        let environment = environment ?? configuration.apps[app]?.defaultEnvironment ?? .production
        let client: RedisClient
        do {
            client = try await RedisClient.connect(seeds: configuration.redisSeeds, cluster: configuration.redisCluster)
        } catch {
            throw ConfigurationError(
                "cannot reach Redis at \(configuration.redis.endpoint) to record the channel in the registry: \(error.message)"
            )
        }
        let store = NotificationStore(redis: client, prefix: Worker.redisKeyPrefix, owner: "channels")
        var failure: RedisError? = nil
        do {
            try await store.recordChannels([
                ChannelRecord(app: app, environment: environment.rawValue, channel: channel, policy: policy)
            ])
        } catch {
            failure = error
        }
        await client.close()
        if let failure {
            throw ConfigurationError("Redis did not record the channel in the registry: \(failure.message)")
        }
    }
}
