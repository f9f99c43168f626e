/// Why the configuration could not be loaded.
///
/// ``message`` is one sentence that names the setting by where it was set (the dotted path in
/// the config file, the environment variable or the flag) and says what is allowed. It never
/// contains a password.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String

    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}
