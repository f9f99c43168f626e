import APNSCore
import Foundation

/// One HTTP/2 header field; names are lower case as HTTP/2 requires.
public struct APNSHTTP2Header: Sendable, Hashable, CustomStringConvertible {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    /// `name: value`, with a bearer token shortened so logs never hold the credential.
    public var description: String {
        name == "authorization" ? "authorization: bearer …" : "\(name): \(value)"
    }
}

/// How a connection authenticates (§3.1).
public enum APNSAuthentication: Sendable, Hashable {
    /// A client certificate in the TLS handshake; no `authorization` header.
    case certificate
    /// A provider token (JWT) in the `authorization` header of every request (§4).
    case token(APNSProviderToken)
}

/// A validated request for the HTTP/2 provider API (§3.3): `POST /3/device/<hex token>` with
/// the `apns-*` headers and the payload as the body.
///
/// Building one runs the checks of §3.3 and §5 that do not need Apple's data, so a request
/// that APNs would reject for its form fails here with an ``APNSError`` sentence instead:
/// code `invalidRequest` for header rules and `invalidPayload` (with the
/// ``APNSPayloadError`` as `underlying`) for the payload.
public struct APNSHTTP2Request: Sendable, Hashable {
    /// §3.3: the only method APNs accepts.
    public static let method = "POST"
    public static let scheme = "https"
    /// §3.3: `apns-collapse-id` is at most 64 bytes once UTF-8 encoded.
    public static let maximumCollapseIDLength = 64

    public let deviceToken: DeviceToken
    /// `apns-topic`; `nil` only on certificate connections (single-topic certificates, §3.2).
    public let topic: String?
    public let pushType: APNSPushType
    public let priority: APNSPriority
    /// `apns-expiration`: UNIX seconds; 0 means one delivery attempt and no storage (§3.3).
    public let expiration: UInt32
    public let collapseID: String?
    /// `apns-id`, set by the client so that responses and logs can be matched (§3.5).
    public let apnsID: UUID
    public private(set) var authentication: APNSAuthentication
    /// The JSON payload, uncompressed (§3.3).
    public let body: [UInt8]

    /// Builds the request for a notification; the payload, priority and expiry come from it.
    ///
    /// Besides the header checks (see ``init(payload:deviceToken:topic:pushType:priority:expiry:authentication:collapseID:apnsID:now:)``),
    /// the payload must pass ``APNSNotification/validatedPayload(limit:allowLowPriority:)``
    /// with the push type's limit (4096 bytes, 5120 for VoIP) and match the push type:
    /// `background` needs `content-available` and no alert, sound or badge; `alert` must not
    /// be a `content-available`-only payload; `mdm` goes with an MDM notification and only
    /// with it (§3.3, §5).
    public init(
        notification: APNSNotification,
        deviceToken: DeviceToken,
        topic: String?,
        pushType: APNSPushType,
        authentication: APNSAuthentication,
        collapseID: String? = nil,
        apnsID: UUID = UUID(),
        now: Date = Date()
    ) throws(APNSError) {
        try Self.validateHeaders(
            topic: topic,
            pushType: pushType,
            priority: notification.priority,
            authentication: authentication,
            collapseID: collapseID
        )
        try Self.validateContent(of: notification, pushType: pushType)
        let body: [UInt8]
        do {
            // §1.3: 4096 bytes, 5120 for VoIP; §3.3: priority 1 exists on HTTP/2.
            body = try notification.validatedPayload(limit: pushType.payloadLimit, allowLowPriority: true)
        } catch {
            throw APNSError(.invalidPayload, error.message, underlying: error)
        }
        self.init(
            deviceToken: deviceToken,
            topic: topic,
            pushType: pushType,
            priority: notification.priority,
            expiration: notification.expiry.unixSeconds(now: now),
            collapseID: collapseID,
            apnsID: apnsID,
            authentication: authentication,
            body: body
        )
    }

