/// A status code from the binary API's error-response packet (§1.4), plus the codes the
/// client itself assigns to notifications that never got a verdict from Apple.
///
/// Unknown values are kept as they arrived.
public struct APNSStatus: Sendable, Hashable, CustomStringConvertible {
    public let rawValue: Int

    public init(rawValue: Int) { self.rawValue = rawValue }

    // §1.4: Apple's table.
    public static let noErrors = APNSStatus(rawValue: 0)
    public static let processingError = APNSStatus(rawValue: 1)
    public static let missingDeviceToken = APNSStatus(rawValue: 2)
    public static let missingTopic = APNSStatus(rawValue: 3)
    public static let missingPayload = APNSStatus(rawValue: 4)
    public static let invalidTokenSize = APNSStatus(rawValue: 5)
    public static let invalidTopicSize = APNSStatus(rawValue: 6)
    public static let invalidPayloadSize = APNSStatus(rawValue: 7)
    public static let invalidToken = APNSStatus(rawValue: 8)
    public static let shutdown = APNSStatus(rawValue: 10)
    public static let protocolError = APNSStatus(rawValue: 128)
    public static let unknown = APNSStatus(rawValue: 255)

    // The client's own codes (outside the byte range Apple uses).
    /// The notification could not be compiled into a valid payload.
    public static let invalidPayload = APNSStatus(rawValue: 512)
    /// The notification was resent as often as its `retryLimit` allows.
    public static let retryLimitExceeded = APNSStatus(rawValue: 513)
    /// The notification was on a connection that closed without an error packet and
    /// `resendOnUnknown` is off: Apple may or may not have accepted it.
    public static let indeterminate = APNSStatus(rawValue: 514)
    /// No connection to the gateway could be made within `connectionRetryLimit` attempts.
    public static let connectionFailed = APNSStatus(rawValue: 515)
    /// The client was shut down before the notification could be sent.
    public static let shutDown = APNSStatus(rawValue: 516)

    // The worker's codes, for notifications it decided not to send.
    /// The job is readable but invalid (unknown app, a field with a bad value).
    public static let invalidJob = APNSStatus(rawValue: 517)
    /// This token of the job is not a valid hex device token.
    public static let malformedToken = APNSStatus(rawValue: 518)
    /// Apple reported the token unregistered (feedback or status 8) after the job's `registeredAt`.
    public static let unregistered = APNSStatus(rawValue: 519)
    /// The device exceeded its per-hour notification limit.
    public static let rateLimited = APNSStatus(rawValue: 520)
    /// The job's `staleAfter` passed before the notification could be sent (the gateway was
    /// unreachable until then): it was not sent.
    public static let expired = APNSStatus(rawValue: 521)
    /// A Live Activity update that a newer one for the same activity replaced before it was
    /// sent (latest wins): it was not sent.
    public static let superseded = APNSStatus(rawValue: 522)

    // HTTP/2 provider API statuses (§3.4); the reason string travels beside them.
    public static let badRequest = APNSStatus(rawValue: 400)
    public static let forbidden = APNSStatus(rawValue: 403)
    public static let gone = APNSStatus(rawValue: 410)
    public static let tooManyRequests = APNSStatus(rawValue: 429)

    /// True for codes that came from Apple (the binary error-response table, or an HTTP/2
    /// status) rather than from the client or the worker (512–522, which no HTTP status of
    /// §3.4 uses).
    public var isFromApple: Bool {
        (0...255).contains(rawValue) || (400...511).contains(rawValue) || (523...599).contains(rawValue)
    }

    /// A short, stable name (`"invalidToken"`, `"shutdown"`, ...).
    public var name: String {
        switch rawValue {
        case 0: "noErrors"
        case 1: "processingError"
        case 2: "missingDeviceToken"
        case 3: "missingTopic"
        case 4: "missingPayload"
        case 5: "invalidTokenSize"
        case 6: "invalidTopicSize"
        case 7: "invalidPayloadSize"
        case 8: "invalidToken"
        case 10: "shutdown"
        case 128: "protocolError"
        case 255: "unknown"
        case 512: "invalidPayload"
        case 513: "retryLimitExceeded"
        case 514: "indeterminate"
        case 515: "connectionFailed"
        case 516: "shutDown"
        case 517: "invalidJob"
        case 518: "malformedToken"
        case 519: "unregistered"
        case 520: "rateLimited"
        case 521: "expired"
        case 522: "superseded"
        case 400: "badRequest"
        case 403: "forbidden"
        case 404: "notFound"
        case 405: "methodNotAllowed"
        case 410: "gone"
        case 413: "payloadTooLarge"
        case 429: "tooManyRequests"
        case 500: "internalServerError"
        case 503: "serviceUnavailable"
        default: "status\(rawValue)"
        }
    }

    /// Apple's wording for the code (§1.4), or the client's.
    public var reason: String {
        switch rawValue {
        case 0: "No errors encountered"
        case 1: "Processing error"
        case 2: "Missing device token"
        case 3: "Missing topic"
        case 4: "Missing payload"
        case 5: "Invalid token size"
        case 6: "Invalid topic size"
        case 7: "Invalid payload size"
        case 8: "Invalid token"
        case 10: "Shutdown"
        case 128: "Protocol error"
        case 255: "None (unknown)"
        case 512: "Invalid payload"
        case 513: "Retry limit exceeded"
        case 514: "Indeterminate: the connection closed without an error packet"
        case 515: "Could not connect to the gateway"
        case 516: "Client shut down before sending"
        case 517: "Invalid job"
        case 518: "Malformed device token"
        case 519: "Device token unregistered"
        case 520: "Device rate limit exceeded"
        case 521: "Stale: the job's staleAfter passed before it could be sent"
        case 522: "Superseded: a newer update of the same Live Activity replaced it"
        case 400: "Bad request"
        case 403: "Certificate or provider token error"
        case 404: "Bad path"
        case 405: "Method not allowed"
        case 410: "Device token no longer active for the topic"
        case 413: "Payload too large"
        case 429: "Too many requests"
        case 500: "Internal server error"
        case 503: "Service unavailable"
        default: "Undocumented status \(rawValue)"
        }
    }

    public var description: String { "\(rawValue) (\(reason))" }
}
