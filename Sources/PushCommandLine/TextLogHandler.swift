import Foundation
import Logging

/// Writes one line of plain text per log record (`worker.logFormat: text`):
/// `2026-05-01T12:00:00.000Z warning apn-worker: app=com.example.app worker=w1 [PushWorker] Rejected job …`.
///
/// Every part of the line that a message can carry from outside (a job id, a reason, an error
/// from a peer) is written with its control characters escaped (``escaped(_:)``): a line break
/// as `\n`, a carriage return as `\r`, a tab as `\t`, others as `\u{1b}`. So a record is always
/// exactly one line, and a job whose id holds a line break cannot forge the lines after it.
/// The escaping is done here, for the message, the metadata keys and values, the label and the
/// source alike, so that no call site can forget it.
public struct TextLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    private let label: String
    private let write: @Sendable (String) -> Void

    /// A handler writing to standard error.
    public init(label: String, level: Logger.Level = .info) {
        self.init(label: label, level: level, write: Self.standardError)
    }

    /// A handler passing each line, with its line break, to `write`.
    public init(label: String, level: Logger.Level = .info, write: @escaping @Sendable (String) -> Void) {
        self.label = label
        self.logLevel = level
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        var line = Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true))
        line += " \(event.level.rawValue) \(Self.escaped(label)):"
        for key in merged.keys.sorted() {
            line += " \(Self.escaped(key))=\(Self.escaped("\(merged[key]!)"))"
        }
        line += " [\(Self.escaped(event.source))] \(Self.escaped(event.message.description))\n"
        write(line)
    }

    /// `text` with its control characters escaped: `\n`, `\r` and `\t` as such, the other C0
    /// and C1 controls, DEL and the Unicode line and paragraph separators as `\u{…}` in hex.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var result = ""
        result.unicodeScalars.reserveCapacity(text.unicodeScalars.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where isControl(scalar): result += "\\u{\(String(scalar.value, radix: 16))}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029: true
        default: false
        }
    }

    private static let lock = NSLock()

    /// Writes `line` to standard error, one record at a time.
    @Sendable private static func standardError(_ line: String) {
        lock.lock()
        defer { lock.unlock() }
        FileHandle.standardError.write(Data(line.utf8))
    }
}