    /// Builds the request for a payload that is already serialized.
    ///
    /// Checks (§3.3, §5): token authentication needs a topic; a topic is non-empty without
    /// spaces or control characters and ends with the push type's suffix; `location` needs
    /// token authentication; `background` needs priority 5; a collapse ID is 1–64 bytes
    /// without control characters; the payload is a non-empty JSON object within the push
    /// type's size limit.
    public init(
        payload: [UInt8],
        deviceToken: DeviceToken,
        topic: String?,
        pushType: APNSPushType,
        priority: APNSPriority = .immediate,
        expiry: APNSExpiry = .immediately,
        authentication: APNSAuthentication,
        collapseID: String? = nil,
        apnsID: UUID = UUID(),
        now: Date = Date()
    ) throws(APNSError) {
        try Self.validateHeaders(
            topic: topic,
            pushType: pushType,
            priority: priority,
            authentication: authentication,
            collapseID: collapseID
        )
        // §5 check 1: a non-empty JSON object within the size limit (§1.3).
        guard !payload.isEmpty else {
            throw APNSError(
                .invalidPayload,
                "the payload is empty; APNs needs a JSON object such as {\"aps\":{\"alert\":\"Hello\"}}",
                underlying: APNSPayloadError(.emptyPayload, "the payload is empty")
            )
        }
        guard payload.count <= pushType.payloadLimit else {
            let message =
                "payload is \(payload.count) bytes, over the \(pushType.payloadLimit)-byte limit for push type \(pushType.rawValue); shorten it"
            throw APNSError(.invalidPayload, message, underlying: APNSPayloadError(.tooLarge, message))
        }
        guard case .object = try? JSONValue.parse(payload) else {
            let message =
                "the payload is not a JSON object; APNs needs UTF-8 JSON such as {\"aps\":{\"alert\":\"Hello\"}}"
            throw APNSError(.invalidPayload, message, underlying: APNSPayloadError(.invalidValue, message))
        }
        self.init(
            deviceToken: deviceToken,
            topic: topic,
            pushType: pushType,
            priority: priority,
            expiration: expiry.unixSeconds(now: now),
            collapseID: collapseID,
            apnsID: apnsID,
            authentication: authentication,
            body: payload
        )
    }

    private init(
        deviceToken: DeviceToken,
        topic: String?,
        pushType: APNSPushType,
        priority: APNSPriority,
        expiration: UInt32,
        collapseID: String?,
        apnsID: UUID,
        authentication: APNSAuthentication,
        body: [UInt8]
    ) {
        self.deviceToken = deviceToken
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.authentication = authentication
        self.body = body
    }

    // MARK: Wire form

    /// `/3/device/<token in lower-case hex>` (§3.3).
    public var path: String { "/3/device/" + deviceToken.hex }

    /// `apns-id` as sent: the canonical lower-case 8-4-4-4-12 form (§3.3).
    public var apnsIDString: String { apnsID.uuidString.lowercased() }

    /// `:method`, `:scheme` and `:path`; `:authority` is the connection's host.
    public var pseudoHeaders: [APNSHTTP2Header] {
        [.init(":method", Self.method), .init(":scheme", Self.scheme), .init(":path", path)]
    }

    /// The regular headers, each at most once (§3.4 `DuplicateHeaders`): `apns-id`,
    /// `apns-push-type`, `apns-topic` (when set), `apns-priority`, `apns-expiration`,
    /// `apns-collapse-id` (when set) and, with token authentication, `authorization`.
    public var headers: [APNSHTTP2Header] {
        var out: [APNSHTTP2Header] = [
            .init("apns-id", apnsIDString),
            .init("apns-push-type", pushType.rawValue),
        ]
        if let topic { out.append(.init("apns-topic", topic)) }
        out.append(.init("apns-priority", String(priority.rawValue)))
        out.append(.init("apns-expiration", String(expiration)))
        if let collapseID { out.append(.init("apns-collapse-id", collapseID)) }
        if let authorization { out.append(.init("authorization", authorization)) }
        return out
    }

    /// The value of a header of ``headers`` or ``pseudoHeaders``, by lower-case name.
    public func header(_ name: String) -> String? {
        (pseudoHeaders + headers).first { $0.name == name }?.value
    }

    /// `bearer <JWT>` with token authentication, `nil` with a certificate (§3.3).
    public var authorization: String? {
        if case .token(let token) = authentication { return token.authorization }
        return nil
    }

    /// Switches the request to `token`, for example before resending it on a connection that
    /// uses a newer token. Throws `invalidRequest` when the request has no topic, which token
    /// authentication requires (§5 check 5).
    public mutating func authorize(with token: APNSProviderToken) throws(APNSError) {
        guard topic != nil else {
            throw APNSError(
                .invalidRequest,
                "this request has no apns-topic, which token authentication requires; build it with the app's topic"
            )
        }
        authentication = .token(token)
    }

