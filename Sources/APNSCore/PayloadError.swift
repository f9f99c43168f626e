/// Why a notification could not be turned into a payload APNs would accept (§1.3, §5).
public struct APNSPayloadError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The payload is over the size limit (§1.3).
        case tooLarge
        /// ``APNSNotification/trim(toFit:)`` cannot make the payload fit.
        case cannotTrim
        /// The payload carries nothing: no `aps` fields and no custom keys (§5 check 1).
        case emptyPayload
        /// The priority is not allowed for the API in use (§1.2 item 5, §5 check 3).
        case invalidPriority
        /// Priority 10 with a payload whose only effect is `content-available` (§1.2 item 5, §5 check 4).
        case contentAvailableWithImmediatePriority
        /// A field has a value APNs does not accept.
        case invalidValue
        /// An MDM notification also sets `aps` fields or custom keys (§5).
        case mdmWithAPS
        /// An expiry string could not be parsed.
        case invalidExpiry
        /// A payload encoding other than UTF-8 was requested (§5 check 1).
        case unsupportedEncoding
    }

    public var code: Code
    /// One sentence a person can act on, including the relevant numbers.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
