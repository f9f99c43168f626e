/// Why a JSON text was rejected.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Zero-based byte offset of the first offending byte (the input length at end of input).
    public var offset: Int
    /// One sentence naming the offset and what was expected, e.g.
    /// "invalid JSON at byte 17: expected ',' or '}' after an object member".
    public var message: String

    public init(offset: Int, message: String) {
        self.offset = offset
        self.message = message
    }

    public var description: String { message }
}

extension JSONValue {
    /// Parses a complete JSON text (RFC 8259) from UTF-8 bytes.
    ///
    /// Strict: any value is allowed at the top level, but only JSON whitespace may follow it;
    /// strings must be valid UTF-8 (no overlong forms, surrogates or code points above
    /// U+10FFFF) with no raw control characters; `\u` escapes must pair surrogates;
    /// numbers follow the RFC grammar exactly (no leading zeros, `+`, `.5`, `1.`, `NaN`).
    /// Duplicate member names within one object are rejected, because receivers disagree
    /// on which value wins. Containers may nest at most `maxDepth` levels.
    ///
    /// Integers that fit in `Int64` become `.int`; other numbers become `.double`
    /// (numbers too large for a finite double are rejected).
    public static func parse<C: Collection>(
        _ bytes: C,
        maxDepth: Int = 64
    ) throws(JSONParseError) -> JSONValue where C.Element == UInt8 {
        let result = bytes.withContiguousStorageIfAvailable { buffer in
            parseBuffer(buffer, maxDepth: maxDepth)
        }
        if let result { return try result.get() }
        return try Array(bytes).withUnsafeBufferPointer { parseBuffer($0, maxDepth: maxDepth) }.get()
    }

    /// Parses a complete JSON text from a string; same rules as the byte-collection overload.
    public static func parse(_ string: String, maxDepth: Int = 64) throws(JSONParseError) -> JSONValue {
        try parse(string.utf8, maxDepth: maxDepth)
    }

    /// Parses a complete JSON text, by the rules of ``parse(_:maxDepth:)``, whose top level is
    /// expected to be an object: its members in document order, or `nil` when the text is valid
    /// JSON but not an object. The same texts are refused, with the same errors.
    ///
    /// No dictionary is built for the top level, so its member names are not hashed. Repeated
    /// names are found by comparison (with a set past 16 members), as `String` equality, which is
    /// what the dictionary's keys used.
    public static func parseObjectMembers(
        _ bytes: [UInt8],
        maxDepth: Int = 64
    ) throws(JSONParseError) -> [(key: String, value: JSONValue)]? {
        var members: [(key: String, value: JSONValue)] = []
        var names: Set<String>? = nil
        let isObject = try parseObjectMembers(bytes, maxDepth: maxDepth) { name, value in
            let key = String(decoding: name, as: UTF8.self)
            let repeated: Bool
            if names != nil {
                repeated = !names!.insert(key).inserted
            } else {
                repeated = members.contains { $0.key == key }
                if !repeated && members.count == 15 { names = Set(members.map(\.key) + [key]) }
            }
            if !repeated { members.append((key, value)) }
            return !repeated
        }
        return isObject ? members : nil
    }

    /// Parses a complete JSON text, by the rules of ``parse(_:maxDepth:)``, whose top level is
    /// expected to be an object, handing each member to `member` in document order: its name as
    /// UTF-8 with any escapes decoded (valid during the call only), and its value. `member`
    /// returns `false` when the name repeats an earlier one, which is refused as `parse` refuses
    /// it. Returns `false` when the text is valid JSON but not an object.
    ///
    /// For messages read member by member (a job): a name is matched as bytes, and no `String`
    /// is made of it.
    public static func parseObjectMembers(
        _ bytes: [UInt8],
        maxDepth: Int = 64,
        _ member: (UnsafeBufferPointer<UInt8>, JSONValue) -> Bool
    ) throws(JSONParseError) -> Bool {
        try bytes.withUnsafeBufferPointer { buffer in
            var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
            return Result { () throws(JSONParseError) -> Bool in try parser.parseTopLevelMembers(member) }
        }.get()
    }

    private static func parseBuffer(
        _ buffer: UnsafeBufferPointer<UInt8>,
        maxDepth: Int
    ) -> Result<JSONValue, JSONParseError> {
        var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
        return Result { () throws(JSONParseError) -> JSONValue in try parser.parseDocument() }
    }
}

