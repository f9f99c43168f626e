import APNSCore

extension APNSError.Code {
    /// A request would break one of the header or payload rules of the HTTP/2 API (§3.3, §5).
    public static let invalidRequest = APNSError.Code(rawValue: "invalidRequest")
    /// The payload could not be built or is not acceptable; `underlying` is the ``APNSPayloadError``.
    public static let invalidPayload = APNSError.Code(rawValue: "invalidPayload")
    /// Signing a provider token failed inside the crypto library.
    public static let signingFailed = APNSError.Code(rawValue: "signingFailed")
}
