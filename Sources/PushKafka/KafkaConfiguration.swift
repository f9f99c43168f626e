import CRdKafka
import Logging

/// librdkafka configuration properties (see librdkafka's CONFIGURATION.md) with
/// typed accessors for the common ones.
///
/// Properties are only validated when a client is created: an unknown property
/// or invalid value makes `KafkaProducer`/`KafkaConsumer` init throw a
/// `KafkaError` naming the property.
///
/// Two configurations are equal when their properties are; the logger does not count.
public struct KafkaConfiguration: Sendable, Hashable {
    public var properties: [String: String]
    /// Where librdkafka's own log lines go, with `kafka.facility` and `kafka.client` metadata,
    /// instead of librdkafka's `%4|…|rdkafka#…` lines. `nil`: ``defaultLogger``.
    public var logger: Logger?

    /// The label librdkafka's lines are logged under.
    public static let loggerLabel = "rdkafka"

    /// A logger that writes every line librdkafka emits (its `log_level` property filters) to
    /// standard error, where librdkafka would have written them, whatever the logging system's
    /// bootstrap: a process that bootstraps it passes its own ``logger``.
    public static var defaultLogger: Logger {
        Logger(label: loggerLabel) { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .trace
            return handler
        }
    }

    public init(_ properties: [String: String] = [:], logger: Logger? = nil) {
        self.properties = properties
        self.logger = logger
    }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.properties == rhs.properties }

    public func hash(into hasher: inout Hasher) { hasher.combine(properties) }

    public subscript(key: String) -> String? {
        get { properties[key] }
        set { properties[key] = newValue }
    }

    /// `bootstrap.servers`: comma-separated `host:port` list.
    public var bootstrapServers: String? {
        get { properties["bootstrap.servers"] }
        set { properties["bootstrap.servers"] = newValue }
    }

    /// `client.id`, shown in broker logs and metrics.
    public var clientId: String? {
        get { properties["client.id"] }
        set { properties["client.id"] = newValue }
    }

    /// `group.id`: the consumer group; required by `KafkaConsumer`.
    public var groupId: String? {
        get { properties["group.id"] }
        set { properties["group.id"] = newValue }
    }

    /// `auto.offset.reset` (`earliest`, `latest`, `error`): where a consumer starts
    /// on a partition without a committed offset. librdkafka's default is `latest`.
    public var autoOffsetReset: String? {
        get { properties["auto.offset.reset"] }
        set { properties["auto.offset.reset"] = newValue }
    }

    /// `session.timeout.ms`: how long the group coordinator waits for a silent consumer.
    public var sessionTimeout: Duration? {
        get { properties["session.timeout.ms"].flatMap(Int64.init).map { .milliseconds($0) } }
        set { properties["session.timeout.ms"] = newValue.map { String($0.milliseconds) } }
    }

    /// `message.timeout.ms`: how long a produced message may wait for acknowledgement
    /// (including retries) before its send fails with `_MSG_TIMED_OUT`.
    public var messageTimeout: Duration? {
        get { properties["message.timeout.ms"].flatMap(Int64.init).map { .milliseconds($0) } }
        set { properties["message.timeout.ms"] = newValue.map { String($0.milliseconds) } }
    }

    /// The logger a new client sends librdkafka's lines to.
    var clientLogger: Logger { logger ?? Self.defaultLogger }

    /// Builds an `rd_kafka_conf_t` from `defaults` overridden by `properties`, with librdkafka's
    /// log lines routed to swift-log (through the ``ClientContext`` the caller sets as opaque).
    /// The caller owns the result (`rd_kafka_new` takes it over on success).
    package func makeConf(defaults: [String: String]) throws(KafkaError) -> OpaquePointer {
        let conf = rd_kafka_conf_new()!
        rd_kafka_conf_set_log_cb(conf, logCallback)
        let merged = defaults.merging(properties) { _, user in user }
        for (name, value) in merged.sorted(by: { $0.key < $1.key }) {
            var errstr = [CChar](repeating: 0, count: 512)
            let result = rd_kafka_conf_set(conf, name, value, &errstr, errstr.count)
            guard result == RD_KAFKA_CONF_OK else {
                rd_kafka_conf_destroy(conf)
                let detail = errstr.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
                throw Self.refusal(name: name, value: value, unknown: result == RD_KAFKA_CONF_UNKNOWN, detail: detail)
            }
        }
        return conf
    }
}

extension KafkaConfiguration {
    /// The error for a property librdkafka refused: its name, never its value, which may be a
    /// secret (`sasl.password`, `ssl.key.password`), misspelt names included (`sasl.pasword`).
    /// librdkafka's own sentence is kept with the value masked wherever it quotes it, and left
    /// out when a part of a long value still shows in it (a value cut short in the sentence).
    static func refusal(name: String, value: String, unknown: Bool, detail: String) -> KafkaError {
        var reason = masking(value, in: detail)
        if value.count >= 8, reason.contains(value.prefix(8)) {
            reason = "librdkafka's sentence repeats the value, so it is not shown either"
        }
        let message =
            unknown
            ? "Unknown configuration property '\(name)' (its value is not shown): \(reason)"
            : "Invalid value for configuration property '\(name)' (not shown): \(reason)"
        return KafkaError(RD_KAFKA_RESP_ERR__INVALID_ARG, message)
    }

    /// `text` with every whole-word occurrence of `value` replaced by `***`: one that neither
    /// letters, digits nor `.`, `_` or `-` adjoin, so that a short value (`1`) does not mask the
    /// digits of a range (`1..1000`) it is part of.
    static func masking(_ value: String, in text: String) -> String {
        guard !value.isEmpty else { return text }
        func isWordCharacter(_ character: Character?) -> Bool {
            guard let character else { return false }
            return character.isLetter || character.isNumber || "._-".contains(character)
        }
        var result = ""
        var rest = text[...]
        while let found = rest.firstRange(of: value) {
            let before = found.lowerBound == text.startIndex ? nil : text[text.index(before: found.lowerBound)]
            let after = found.upperBound == text.endIndex ? nil : text[found.upperBound]
            let whole =
                !(isWordCharacter(before) && isWordCharacter(value.first))
                && !(isWordCharacter(after) && isWordCharacter(value.last))
            result += rest[..<found.lowerBound]
            result += whole ? "***" : String(rest[found])
            rest = rest[found.upperBound...]
        }
        return result + rest
    }
}

extension Duration {
    /// Whole milliseconds, truncated.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds &* 1000 &+ attoseconds / 1_000_000_000_000_000
    }

    /// Milliseconds clamped to librdkafka's `int` timeout range, never negative.
    var timeoutMilliseconds: Int32 { Int32(clamping: max(0, milliseconds)) }
}
