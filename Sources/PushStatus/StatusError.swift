/// A failure of the status server or of its client, with a stable code and a sentence a person
/// can act on.
public struct StatusError: Error, Sendable, CustomStringConvertible {
    public struct Code: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The server could not listen on its address (in use, not an address of this host).
        public static let bindFailed = Code(rawValue: "bindFailed")
        /// `run()` was called on a server that is running or has run.
        public static let alreadyRunning = Code(rawValue: "alreadyRunning")
        /// The server stopped (or never started) before it was listening.
        public static let notListening = Code(rawValue: "notListening")
        /// The client could not connect: refused, unknown host, unreachable network.
        public static let unreachable = Code(rawValue: "unreachable")
        /// The client had no complete answer within its timeout.
        public static let timedOut = Code(rawValue: "timedOut")
        /// The answer was not what a status server sends: an error status, too large, not JSON
        /// of a worker's status, or the connection closed before the answer ended.
        public static let badResponse = Code(rawValue: "badResponse")
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
