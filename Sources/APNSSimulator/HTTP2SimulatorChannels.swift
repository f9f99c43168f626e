import APNSCore
import APNSHTTP2Core
import Foundation

/// Apple's broadcast API (§7) on the HTTP/2 simulator: channel management (§7.2) and broadcasts
/// (§7.3), served on the same listener as device requests. Apple serves channel management on
/// its own host and port (§7.1); a client pointed at the simulator uses the simulator's port
/// for both.
///
/// Channels are kept per bundle ID and environment (the simulator's ``Configuration/environment``),
/// in creation order, at most ``Configuration/maxChannelsPerApp`` per app. A channel ID is 16
/// random bytes in standard base64 (24 characters), like the IDs APNs hands out.
///
/// A request whose `:path` starts with `/1/` or `/4/` is a channel or broadcast request. It is
/// checked in this order and answered with the first failing rule's status and
/// `{"reason":"…"}`, with `apns-request-id` (echoed when the request's is a UUID, else
/// generated) on every answer in place of `apns-id`:
///
/// | Rule | Status, reason |
/// |---|---|
/// | a header the simulator reads appears twice | 400 `DuplicateHeaders` |
/// | the path is none of `/1/apps/<bundleID>/channels`, `/1/apps/<bundleID>/all-channels`, `/4/broadcasts/apps/<bundleID>` | 404 `BadPath` |
/// | the method is not POST, GET or DELETE on `channels`, GET on `all-channels`, POST on `broadcasts` | 405 `MethodNotAllowed` |
/// | authentication fails (the device-request rules: certificate, or provider token with the bundle ID as topic) | 403 or 429, as for device requests |
/// | the bundle ID ends with `.push-type.liveactivity` | 400 `TopicDisallowed` |
/// | ``Configuration/allowedTopics`` is set and lacks the bundle ID | 403 `TopicMismatch` |
/// | create: the body is not a JSON object | 400 `BadRequestPayload` |
/// | create: the body has a member other than `push-type` and `message-storage-policy` | 400 `BadRequestParams` |
/// | create: the body has no `push-type` | 400 `MissingPushType` |
/// | create: `push-type` is not `LiveActivity` (any case) | 400 `InvalidPushType` |
/// | create: `message-storage-policy` is missing, or not 0 or 1 | 400 `MissingChannelQueueSize` |
/// | create: the app has ``Configuration/maxChannelsPerApp`` channels | 400 `CannotCreateChannelConfig` |
/// | read, delete, broadcast: no or an empty `apns-channel-id` | 400 `MissingChannelId` |
/// | read, delete, broadcast: `apns-channel-id` is not base64, or is over 1,024 characters | 400 `BadChannelId` |
/// | broadcast: no `apns-push-type` | 400 `MissingPushType` |
/// | broadcast: `apns-push-type` is not `liveactivity` (any case) | 400 `InvalidPushType` |
/// | broadcast: `apns-priority` is not 10 or 5 (§5.1: a Live Activity takes no priority 1) | 400 `BadPriority` |
/// | broadcast: `apns-expiration` is not a non-negative integer | 400 `BadExpirationDate` |
/// | read, delete, broadcast: the app has no such channel | 400 `ChannelNotRegistered` |
/// | broadcast: the channel stores no message and `apns-expiration` is not 0 | 400 `BadExpirationDate` |
/// | broadcast: the body is empty | 400 `PayloadEmpty` |
/// | broadcast: the body is over 5120 bytes | 413 `PayloadTooLarge` |
///
/// Success: create is 201 with `apns-channel-id` and no body; read is 200 with
/// `{"message-storage-policy":n,"push-type":"LiveActivity"}`; delete is 204; list is 200 with
/// `{"channels":[…]}` in creation order; a broadcast is 200 with no body, plus
/// `apns-unique-id` in the sandbox. Never produced: `FeatureNotEnabled` (every app may
/// broadcast). As for device requests, the broadcast body is not parsed.
extension APNSHTTP2Simulator {
    /// A channel's `message-storage-policy` (§7.2).
    public enum MessageStoragePolicy: Int, Sendable, Hashable, CaseIterable {
        /// 0: a device that is offline misses the broadcast.
        case noMessageStored = 0
        /// 1: APNs keeps the most recent broadcast for devices that come online.
        case mostRecentMessageStored = 1
    }

    /// One channel of one app (§7.2).
    public struct BroadcastChannel: Sendable, Hashable {
        public var id: String
        public var bundleID: String
        public var environment: APNSEnvironment
        public var storagePolicy: MessageStoragePolicy
    }

    /// One successful channel-management request (§7.2).
    public struct ChannelOperation: Sendable, Hashable {
        public enum Kind: String, Sendable, Hashable {
            case create
            case read
            case delete
            case list
        }