/// Recursive-descent parser over a contiguous byte buffer.
private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    var pos = 0
    /// Reused buffer for strings that contain escapes.
    var scratch: [UInt8] = []

    init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue(depth: 0)
        skipWhitespace()
        if pos != bytes.count {
            throw error(at: pos, "unexpected \(describe(pos)) after the top-level value")
        }
        return value
    }

    /// ``JSONValue/parseObjectMembers(_:maxDepth:_:)``: hands the members of a top-level object
    /// to `member` and returns `true`, or returns `false` (after checking the whole text) when
    /// the top level is another value.
    mutating func parseTopLevelMembers(
        _ member: (UnsafeBufferPointer<UInt8>, JSONValue) -> Bool
    ) throws(JSONParseError) -> Bool {
        skipWhitespace()
        guard peek(UInt8(ascii: "{")) else {
            _ = try parseDocument()
            return false
        }
        // As parseObject, handing the members over.
        try checkDepth(1)
        pos += 1  // '{'
        skipWhitespace()
        if peek(UInt8(ascii: "}")) {
            pos += 1
        } else {
            try parseMembers(depth: 1, member)
        }
        skipWhitespace()
        if pos != bytes.count {
            throw error(at: pos, "unexpected \(describe(pos)) after the top-level value")
        }
        return true
    }

    // MARK: Values

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard pos < bytes.count else { throw error(at: pos, "unexpected end of input; expected a value") }
        switch bytes[pos] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error(at: pos, "unexpected \(describe(pos)); expected a value")
        }
    }

    mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        try checkDepth(depth)
        pos += 1  // '{'
        skipWhitespace()
        if peek(UInt8(ascii: "}")) {
            pos += 1
            return .object([:])
        }
        // Room for a job's usual members from the start: an empty dictionary grew (and rehashed
        // every key) three times on the way to a job's five or six members.
        var members = [String: JSONValue](minimumCapacity: 8)
        try parseMembers(depth: depth) { name, value in
            members.updateValue(value, forKey: String(decoding: name, as: UTF8.self)) == nil
        }
        return .object(members)
    }

    /// Reads an object's members from the first one (the object is not empty) through its
    /// closing '}', handing each to `add` (the name's UTF-8, escapes decoded, and the value),
    /// which returns `false` for a repeated name.
    @inline(__always)
    mutating func parseMembers(
        depth: Int,
        _ add: (UnsafeBufferPointer<UInt8>, JSONValue) -> Bool
    ) throws(JSONParseError) {
        var first = true
        while true {
            guard peek(UInt8(ascii: "\"")) else {
                throw error(
                    at: pos,
                    first ? "expected a string member name or '}'" : "expected a string member name after ','"
                )
            }
            first = false
            let keyOffset = pos
            // A name without escapes is read where it is; one with escapes is kept apart from
            // the scratch buffer, which the value's strings reuse.
            let inInput = try scanString()
            let decoded = inInput == nil ? scratch : nil
            skipWhitespace()
            guard peek(UInt8(ascii: ":")) else { throw error(at: pos, "expected ':' after an object member name") }
            pos += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            let added: Bool
            if let inInput {
                added = add(UnsafeBufferPointer(rebasing: bytes[inInput]), value)
            } else {
                added = decoded!.withUnsafeBufferPointer { add($0, value) }
            }
            if !added {
                let key =
                    inInput.map { String(decoding: UnsafeBufferPointer(rebasing: bytes[$0]), as: UTF8.self) }
                    ?? String(decoding: decoded!, as: UTF8.self)
                throw error(at: keyOffset, "duplicate member name \"\(key.abbreviated())\" in an object")
            }
            skipWhitespace()
            guard pos < bytes.count else {
                throw error(at: pos, "unexpected end of input; expected ',' or '}' after an object member")
            }
            switch bytes[pos] {
            case UInt8(ascii: ","):
                pos += 1
                skipWhitespace()
            case UInt8(ascii: "}"):
                pos += 1
                return
            default: throw error(at: pos, "expected ',' or '}' after an object member")
            }
        }
    }

    mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        try checkDepth(depth)
        pos += 1  // '['
        var items: [JSONValue] = []
        skipWhitespace()
        if peek(UInt8(ascii: "]")) {
            pos += 1
            return .array(items)
        }
        while true {
            items.append(try parseValue(depth: depth))
            skipWhitespace()
            guard pos < bytes.count else {
                throw error(at: pos, "unexpected end of input; expected ',' or ']' after an array element")
            }
            switch bytes[pos] {
            case UInt8(ascii: ","):
                pos += 1
                skipWhitespace()
            case UInt8(ascii: "]"):
                pos += 1
                return .array(items)
            default: throw error(at: pos, "expected ',' or ']' after an array element")
            }
        }
    }

    func checkDepth(_ depth: Int) throws(JSONParseError) {
        if depth > maxDepth {
            throw error(at: pos, "arrays and objects are nested more than \(maxDepth) levels deep")
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        let matches =
            pos + count <= bytes.count
            && literal.withUTF8Buffer { UnsafeBufferPointer(rebasing: bytes[pos..<pos + count]).elementsEqual($0) }
        guard matches else { throw error(at: pos, "invalid literal; expected '\(literal)'") }
        pos += count
    }

    // MARK: Numbers

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = pos
        let negative = peek(UInt8(ascii: "-"))
        if negative { pos += 1 }
        guard pos < bytes.count, isDigit(bytes[pos]) else {
            throw error(at: pos, "expected a digit after '-'")
        }
        // Accumulate as a negative number so that Int64.min is representable.
        var accumulator: Int64 = 0
        var overflow = false
        if bytes[pos] == UInt8(ascii: "0") {
            pos += 1
            if pos < bytes.count, isDigit(bytes[pos]) {
                throw error(at: pos - 1, "numbers must not have leading zeros")
            }
        } else {
            while pos < bytes.count, isDigit(bytes[pos]) {
                if !overflow {
                    let (m, o1) = accumulator.multipliedReportingOverflow(by: 10)
                    let (s, o2) = m.subtractingReportingOverflow(Int64(bytes[pos] &- UInt8(ascii: "0")))
                    overflow = o1 || o2
                    accumulator = s
                }
                pos += 1
            }
        }
        var isInteger = true
        if peek(UInt8(ascii: ".")) {
            isInteger = false
            pos += 1
            guard pos < bytes.count, isDigit(bytes[pos]) else {
                throw error(at: pos, "expected a digit after the decimal point")
            }
            while pos < bytes.count, isDigit(bytes[pos]) { pos += 1 }
        }
        if pos < bytes.count, bytes[pos] | 0x20 == UInt8(ascii: "e") {
            isInteger = false
            pos += 1
            if pos < bytes.count, bytes[pos] == UInt8(ascii: "+") || bytes[pos] == UInt8(ascii: "-") { pos += 1 }
            guard pos < bytes.count, isDigit(bytes[pos]) else {
                throw error(at: pos, "expected a digit in the exponent")
            }
            while pos < bytes.count, isDigit(bytes[pos]) { pos += 1 }
        }
        if isInteger && !overflow {
            if negative { return .int(accumulator) }
            if accumulator != .min { return .int(-accumulator) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<pos]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            throw error(at: start, "number \(text) is too large to represent")
        }
        return .double(value)
    }

    @inline(__always) func isDigit(_ b: UInt8) -> Bool { b &- UInt8(ascii: "0") < 10 }

    // MARK: Strings

    /// Parses a string literal starting at the opening quote.
    mutating func parseString() throws(JSONParseError) -> String {
        if let range = try scanString() {
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
        }
        return String(decoding: scratch, as: UTF8.self)
    }

    /// Reads a string literal from its opening quote past its closing one: the range of its
    /// bytes in the input when it has no escapes, or `nil` when it has, its decoded bytes then
    /// being in `scratch`.
    mutating func scanString() throws(JSONParseError) -> Range<Int>? {
        let open = pos
        pos += 1
        var runStart = pos
        var escaped = false
        let raw = UnsafeRawBufferPointer(bytes)
        while pos < bytes.count {
            // Eight bytes at a time while they are plain ASCII (no quote, backslash or control).
            if pos + 8 <= bytes.count {
                let word = raw.loadUnaligned(fromByteOffset: pos, as: UInt64.self)
                if word & 0x8080_8080_8080_8080 == 0 && !JSONValue.needsEscape(word) {
                    pos += 8
                    continue
                }
            }
            let b = bytes[pos]
            if b == UInt8(ascii: "\"") {
                let end = pos
                pos += 1
                guard escaped else { return runStart..<end }
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<end]))
                return nil
            } else if b == UInt8(ascii: "\\") {
                if !escaped {
                    scratch.removeAll(keepingCapacity: true)
                    escaped = true
                }
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<pos]))
                try parseEscape()
                runStart = pos
            } else if b < 0x20 {
                throw error(at: pos, "control character U+00\(hex(b)) must be escaped inside a string")
            } else if b < 0x80 {
                pos += 1
            } else {
                try skipUTF8Sequence()
            }
        }
        throw error(at: bytes.count, "unterminated string starting at byte \(open)")
    }

    /// Decodes one escape sequence at `pos` (the backslash) and appends it to `scratch`.
    mutating func parseEscape() throws(JSONParseError) {
        let start = pos
        pos += 1
        guard pos < bytes.count else { throw error(at: start, "unterminated escape sequence") }
        let c = bytes[pos]
        pos += 1
        switch c {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scratch.append(c)
        case UInt8(ascii: "b"): scratch.append(0x08)
        case UInt8(ascii: "f"): scratch.append(0x0C)
        case UInt8(ascii: "n"): scratch.append(0x0A)
        case UInt8(ascii: "r"): scratch.append(0x0D)
        case UInt8(ascii: "t"): scratch.append(0x09)
        case UInt8(ascii: "u"):
            let unit = try parseHex4(escapeStart: start)
            var scalarValue = UInt32(unit)
            if (0xDC00...0xDFFF).contains(unit) {
                throw error(at: start, "\\u\(hex(unit)) is a low surrogate without a preceding high surrogate")
            }
            if (0xD800...0xDBFF).contains(unit) {
                let lowStart = pos
                guard pos + 1 < bytes.count, bytes[pos] == UInt8(ascii: "\\"), bytes[pos + 1] == UInt8(ascii: "u")
                else {
                    throw error(
                        at: start,
                        "\\u\(hex(unit)) is a high surrogate that is not followed by a \\u low surrogate"
                    )
                }
                pos += 2
                let low = try parseHex4(escapeStart: lowStart)
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw error(
                        at: start,
                        "\\u\(hex(unit)) is a high surrogate that is not followed by a \\u low surrogate"
                    )
                }
                scalarValue = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
            }
            scratch.append(contentsOf: Unicode.UTF8.encode(Unicode.Scalar(scalarValue)!)!)
        default:
            throw error(
                at: start,
                "invalid escape sequence '\\\(printable(c))'; JSON allows \\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX"
            )
        }
    }

    mutating func parseHex4(escapeStart: Int) throws(JSONParseError) -> UInt16 {
        guard pos + 4 <= bytes.count else { throw error(at: escapeStart, "\\u escape needs four hex digits") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let b = bytes[pos]
            let digit: UInt8
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = b - UInt8(ascii: "A") + 10
            default: throw error(at: escapeStart, "\\u escape needs four hex digits")
            }
            value = value << 4 | UInt16(digit)
            pos += 1
        }
        return value
    }

    /// Validates one multi-byte UTF-8 sequence at `pos` (Unicode Table 3-7) and skips it.
    mutating func skipUTF8Sequence() throws(JSONParseError) {
        let lead = bytes[pos]
        let length: Int
        var secondRange: ClosedRange<UInt8> = 0x80...0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0:
            length = 3
            secondRange = 0xA0...0xBF
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED:
            length = 3
            secondRange = 0x80...0x9F  // excludes UTF-16 surrogates
        case 0xF0:
            length = 4
            secondRange = 0x90...0xBF
        case 0xF1...0xF3: length = 4
        case 0xF4:
            length = 4
            secondRange = 0x80...0x8F  // caps at U+10FFFF
        default: throw error(at: pos, "invalid UTF-8: byte 0x\(hex(lead)) cannot start a character")
        }
        guard pos + length <= bytes.count,
            secondRange.contains(bytes[pos + 1]),
            (2..<length).allSatisfy({ bytes[pos + $0] & 0xC0 == 0x80 })
        else { throw error(at: pos, "invalid UTF-8 sequence starting with byte 0x\(hex(lead))") }
        pos += length
    }

    // MARK: Helpers

    @inline(__always) func peek(_ byte: UInt8) -> Bool { pos < bytes.count && bytes[pos] == byte }

    mutating func skipWhitespace() {
        while pos < bytes.count {
            switch bytes[pos] {
            case 0x20, 0x09, 0x0A, 0x0D: pos += 1
            default: return
            }
        }
    }

    func error(at offset: Int, _ detail: String) -> JSONParseError {
        JSONParseError(offset: offset, message: "invalid JSON at byte \(offset): \(detail)")
    }

    /// "character 'x'", "byte 0xNN" or "end of input" for the byte at `offset`.
    func describe(_ offset: Int) -> String {
        guard offset < bytes.count else { return "end of input" }
        let b = bytes[offset]
        return (0x21..<0x7F).contains(b) ? "character '\(printable(b))'" : "byte 0x\(hex(b))"
    }

    func printable(_ b: UInt8) -> String {
        (0x21..<0x7F).contains(b) ? String(UnicodeScalar(b)) : "0x\(hex(b))"
    }

    func hex<T: FixedWidthInteger>(_ value: T) -> String {
        let s = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, MemoryLayout<T>.size * 2 - s.count)) + s
    }
}
