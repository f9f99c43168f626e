import APNSCore
import PushErrors

extension CodedError.Code where Domain == APNSErrorDomain {
    /// A request would break one of the header or payload rules of the HTTP/2 API (§3.3, §5).
    public static var invalidRequest: Self { Self(rawValue: "invalidRequest") }
    /// The payload could not be built or is not acceptable; `underlying` is the ``APNSPayloadError``.
    public static var invalidPayload: Self { Self(rawValue: "invalidPayload") }
    /// Signing a provider token failed inside the crypto library.
    public static var signingFailed: Self { Self(rawValue: "signingFailed") }
}