        public var kind: Kind
        public var connection: Int
        public var streamID: Int
        /// `apns-request-id` as answered: echoed or generated.
        public var requestID: String
        /// Whether the request carried its own `apns-request-id` (a UUID, echoed).
        public var requestIDEchoed = false
        public var bundleID: String
        /// The channel created, read or deleted; `nil` for a list.
        public var channelID: String?
        /// The channel's policy; `nil` for a list.
        public var storagePolicy: MessageStoragePolicy?
        /// How many channel IDs a list returned; `nil` for the other operations.
        public var listed: Int?
        public var authorization: Authorization
    }

    /// One accepted broadcast (§7.3).
    public struct Broadcast: Sendable, Hashable {
        public var connection: Int
        public var streamID: Int
        /// `apns-request-id` as answered: echoed or generated.
        public var requestID: String
        public var bundleID: String
        public var channelID: String
        /// `apns-push-type` as sent.
        public var pushType: String
        public var priority: Int?
        /// `apns-expiration` as sent (UNIX seconds; 0: do not store), `nil` when absent.
        public var expiration: Int?
        public var payloadLength: Int
        public var authorization: Authorization
    }

    /// The channels of `bundleID` in the simulator's environment, in creation order.
    public func channels(bundleID: String) -> [BroadcastChannel] {
        let environment = configuration.environment
        return state.withLock { s in
            let app = s.channels.apps[.init(bundleID: bundleID, environment: environment)]
            return (app?.order ?? []).compactMap { id in
                app?.policies[id].map {
                    BroadcastChannel(id: id, bundleID: bundleID, environment: environment, storagePolicy: $0)
                }
            }
        }
    }

    /// Creates a channel of `bundleID` in the simulator's environment without a request, as if
    /// an earlier run of the provider had made it, and returns its ID (`id` when given, which
    /// must be standard base64); `nil` at the ``Configuration/maxChannelsPerApp`` limit, for an
    /// `id` that is not well formed or one the app has already. Not recorded as a channel
    /// operation.
    public func createChannel(bundleID: String, storagePolicy: MessageStoragePolicy, id given: String? = nil) -> String?
    {
        let key = HTTP2SimulatorChannelStore.Key(bundleID: bundleID, environment: configuration.environment)
        if let given, !HTTP2SimulatorChannelStore.isWellFormed(channelID: given) { return nil }
        return state.withLock { s in
            var app = s.channels.apps[key] ?? .init()
            guard app.order.count < configuration.maxChannelsPerApp else { return nil }
            if let given, app.policies[given] != nil { return nil }
            let id = given ?? HTTP2SimulatorChannelStore.newChannelID(in: app)
            app.order.append(id)
            app.policies[id] = storagePolicy
            s.channels.apps[key] = app
            s.statistics.channels += 1
            return id
        }
    }

    /// The successful channel-management requests in the order they were answered (at most
    /// ``Configuration/acceptedListLimit``).
    public var channelOperations: [ChannelOperation] {
        state.withLock { $0.channelOperations }
    }

    /// The accepted broadcasts in the order they were answered (at most
    /// ``Configuration/acceptedListLimit``).
    public var broadcasts: [Broadcast] {
        state.withLock { $0.broadcasts }
    }
}

/// The channels of every app, keyed by bundle ID and environment (§7.1).
struct HTTP2SimulatorChannelStore {
    struct Key: Hashable {
        var bundleID: String
        var environment: APNSEnvironment
    }

    struct App {
        /// Channel IDs in creation order.
        var order: [String] = []
        var policies: [String: APNSHTTP2Simulator.MessageStoragePolicy] = [:]
    }

    var apps: [Key: App] = [:]
    /// Channels over all apps.
    var count = 0

    /// 16 random bytes in standard base64, unused in `app`.
    static func newChannelID(in app: App) -> String {
        while true {
            var generator = SystemRandomNumberGenerator()
            let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let id = Data(bytes).base64EncodedString()
            if app.policies[id] == nil { return id }
        }
    }

    /// §7.4 `BadChannelId`: standard base64 with its padding. Apple sets no size for channel
    /// IDs ("don't make assumptions"), so a long one that is well formed is merely unknown
    /// (`ChannelNotRegistered`); only one over 1,024 characters, the bound the worker takes, is
    /// refused here.
    static let maxChannelIDLength = 1024

    static func isWellFormed(channelID: String) -> Bool {
        let utf8 = channelID.utf8
        guard !utf8.isEmpty, utf8.count <= maxChannelIDLength, utf8.count % 4 == 0 else { return false }
        var padding = 0
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "="): padding += 1
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "/"):
                if padding > 0 { return false }
            default: return false
            }
        }
        return padding <= 2 && Data(base64Encoded: channelID) != nil
    }
}
