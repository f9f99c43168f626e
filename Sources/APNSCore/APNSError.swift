import PushErrors

/// The domain of the APNs modules' errors.
public enum APNSErrorDomain {}

/// The one error type of the APNs modules: a stable code, a sentence a person can act on,
/// and the underlying error when there is one.
public typealias APNSError = CodedError<APNSErrorDomain>

extension CodedError.Code where Domain == APNSErrorDomain {
    /// A device token that is empty, not hexadecimal, or of a length APNs does not use.
    public static var invalidDeviceToken: Self { Self(rawValue: "invalidDeviceToken") }
    /// A certificate, key or trust root that cannot be read or used for TLS.
    public static var invalidCredentials: Self { Self(rawValue: "invalidCredentials") }
    /// The private key is not the certificate's.
    public static var keyDoesNotMatchCertificate: Self { Self(rawValue: "keyDoesNotMatchCertificate") }
    /// The client certificate is past its `notAfter` date.
    public static var certificateExpired: Self { Self(rawValue: "certificateExpired") }
    /// The client certificate is before its `notBefore` date.
    public static var certificateNotYetValid: Self { Self(rawValue: "certificateNotYetValid") }
    /// The certificate does not carry the APNs environment it is used for.
    public static var wrongEnvironment: Self { Self(rawValue: "wrongEnvironment") }
    /// A setting a client cannot run with; the sentence names it.
    public static var invalidConfiguration: Self { Self(rawValue: "invalidConfiguration") }
    /// Bytes from a gateway or the feedback service that are no frame of the protocol.
    public static var malformedFrame: Self { Self(rawValue: "malformedFrame") }
    /// A connection could not be opened, or closed before it was of use.
    public static var connectionFailed: Self { Self(rawValue: "connectionFailed") }
    /// The client was shutting down or shut down when it was asked to send.
    public static var shutDown: Self { Self(rawValue: "shutDown") }
    /// An answer did not come in time.
    public static var timeout: Self { Self(rawValue: "timeout") }
    /// An error response named a notification that is not in the connection's sent cache
    /// (§1.5.2): what the cache held is resent and marked as possible duplicates.
    public static var cacheInconsistency: Self { Self(rawValue: "cacheInconsistency") }
    /// The gateway answered an error later than the confirmation window; the window widens.
    public static var slowGateway: Self { Self(rawValue: "slowGateway") }
    /// The proxy answered the `CONNECT` with something other than 2xx (407, 403, …).
    public static var proxyRefused: Self { Self(rawValue: "proxyRefused") }
    /// The proxy could not be reached, or closed before answering the `CONNECT`.
    public static var proxyUnreachable: Self { Self(rawValue: "proxyUnreachable") }
}
