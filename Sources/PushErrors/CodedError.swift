/// An error with a stable code, a sentence a person can act on, and the underlying error when
/// there is one: the one error shape of the project's modules.
///
/// Each module names its errors by a domain of its own (``APNSError`` is
/// `CodedError<APNSErrorDomain>`), so that a code of one module cannot be written for another's
/// errors. A domain's codes are static members of `Code` in an extension constrained to it.
public struct CodedError<Domain>: Error, Sendable, CustomStringConvertible {
    /// A stable name for a kind of failure, for callers that handle one kind and for logs.
    public struct Code: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }
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
