/// A `reason` string from an HTTP/2 error response or GOAWAY (§3.4, §3.5), or from the broadcast
/// and channel management API (§7.4).
///
/// Every documented reason is a static member and carries its HTTP status, Apple's meaning
/// and a retry advice. Undocumented reasons are kept as they arrived; their advice follows
/// from the HTTP status alone (``retryAdvice(status:)``).
public struct APNSReason: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    // §3.4: 400
    public static let badCollapseId = APNSReason(rawValue: "BadCollapseId")
    public static let badDeviceToken = APNSReason(rawValue: "BadDeviceToken")
    public static let badExpirationDate = APNSReason(rawValue: "BadExpirationDate")
    public static let badMessageId = APNSReason(rawValue: "BadMessageId")
    public static let badPriority = APNSReason(rawValue: "BadPriority")
    public static let badTopic = APNSReason(rawValue: "BadTopic")
    public static let deviceTokenNotForTopic = APNSReason(rawValue: "DeviceTokenNotForTopic")
    public static let duplicateHeaders = APNSReason(rawValue: "DuplicateHeaders")
    public static let idleTimeout = APNSReason(rawValue: "IdleTimeout")
    public static let invalidPushType = APNSReason(rawValue: "InvalidPushType")
    public static let missingDeviceToken = APNSReason(rawValue: "MissingDeviceToken")
    public static let missingTopic = APNSReason(rawValue: "MissingTopic")
    public static let payloadEmpty = APNSReason(rawValue: "PayloadEmpty")
    public static let topicDisallowed = APNSReason(rawValue: "TopicDisallowed")
    // §3.4: 403
    public static let badCertificate = APNSReason(rawValue: "BadCertificate")
    public static let badCertificateEnvironment = APNSReason(rawValue: "BadCertificateEnvironment")
    public static let expiredProviderToken = APNSReason(rawValue: "ExpiredProviderToken")
    public static let forbidden = APNSReason(rawValue: "Forbidden")
    public static let invalidProviderToken = APNSReason(rawValue: "InvalidProviderToken")
    public static let missingProviderToken = APNSReason(rawValue: "MissingProviderToken")
    public static let unrelatedKeyIdInToken = APNSReason(rawValue: "UnrelatedKeyIdInToken")
    public static let badEnvironmentKeyIdInToken = APNSReason(rawValue: "BadEnvironmentKeyIdInToken")
    // §3.4: 404, 405, 410, 413, 429, 500, 503
    public static let badPath = APNSReason(rawValue: "BadPath")
    public static let methodNotAllowed = APNSReason(rawValue: "MethodNotAllowed")
    public static let expiredToken = APNSReason(rawValue: "ExpiredToken")
    public static let unregistered = APNSReason(rawValue: "Unregistered")
    public static let payloadTooLarge = APNSReason(rawValue: "PayloadTooLarge")
    public static let tooManyProviderTokenUpdates = APNSReason(rawValue: "TooManyProviderTokenUpdates")
    public static let tooManyRequests = APNSReason(rawValue: "TooManyRequests")
    public static let internalServerError = APNSReason(rawValue: "InternalServerError")
    public static let serviceUnavailable = APNSReason(rawValue: "ServiceUnavailable")
    public static let shutdown = APNSReason(rawValue: "Shutdown")
    // §7.4: channel management and broadcasts
    public static let featureNotEnabled = APNSReason(rawValue: "FeatureNotEnabled")
    public static let missingChannelId = APNSReason(rawValue: "MissingChannelId")
    public static let badChannelId = APNSReason(rawValue: "BadChannelId")
    public static let channelNotRegistered = APNSReason(rawValue: "ChannelNotRegistered")
    public static let badRequestParams = APNSReason(rawValue: "BadRequestParams")
    public static let badRequestPayload = APNSReason(rawValue: "BadRequestPayload")
    public static let missingPushType = APNSReason(rawValue: "MissingPushType")
    public static let cannotCreateChannelConfig = APNSReason(rawValue: "CannotCreateChannelConfig")
    public static let topicMismatch = APNSReason(rawValue: "TopicMismatch")

    /// One row of the §3.4 or §7.4 reason table.
    public struct Entry: Sendable, Hashable {
        /// The HTTP status APNs sends with the reason.
        public let status: Int
        /// Apple's meaning, shortened.
        public let meaning: String
        public let retry: APNSRetryAdvice
        /// The device token should no longer be used for the topic (malformed, wrong
        /// environment, another topic's token, or no longer registered).
        public let invalidatesDeviceToken: Bool
        /// The connection should be closed and a new one opened.
        public let replaceConnection: Bool
    }

    /// Every reason of the current §3.4 table, in the table's order, then those of §7.4.
    public static let documented: [APNSReason] = table.map(\.0)

    /// The §3.4 or §7.4 row of a documented reason; `nil` for others.
    public var entry: Entry? { Self.entries[self] }

    public var isDocumented: Bool { entry != nil }

    /// The HTTP status documented for this reason; `nil` for undocumented reasons.
    public var status: Int? { entry?.status }

    /// How to treat a failure with this reason; for an undocumented reason, the advice for
    /// `status` (the status of the response that carried it).
    public func retryAdvice(status: Int) -> APNSRetryAdvice {
        entry?.retry ?? Self.retryAdvice(status: status)
    }

    /// The advice for a status whose reason is unknown or missing (§3.4): 5xx with back-off,
    /// 429 after a delay, 410 never, 413 never, other statuses only after a fix.
    public static func retryAdvice(status: Int) -> APNSRetryAdvice {
        switch status {
        case 500...599: .withBackoff
        case 429: .afterDelay
        case 410, 413: .never
        default: .afterFixingRequest
        }
    }

    /// §3.4 "Retry policy": 5xx may be retried after this long, with back-off.
    public static let serverErrorRetryDelay: Duration = .seconds(15 * 60)

    private static let entries: [APNSReason: Entry] = Dictionary(uniqueKeysWithValues: table)

    // §3.4 reason table. Retry column from §3.4 "Retry policy": BadDeviceToken,
    // DeviceTokenNotForTopic, Forbidden, ExpiredToken, Unregistered and PayloadTooLarge are
    // never retried; TooManyRequests after a delay; 5xx with back-off; other 4xx after the
    // cause is fixed. Connection replacement: ExpiredProviderToken (§6.10),
    // UnrelatedKeyIdInToken ("open a new connection"), TooManyProviderTokenUpdates (the
    // count is per connection, §4), IdleTimeout and Shutdown (the server ends the connection).
    // Those are retried at once on another connection: a 503 Shutdown is about the connection
    // (§3.4: "the server is shutting down"), not the service, as ServiceUnavailable is; pushy
    // and apns2 send such a request again on a new connection.
    private static let table: [(APNSReason, Entry)] = deviceTable + channelTable

    private static let deviceTable: [(APNSReason, Entry)] = [
        (
            .badCollapseId,
            Entry(
                status: 400,
                meaning: "the collapse ID is longer than 64 bytes",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .badDeviceToken,
            Entry(
                status: 400,
                meaning: "the device token is malformed or belongs to the other environment",
                retry: .never,
                invalidatesDeviceToken: true,
                replaceConnection: false
            )
        ),
        (
            .badExpirationDate,
            Entry(
                status: 400,
                meaning: "the apns-expiration value is bad",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .badMessageId,
            Entry(
                status: 400,
                meaning: "the apns-id value is bad",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .badPriority,
            Entry(
                status: 400,
                meaning: "the apns-priority value is bad",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .badTopic,
            Entry(
                status: 400,
                meaning: "the apns-topic value is bad",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .deviceTokenNotForTopic,
            Entry(
                status: 400,
                meaning: "the device token belongs to another topic",
                retry: .never,
                invalidatesDeviceToken: true,
                replaceConnection: false
            )
        ),
        (
            .duplicateHeaders,
            Entry(
                status: 400,
                meaning: "a header was repeated",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .idleTimeout,
            Entry(
                status: 400,
                meaning: "idle timeout",
                retry: .onNewConnection,
                invalidatesDeviceToken: false,
                replaceConnection: true
            )
        ),
        (
            .invalidPushType,
            Entry(
                status: 400,
                meaning: "the apns-push-type value is bad",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .missingDeviceToken,
            Entry(
                status: 400,
                meaning: "the :path has no device token",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .missingTopic,
            Entry(
                status: 400,
                meaning: "the topic is required but absent",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .payloadEmpty,
            Entry(
                status: 400,
                meaning: "the body is empty",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .topicDisallowed,
            Entry(
                status: 400,
                meaning: "pushing to this topic is not allowed",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .badCertificate,
            Entry(
                status: 403,
                meaning: "the certificate is invalid",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .badCertificateEnvironment,
            Entry(
                status: 403,
                meaning: "the certificate is for the other environment",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .expiredProviderToken,
            Entry(
                status: 403,
                meaning: "the provider token is older than one hour",
                retry: .onNewConnection,
                invalidatesDeviceToken: false,
                replaceConnection: true
            )
        ),
        (
            .forbidden,
            Entry(
                status: 403,
                meaning: "the action is not allowed",
                retry: .never,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .invalidProviderToken,
            Entry(
                status: 403,
                meaning: "the provider token is invalid or its signature does not verify",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .missingProviderToken,
            Entry(
                status: 403,
                meaning: "there is no certificate and no provider token",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .unrelatedKeyIdInToken,
            Entry(
                status: 403,
                meaning: "the key ID is unrelated to the key of this connection's first push",
                retry: .onNewConnection,
                invalidatesDeviceToken: false,
                replaceConnection: true
            )
        ),
        (
            .badEnvironmentKeyIdInToken,
            Entry(
                status: 403,
                meaning: "the key is for the other environment",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .badPath,
            Entry(
                status: 404,
                meaning: "the :path is bad",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .methodNotAllowed,
            Entry(
                status: 405,
                meaning: "the method is not POST",
                retry: .afterFixingRequest,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .expiredToken,
            Entry(
                status: 410,
                meaning: "the device token has expired",
                retry: .never,
                invalidatesDeviceToken: true,
                replaceConnection: false
            )
        ),
        (
            .unregistered,
            Entry(
                status: 410,
                meaning: "the device token is no longer active for the topic",
                retry: .never,
                invalidatesDeviceToken: true,
                replaceConnection: false
            )
        ),
        (
            .payloadTooLarge,
            Entry(
                status: 413,
                meaning: "the payload is over 4096 bytes (5120 for VoIP and broadcasts)",
                retry: .never,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .tooManyProviderTokenUpdates,
            Entry(
                status: 429,
                meaning: "the provider token changed more than once in 20 minutes on this connection",
                retry: .onNewConnection,
                invalidatesDeviceToken: false,
                replaceConnection: true
            )
        ),
        (
            .tooManyRequests,
            Entry(
                status: 429,
                meaning: "too many consecutive pushes to one device token",
                retry: .afterDelay,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .internalServerError,
            Entry(
                status: 500,
                meaning: "internal server error",
                retry: .withBackoff,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .serviceUnavailable,
            Entry(
                status: 503,
                meaning: "the service is unavailable",
                retry: .withBackoff,
                invalidatesDeviceToken: false,
                replaceConnection: false
            )
        ),
        (
            .shutdown,
            Entry(
                status: 503,
                meaning: "the server is shutting down",
                retry: .onNewConnection,
                invalidatesDeviceToken: false,
                replaceConnection: true
            )
        ),
    ]

    // §7.4 reason table: the answers of channel management and broadcasts. Each names a request,
    // a channel or an account setting to fix, so none is retried as it was; none says anything
    // about a device token (a broadcast has none) or the connection.
    private static let channelTable: [(APNSReason, Entry)] = [
        (.featureNotEnabled, fix(400, "the broadcast capability is not enabled for the topic")),
        (.missingChannelId, fix(400, "the apns-channel-id header is missing")),
        (.badChannelId, fix(400, "apns-channel-id is not properly encoded, or is longer than allowed")),
        (.channelNotRegistered, fix(400, "the channel in apns-channel-id does not exist in this environment")),
        (.badRequestParams, fix(400, "the JSON request body has an attribute APNs does not recognize")),
        (.badRequestPayload, fix(400, "the JSON request body cannot be parsed")),
        (.missingPushType, fix(400, "the apns-push-type header (or the body's push-type) is missing")),
        (.cannotCreateChannelConfig, fix(400, "the app has reached its limit of channels in this environment")),
        (.topicMismatch, fix(403, "the token's or certificate's bundle IDs do not include the one in the path")),
    ]

    /// A row whose request fails again until something is fixed.
    private static func fix(_ status: Int, _ meaning: String) -> Entry {
        Entry(
            status: status,
            meaning: meaning,
            retry: .afterFixingRequest,
            invalidatesDeviceToken: false,
            replaceConnection: false
        )
    }
}

/// What a provider should do with a request that failed (§3.4 "Retry policy").
public enum APNSRetryAdvice: String, Sendable, Hashable, CaseIterable {
    /// Never resend: APNs lists the reason under "Never retry".
    case never
    /// Resending the same request fails again; it may be sent once the request or the
    /// configuration is fixed.
    case afterFixingRequest
    /// Resend to the same device token after a delay (`TooManyRequests`).
    case afterDelay
    /// Resend with back-off; APNs suggests waiting 15 minutes after a 5xx.
    case withBackoff
    /// Resend on a new connection (with a fresh provider token where tokens are used).
    case onNewConnection

    /// The reason is on the "never retry" list (§3.4).
    public var isPermanent: Bool { self == .never }

    /// The same request may be resent without changing it.
    public var isRetryable: Bool {
        switch self {
        case .afterDelay, .withBackoff, .onNewConnection: true
        case .never, .afterFixingRequest: false
        }
    }
}
