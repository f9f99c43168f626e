import Foundation

/// When APNs may stop trying to deliver a notification (§1.2 "Expiry", frame item 4).
public enum APNSExpiry: Sendable, Hashable {
    /// Wire value 0: APNs does not store the notification at all (§1.2).
    case immediately
    /// An absolute UNIX time in seconds (UTC).
    case at(unixSeconds: UInt32)
    /// Relative to the moment the notification is compiled into a frame or request.
    case after(Duration)

    /// The wire value: 0 for ``immediately``; for ``after(_:)``, `now` plus the duration
    /// rounded down to whole seconds and clamped to `1...UInt32.max` (never 0, which would
    /// change the meaning to "do not store").
    public func unixSeconds(now: Date) -> UInt32 {
        switch self {
        case .immediately:
            return 0
        case .at(let seconds):
            return seconds
        case .after(let duration):
            let (seconds, attoseconds) = duration.components
            let total = (now.timeIntervalSince1970 + Double(seconds) + Double(attoseconds) / 1e18).rounded(.down)
            guard total.isFinite, total >= 1 else { return 1 }
            return total >= Double(UInt32.max) ? .max : UInt32(total)
        }
    }

    /// Parses the configuration forms: `"0"` (do not store), a UNIX time such as
    /// `"1700000000"`, or a relative time: a whole number followed by `s`, `m`, `h`, `d`
    /// or `w` (`"30s"`, `"15m"`, `"1h"`, `"1d"`, `"2w"`). Surrounding whitespace is ignored.
    /// Throws `invalidExpiry` for anything else.
    public init(parsing text: String) throws(APNSPayloadError) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let invalid = APNSPayloadError(
            .invalidExpiry,
            "expiry \"\(text.abbreviated())\" is not valid; use 0 (do not store), a UNIX time in seconds such as 1700000000, "
                + "or a number followed by s, m, h, d or w such as 30s, 15m, 1h, 1d or 2w"
        )
        var digits = Substring(trimmed)
        var unit: UInt64? = nil
        switch digits.last {
        case "s": unit = 1
        case "m": unit = 60
        case "h": unit = 3600
        case "d": unit = 86_400
        case "w": unit = 604_800
        default: break
        }
        if unit != nil { digits = digits.dropLast() }
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let value = UInt64(digits)
        else { throw invalid }

        if let unit {
            let (seconds, overflow) = value.multipliedReportingOverflow(by: unit)
            guard !overflow, seconds <= UInt64(UInt32.max) else {
                throw APNSPayloadError(
                    .invalidExpiry,
                    "expiry \"\(text.abbreviated())\" is too far in the future; relative expiries must be under \(UInt32.max) seconds"
                )
            }
            self = .after(.seconds(Int64(seconds)))
        } else if value == 0 {
            self = .immediately
        } else {
            guard let seconds = UInt32(exactly: value) else {
                throw APNSPayloadError(
                    .invalidExpiry,
                    "expiry \"\(text)\" does not fit the 32-bit UNIX time field (maximum \(UInt32.max))"
                )
            }
            self = .at(unixSeconds: seconds)
        }
    }
}
