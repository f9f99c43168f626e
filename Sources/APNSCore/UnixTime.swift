import Foundation

/// Times from outside the process (a Kafka timestamp, an APNs answer) as the code computes with
/// them: UNIX milliseconds in a range no clock leaves, so that no arithmetic on them overflows.
public enum UnixTime {
    /// The latest time taken: 9999-12-31T23:59:59.999Z.
    public static let latestMilliseconds: Int64 = 253_402_300_799_999

    /// Whether `milliseconds` is a time from 1970 to the end of 9999.
    public static func isPlausible(milliseconds: Int64) -> Bool {
        milliseconds >= 0 && milliseconds <= latestMilliseconds
    }

    /// Wall-clock milliseconds since the epoch, now: what stale times and result times count in.
    public static func nowMilliseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// Whole milliseconds of `milliseconds` when it is a time from 1970 to the end of 9999;
    /// `nil` for anything else (NaN, infinities, out of range).
    public static func milliseconds(_ milliseconds: Double) -> Int64? {
        guard milliseconds.isFinite, let whole = Int64(exactly: milliseconds.rounded()) else { return nil }
        return isPlausible(milliseconds: whole) ? whole : nil
    }
}

extension Date {
    /// Whole milliseconds since 1970, when this is a time from 1970 to the end of 9999.
    public var unixMilliseconds: Int64? { UnixTime.milliseconds(timeIntervalSince1970 * 1000) }
}
