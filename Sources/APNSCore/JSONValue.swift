/// A JSON value as used in APNs payloads (§5).
///
/// Integers that fit in 64 bits are kept apart from doubles so that flags such as
/// `"content-available":1` and badges serialize as integer literals (§5 check 6).
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

// MARK: - Serialization

extension JSONValue {
    /// Compact JSON (no whitespace) with object keys in sorted order, so equal values
    /// always produce identical bytes.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(into: &out)
        return out
    }

    /// Appends the compact JSON form of `self` to `out`.
    ///
    /// Strings are escaped minimally: `"`, `\` and control characters below U+0020 only.
    /// `/` and non-ASCII characters are written as raw UTF-8, as APNs expects (§5 check 8).
    /// Non-finite doubles have no JSON form and are written as `null`; integral doubles
    /// keep a fractional part (`1.0`) so they parse back as doubles.
    public func write(into out: inout [UInt8]) {
        switch self {
        case .null:
            out.append(contentsOf: "null".utf8)
        case .bool(let b):
            out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i):
            JSONValue.writeInt(i, into: &out)
        case .double(let d):
            JSONValue.writeDouble(d, into: &out)
        case .string(let s):
            JSONValue.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (n, item) in items.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (n, key) in members.keys.sorted().enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                members[key]!.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func writeInt(_ value: Int64, into out: inout [UInt8]) {
        DecimalText.append(value, to: &out)
    }

    static func writeDouble(_ value: Double, into out: inout [UInt8]) {
        guard value.isFinite else {
            out.append(contentsOf: "null".utf8)
            return
        }
        // Swift's description is the shortest text that round-trips and is valid JSON
        // for finite values ("1.0", "0.1", "1e-07", "1e+16").
        out.append(contentsOf: value.description.utf8)
    }

    /// Writes `string` as a JSON string literal with minimal escaping.
    static func writeString(_ string: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var s = string
        s.withUTF8 { bytes in
            var runStart = 0
            var i = 0
            let raw = UnsafeRawBufferPointer(bytes)
            while i < bytes.count {
                // Eight bytes at a time while none needs escaping (most text).
                if i + 8 <= bytes.count && !needsEscape(raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) {
                    i += 8
                    continue
                }
                let b = bytes[i]
                if b >= 0x20 && b != UInt8(ascii: "\"") && b != UInt8(ascii: "\\") {
                    i += 1
                    continue
                }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i]))
                appendEscape(for: b, into: &out)
                i += 1
                runStart = i
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Whether any of the eight bytes of `word` is a control character, `"` or `\\` (the bytes
    /// a JSON string escapes). Bytes of 0x80 and above never match.
    @inline(__always)
    static func needsEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        func hasZeroByte(_ v: UInt64) -> Bool { (v &- ones) & ~v & highs != 0 }
        let control = (word &- ones &* 0x20) & ~word & highs != 0
        return control || hasZeroByte(word ^ (ones &* 0x22)) || hasZeroByte(word ^ (ones &* 0x5C))
    }

    /// Number of bytes `byte` occupies inside a serialized JSON string.
    @inline(__always)
    static func escapedLength(of byte: UInt8) -> Int {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x08, 0x09, 0x0A, 0x0C, 0x0D: return 2
        case 0..<0x20: return 6
        default: return 1
        }
    }

    private static func appendEscape(for byte: UInt8, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
        case 0x08: out.append(UInt8(ascii: "b"))
        case 0x09: out.append(UInt8(ascii: "t"))
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0C: out.append(UInt8(ascii: "f"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        default:
            // Only bytes below 0x20 get here: "\u00" then two lowercase hex digits.
            let low = byte & 0x0F
            out.append(contentsOf: "u00".utf8)
            out.append(UInt8(ascii: "0") &+ (byte >> 4))
            out.append(low < 10 ? UInt8(ascii: "0") &+ low : UInt8(ascii: "a") &+ (low &- 10))
        }
    }
}

// MARK: - Accessors

extension JSONValue {
    /// The member named `key` when `self` is an object; otherwise `nil`.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The element at `index` when `self` is an array and the index is in range; otherwise `nil`.
    public subscript(index: Int) -> JSONValue? {
        if case .array(let items) = self, items.indices.contains(index) { return items[index] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The integer value; doubles are accepted when they are integral and fit in `Int64`.
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d): return Int64(exactly: d)
        default: return nil
        }
    }

    /// The numeric value as a double (integers are converted).
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let items) = self { return items }
        return nil
    }

    public var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    public var isNull: Bool { self == .null }
}

// MARK: - Literals

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// Later duplicates of a key replace earlier ones.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}
