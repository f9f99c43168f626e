/// The one error type of the APNs modules: a stable code, a sentence a person can act on,
/// and the underlying error when there is one.
public struct APNSError: Error, Sendable, CustomStringConvertible {
    public struct Code: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let invalidDeviceToken = Code(rawValue: "invalidDeviceToken")
        public static let invalidCredentials = Code(rawValue: "invalidCredentials")
        public static let keyDoesNotMatchCertificate = Code(rawValue: "keyDoesNotMatchCertificate")
        public static let certificateExpired = Code(rawValue: "certificateExpired")
        public static let certificateNotYetValid = Code(rawValue: "certificateNotYetValid")
        public static let wrongEnvironment = Code(rawValue: "wrongEnvironment")
        public static let invalidConfiguration = Code(rawValue: "invalidConfiguration")
        public static let malformedFrame = Code(rawValue: "malformedFrame")
        public static let connectionFailed = Code(rawValue: "connectionFailed")
        public static let shutDown = Code(rawValue: "shutDown")
        public static let timeout = Code(rawValue: "timeout")
        public static let cacheInconsistency = Code(rawValue: "cacheInconsistency")
        public static let slowGateway = Code(rawValue: "slowGateway")
        /// The proxy answered the `CONNECT` with something other than 2xx (407, 403, …).
        public static let proxyRefused = Code(rawValue: "proxyRefused")
        /// The proxy could not be reached, or closed before answering the `CONNECT`.
        public static let proxyUnreachable = Code(rawValue: "proxyUnreachable")
    }

    public var code: Code
    public var message: String
    public var underlying: (any Error & Sendable)?

    public init(_ code: Code, _ message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String {
        if let underlying {
            return "\(message) (\(underlying))"
        }
        return message
    }
}