    // MARK: Rules

    /// Throws `invalidRequest` unless `collapseID` is 1–64 bytes of UTF-8 without control
    /// characters (§3.3, §5 check 3).
    public static func validate(collapseID: String) throws(APNSError) {
        let length = collapseID.utf8.count
        guard length > 0 else {
            throw APNSError(.invalidRequest, "the collapse ID is empty; leave it unset instead")
        }
        guard length <= maximumCollapseIDLength else {
            throw APNSError(
                .invalidRequest,
                "the collapse ID is \(length) bytes, over APNs's \(maximumCollapseIDLength)-byte limit; shorten it"
            )
        }
        guard !collapseID.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw APNSError(.invalidRequest, "the collapse ID contains a control character; use printable text")
        }
    }

    /// Throws `invalidRequest` unless `topic` is non-empty and free of whitespace and control
    /// characters (bundle IDs have none; a header value must not contain line breaks).
    public static func validate(topic: String) throws(APNSError) {
        guard !topic.isEmpty else {
            throw APNSError(.invalidRequest, "the topic is empty; set it to the app's bundle ID")
        }
        // Printable ASCII without spaces is what every bundle ID looks like: no scalar to inspect.
        if topic.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) { return }
        let bad = topic.unicodeScalars.contains {
            $0.properties.isWhitespace || $0.properties.generalCategory == .control
        }
        guard !bad else {
            throw APNSError(
                .invalidRequest,
                "the topic \"\(topic)\" contains whitespace or a control character; use the app's bundle ID"
            )
        }
    }

    /// The header checks of ``init(payload:deviceToken:topic:pushType:priority:expiry:authentication:collapseID:apnsID:now:)``,
    /// for a client that builds its frames itself.
    public static func validateHeaders(
        topic: String?,
        pushType: APNSPushType,
        priority: APNSPriority,
        authentication: APNSAuthentication,
        collapseID: String?
    ) throws(APNSError) {
        if let topic {
            try validate(topic: topic)
            // §3.3 table: the topic suffix depends on the push type.
            try pushType.validate(topic: topic)
        } else if case .token = authentication {
            // §5 check 5: a topic is present for token auth.
            throw APNSError(
                .invalidRequest,
                "the request has no apns-topic; token-authenticated requests need one, such as the app's bundle ID"
            )
        }
        // §3.3 table: location is available with token authentication only.
        if pushType.requiresTokenAuthentication, authentication == .certificate {
            throw APNSError(
                .invalidRequest,
                "push type \(pushType.rawValue) works only with token authentication; configure a signing key for this app"
            )
        }
        // §3.3: background is priority 5 only.
        try pushType.validate(priority: priority)
        if let collapseID { try validate(collapseID: collapseID) }
    }

    /// The payload-content checks of ``init(notification:deviceToken:topic:pushType:authentication:collapseID:apnsID:now:)``.
    public static func validateContent(of notification: APNSNotification, pushType: APNSPushType) throws(APNSError) {
        // §5: MDM payloads are {"mdm":…} and go with push type mdm.
        if pushType == .mdm && notification.mdm == nil {
            throw APNSError(
                .invalidRequest,
                "push type mdm needs an MDM notification; set mdm to the device's PushMagic"
            )
        }
        if notification.mdm != nil && pushType != .mdm {
            throw APNSError(
                .invalidRequest,
                "an MDM notification must be sent with push type mdm, not \(pushType.rawValue)"
            )
        }
        let shows = notification.alert != nil || notification.sound != nil || notification.badge != nil
        switch pushType {
        case .background:
            // §3.3 table, §5: content-available and no alert, sound or badge.
            guard notification.contentAvailable else {
                throw APNSError(
                    .invalidRequest,
                    "push type background needs content-available; set it, or use push type alert"
                )
            }
            guard !shows else {
                throw APNSError(
                    .invalidRequest,
                    "push type background must not carry an alert, sound or badge; remove them or use push type alert"
                )
            }
        case .alert:
            // §5: a silent push uses push type background.
            if notification.contentAvailable && !shows {
                throw APNSError(
                    .invalidRequest,
                    "this notification only sets content-available; send it with push type background and priority 5"
                )
            }
        default:
            break
        }
    }
}
