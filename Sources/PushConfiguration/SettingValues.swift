import Foundation

/// A value for one setting together with where it was set, for error messages.
struct SettingValue {
    /// The dotted path in the config file, the environment variable or the flag.
    var label: String
    var node: ConfigNode

    /// A short description of the value for error messages.
    var shown: String { node.shown }

    /// The scalar's text, trimmed of white space when it came from a variable or flag, and
    /// its kind; `nil` for a list or mapping.
    private var scalar: (text: String, kind: ConfigScalar.Kind)? {
        guard case .scalar(let scalar) = node else { return nil }
        let text = scalar.kind == .text ? scalar.text.trimmingCharacters(in: .whitespacesAndNewlines) : scalar.text
        return (text, scalar.kind)
    }

    /// The text of a setting read as a boolean or a choice: a string, or a boolean.
    fileprivate var word: String? {
        guard let scalar, scalar.kind != .integer, scalar.kind != .float else { return nil }
        return scalar.text
    }

    /// The whole number written, YAML's ways for the file's integers, plain decimal for text.
    fileprivate var integer: Int? {
        guard let (text, kind) = scalar else { return nil }
        switch kind {
        case .integer: return SettingParsing.yamlInteger(text)
        case .string: return SettingParsing.decimalInteger(text.trimmingCharacters(in: .whitespaces))
        case .text: return SettingParsing.decimalInteger(text)
        case .float, .boolean: return nil
        }
    }
}

/// Allowed range of a whole-number setting, with its wording for error messages.
struct IntegerRule {
    var range: ClosedRange<Int>
    var wording: String

    /// `min...max`: "a whole number from MIN to MAX".
    static func from(_ min: Int, to max: Int) -> IntegerRule {
        IntegerRule(range: min...max, wording: "a whole number from \(min) to \(max)")
    }

    /// `min...`: "a whole number of at least MIN".
    static func atLeast(_ min: Int) -> IntegerRule {
        IntegerRule(range: min...Int.max, wording: "a whole number of at least \(min)")
    }

    /// `0...`: "0 (unlimited) or a larger whole number".
    static let unlimitedOrMore = IntegerRule(
        range: 0...Int.max,
        wording: "0 (unlimited) or a larger whole number"
    )
}

/// Typed readings of ``SettingValue``s; each throws a one-sentence error naming the setting.
enum SettingParsing {
    static func integer(_ value: SettingValue, _ rule: IntegerRule) throws(ConfigurationError) -> Int {
        guard let parsed = value.integer, rule.range.contains(parsed) else {
            throw ConfigurationError("\(value.label) must be \(rule.wording), not \(value.shown).")
        }
        return parsed
    }

    /// A string; file scalars of any type are taken as written (`id: 0123` is "0123").
    static func string(_ value: SettingValue, allowEmpty: Bool = false) throws(ConfigurationError) -> String {
        guard case .scalar(let scalar) = value.node else {
            throw ConfigurationError("\(value.label) must be text, not \(value.shown).")
        }
        let text = scalar.text
        if !allowEmpty && text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            throw ConfigurationError("\(value.label) must not be empty.")
        }
        return text
    }

    static func boolean(_ value: SettingValue) throws(ConfigurationError) -> Bool {
        switch value.word?.lowercased() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        default: throw ConfigurationError("\(value.label) must be true or false, not \(value.shown).")
        }
    }

    /// One of an enumeration's raw values, matched without regard to case.
    static func choice<Choice: RawRepresentable & CaseIterable>(
        _ value: SettingValue,
        _ type: Choice.Type = Choice.self
    ) throws(ConfigurationError) -> Choice where Choice.RawValue == String {
        let allowed = Choice.allCases.map(\.rawValue)
        let wording =
            allowed.count == 2
            ? "\(allowed[0]) or \(allowed[1])"
            : "one of " + allowed.joined(separator: ", ")
        guard let text = value.word, let choice = Choice.allCases.first(where: { $0.rawValue == text.lowercased() })
        else {
            throw ConfigurationError("\(value.label) must be \(wording), not \(value.shown).")
        }
        return choice
    }

    /// `host[:port]` (IPv6 hosts in brackets); the port defaults to `defaultPort`.
    static func hostPort(
        _ value: SettingValue,
        defaultPort: Int,
        allowPortZero: Bool = false
    ) throws(ConfigurationError) -> WorkerConfiguration.HostPort {
        let text = try string(value)
        func invalid() -> ConfigurationError {
            ConfigurationError(
                "\(value.label) must be host:port with a port from \(allowPortZero ? 0 : 1) to 65535 "
                    + "(an IPv6 address in brackets), not \(value.shown)."
            )
        }
        var host: Substring
        var portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw invalid() }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw invalid() }
                portText = after.dropFirst()
            }
        } else {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { throw invalid() }
            host = parts[0]
            portText = parts.count == 2 ? parts[1] : nil
        }
        if host.isEmpty || host.contains(where: { $0.isWhitespace || "/@[]".contains($0) }) {
            throw invalid()
        }
        var port = defaultPort
        if let portText {
            guard let number = decimalInteger(String(portText)), portText.first != "+",
                portText.first != "-", ((allowPortZero ? 0 : 1)...65535).contains(number)
            else { throw invalid() }
            port = number
        }
        return WorkerConfiguration.HostPort(host: String(host), port: port)
    }

    /// A plain decimal integer with an optional sign.
    static func decimalInteger(_ text: String) -> Int? {
        guard let first = text.first else { return nil }
        let digits = (first == "+" || first == "-") ? text.dropFirst() : Substring(text)
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(text)
    }

    /// An integer as YAML writes it: decimal, `0x`, `0o` or `0b`, with optional `_` separators.
    static func yamlInteger(_ text: String) -> Int? {
        var body = Substring(text.replacingOccurrences(of: "_", with: ""))
        var negative = false
        if let sign = body.first, sign == "+" || sign == "-" {
            negative = sign == "-"
            body = body.dropFirst()
        }
        var radix = 10
        switch body.prefix(2).lowercased() {
        case "0x": radix = 16
        case "0o": radix = 8
        case "0b": radix = 2
        default: break
        }
        if radix != 10 { body = body.dropFirst(2) }
        guard let first = body.first, first != "+", first != "-",
            let magnitude = Int(body, radix: radix)
        else { return nil }
        return negative ? -magnitude : magnitude
    }
}
