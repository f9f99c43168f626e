import CRdKafka
import Logging

/// What librdkafka's callbacks of one client need; the handle's opaque points at it.
///
/// It must outlive the handle: it is released only after `rd_kafka_destroy` returned,
/// because librdkafka logs from its own threads until then.
final class ClientContext: Sendable {
    /// Receives librdkafka's own log lines (see ``KafkaConfiguration/logger``).
    let logger: Logger
    /// The consumer's rebalance state; `nil` for a producer.
    let consumer: ConsumerContext?

    init(logger: Logger, consumer: ConsumerContext? = nil) {
        self.logger = logger
        self.consumer = consumer
    }

    /// The context behind a handle's opaque, if the handle has one.
    static func of(_ rk: OpaquePointer?) -> ClientContext? {
        guard let rk, let opaque = rd_kafka_opaque(rk) else { return nil }
        return Unmanaged<ClientContext>.fromOpaque(opaque).takeUnretainedValue()
    }
}

extension Logger.Level {
    /// The swift-log level of a syslog severity, as librdkafka passes them to `log_cb`:
    /// 0-2 (emergency, alert, critical) are critical, 3 error, 4 warning, 5 notice, 6 info,
    /// 7 (and anything else) debug.
    init(syslogSeverity severity: Int32) {
        switch severity {
        case ...2: self = .critical
        case 3: self = .error
        case 4: self = .warning
        case 5: self = .notice
        case 6: self = .info
        default: self = .debug
        }
    }
}

/// librdkafka's `log_cb`: called on librdkafka's own threads for every line it would
/// otherwise print to standard error as `%4|…|rdkafka#…`.
let logCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
    rk,
    severity,
    facility,
    line in
    let logger = ClientContext.of(rk)?.logger ?? KafkaConfiguration.defaultLogger
    let level = Logger.Level(syslogSeverity: severity)
    guard logger.logLevel <= level else { return }
    var metadata: Logger.Metadata = [:]
    if let facility { metadata["kafka.facility"] = .string(String(cString: facility)) }
    if let rk, let name = rd_kafka_name(rk) { metadata["kafka.client"] = .string(String(cString: name)) }
    logger.log(level: level, "\(line.map { String(cString: $0) } ?? "")", metadata: metadata)
}
