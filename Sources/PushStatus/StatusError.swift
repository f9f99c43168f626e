import PushErrors

/// The domain of the status server's and its client's errors.
public enum StatusErrorDomain {}

/// A failure of the status server or of its client, with a stable code and a sentence a person
/// can act on.
public typealias StatusError = CodedError<StatusErrorDomain>

extension CodedError.Code where Domain == StatusErrorDomain {
    /// The server could not listen on its address (in use, not an address of this host).
    public static var bindFailed: Self { Self(rawValue: "bindFailed") }
    /// `run()` was called on a server that is running or has run.
    public static var alreadyRunning: Self { Self(rawValue: "alreadyRunning") }
    /// The server stopped (or never started) before it was listening.
    public static var notListening: Self { Self(rawValue: "notListening") }
    /// The client could not connect: refused, unknown host, unreachable network.
    public static var unreachable: Self { Self(rawValue: "unreachable") }
    /// The client had no complete answer within its timeout.
    public static var timedOut: Self { Self(rawValue: "timedOut") }
    /// The answer was not what a status server sends: an error status, too large, not JSON
    /// of a worker's status, or the connection closed before the answer ended.
    public static var badResponse: Self { Self(rawValue: "badResponse") }
}
