import APNSCore
import APNSHTTP2
import PushConfiguration

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
