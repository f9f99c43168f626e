import APNSCore
import Foundation
import Logging

/// Writes one JSON object per log record to standard error:
/// `{"ts":"…","level":"info","label":"apn-worker","message":"…",<metadata>}`.
///
/// librdkafka's own lines arrive here too (label `rdkafka`, with `kafka.facility` and
/// `kafka.client`), so that standard error holds nothing but JSON lines.
struct JSONLogHandler: LogHandler {
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level
    private let label: String
    private static let lock = NSLock()

    init(label: String, level: Logger.Level = .info) {
        self.label = label
        self.logLevel = level
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields: [(String, JSONValue)] = [
            ("ts", .string(Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true)))),
            ("level", .string(event.level.rawValue)),
            ("label", .string(label)),
            ("message", .string(event.message.description)),
        ]
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for key in merged.keys.sorted() {
            fields.append((key, .string("\(merged[key]!)")))
        }
        var out: [UInt8] = [UInt8(ascii: "{")]
        for (index, (key, value)) in fields.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONValue.string(key).write(into: &out)
            out.append(UInt8(ascii: ":"))
            value.write(into: &out)
        }
        out += Array("}\n".utf8)
        Self.lock.lock()
        defer { Self.lock.unlock() }
        FileHandle.standardError.write(Data(out))
    }
}
