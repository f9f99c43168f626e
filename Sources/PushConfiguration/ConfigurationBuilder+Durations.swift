import APNSCore

/// The durations of an app's section that are written as a number and a unit.
extension ConfigurationBuilder {
    /// An app's `defaultExpiry`: `0` (do not store) or a whole number of s, m, h, d or w.
    static func defaultExpiry(_ value: SettingValue) throws(ConfigurationError) -> APNSExpiry {
        let text = try SettingParsing.string(value)
        switch try? APNSExpiry(parsing: text) {
        case .immediately?: return .immediately
        case .after(let duration)? where duration > .zero: return .after(duration)
        default:
            throw ConfigurationError(
                "\(value.label) must be 0 (do not store) or a time counted from sending: a whole number followed by "
                    + "s, m, h, d or w such as \"1h\" or \"1d\", not \(value.shown)."
            )
        }
    }

    /// An app's `staleAfter`: a whole number of seconds, or a whole number followed by s, m, h,
    /// d or w, up to a year.
    static func staleAfter(_ value: SettingValue) throws(ConfigurationError) -> Duration {
        let sentence = ConfigurationError(
            "\(value.label) must be a time counted from when a job was produced: a whole number of seconds, or a "
                + "whole number followed by s, m, h, d or w such as \"10m\" or \"1h\", not \(value.shown)."
        )
        let text = (try? SettingParsing.string(value)) ?? ""
        if let seconds = Int64(text), seconds > 0, seconds <= 31_536_000 { return .seconds(seconds) }
        guard case .after(let duration)? = try? APNSExpiry(parsing: text), duration > .zero,
            duration <= .seconds(31_536_000)
        else { throw sentence }
        return duration
    }
}
