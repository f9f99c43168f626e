/// A strict JSON (RFC 8259) parser producing a ``ConfigNode`` tree.
///
/// Errors carry the 1-based line and column (counted in Unicode scalars) where the problem
/// was found. Numbers keep the text they were written with; duplicate keys in one object
/// are an error.
struct JSONConfigParser {
    /// A syntax error and where it is.
    struct SyntaxError: Error, Sendable {
        var line: Int
        var column: Int
        var message: String
    }

    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var lineStart = 0

    private init(_ text: String) {
        bytes = Array(text.utf8)
    }

    /// Parses one JSON value, allowing white space (and a byte order mark) around it.
    static func parse(_ text: String) throws(SyntaxError) -> ConfigNode {
        var parser = JSONConfigParser(text)
        if parser.bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            parser.index = 3
            parser.lineStart = 3
        }
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        if parser.index < parser.bytes.count {
            throw parser.error("unexpected \(parser.describeCurrent()) after the JSON value")
        }
        return value
    }

    // MARK: - Positions and errors

    private var column: Int { column(at: index, lineStart: lineStart) }

    private func column(at target: Int, lineStart: Int) -> Int {
        // Count Unicode scalars: every byte that is not a UTF-8 continuation byte.
        var count = 1
        var position = lineStart
        let end = min(target, bytes.count)
        while position < end {
            if bytes[position] & 0xC0 != 0x80 { count += 1 }
            position += 1
        }
        return count
    }

    private func error(_ message: String) -> SyntaxError {
        SyntaxError(line: line, column: column, message: message)
    }

    private func describeCurrent() -> String {
        guard index < bytes.count else { return "end of file" }
        let byte = bytes[index]
        if byte >= 0x21 && byte < 0x7F { return "character '\(Character(UnicodeScalar(byte)))'" }
        if byte < 0x80 { return "character 0x\(String(byte, radix: 16))" }
        // Decode the whole scalar for the message.
        var end = index + 1
        while end < bytes.count && bytes[end] & 0xC0 == 0x80 { end += 1 }
        return "character '\(String(decoding: bytes[index..<end], as: UTF8.self))'"
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0D:
                index += 1
            case 0x0A:
                index += 1
                line += 1
                lineStart = index
            default:
                return
            }
        }
    }

    // MARK: - Values

    private mutating func parseValue(depth: Int) throws(SyntaxError) -> ConfigNode {
        guard index < bytes.count else { throw error("expected a value but found the end of file") }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["):
            return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""):
            return .scalar(ConfigScalar(text: try parseString(), kind: .string))
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .scalar(ConfigScalar(text: "true", kind: .boolean))
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .scalar(ConfigScalar(text: "false", kind: .boolean))
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try parseNumber()
        default:
            throw error("expected a value but found \(describeCurrent())")
        }
    }

    private mutating func expectLiteral(_ literal: String) throws(SyntaxError) {
        let expected = Array(literal.utf8)
        guard index + expected.count <= bytes.count,
              Array(bytes[index..<index + expected.count]) == expected
        else { throw error("expected a value but found \(describeCurrent())") }
        index += expected.count
    }

    private mutating func parseObject(depth: Int) throws(SyntaxError) -> ConfigNode {
        if depth > ConfigLimits.maxDepth {
            throw error("lists and objects are nested more than \(ConfigLimits.maxDepth) levels deep")
        }
        index += 1  // {
        var entries: [ConfigEntry] = []
        var seen: Set<String> = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .map(entries)
        }
        while true {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw error("expected a key in double quotes but found \(describeCurrent())")
            }
            let keyLine = line
            let keyLineStart = lineStart
            let keyStart = index
            let key = try parseString()
            if !seen.insert(key).inserted {
                throw SyntaxError(line: keyLine, column: column(at: keyStart, lineStart: keyLineStart),
                                  message: "the key \(quoted(key)) appears twice in the same object")
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw error("expected ':' after the key but found \(describeCurrent())")
            }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            entries.append(ConfigEntry(key: key, value: value))
            skipWhitespace()
            guard index < bytes.count else { throw error("expected ',' or '}' but found the end of file") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                skipWhitespace()
                continue
            }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .map(entries)
            }
            throw error("expected ',' or '}' but found \(describeCurrent())")
        }
    }

    private mutating func parseArray(depth: Int) throws(SyntaxError) -> ConfigNode {
        if depth > ConfigLimits.maxDepth {
            throw error("lists and objects are nested more than \(ConfigLimits.maxDepth) levels deep")
        }
        index += 1  // [
        var items: [ConfigNode] = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .list(items)
        }
        while true {
            items.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw error("expected ',' or ']' but found the end of file") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                skipWhitespace()
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .list(items)
            }
            throw error("expected ',' or ']' but found \(describeCurrent())")
        }
    }

    private mutating func parseString() throws(SyntaxError) -> String {
        index += 1  // opening quote
        var scalars = String.UnicodeScalarView()
        var runStart = index
        func flushRun(_ parser: JSONConfigParser, upTo end: Int, into scalars: inout String.UnicodeScalarView) {
            if end > runStart {
                scalars.append(contentsOf: String(decoding: parser.bytes[runStart..<end], as: UTF8.self).unicodeScalars)
            }
        }
        while true {
            guard index < bytes.count else { throw error("a string is not closed before the end of file") }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                flushRun(self, upTo: index, into: &scalars)
                index += 1
                return String(scalars)
            }
            if byte < 0x20 {
                throw error("a string contains a raw control character; write it as an escape such as \\n")
            }
            if byte != UInt8(ascii: "\\") {
                index += 1
                continue
            }
            flushRun(self, upTo: index, into: &scalars)
            index += 1
            guard index < bytes.count else { throw error("a string is not closed before the end of file") }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""): scalars.append("\"")
            case UInt8(ascii: "\\"): scalars.append("\\")
            case UInt8(ascii: "/"): scalars.append("/")
            case UInt8(ascii: "b"): scalars.append("\u{08}")
            case UInt8(ascii: "f"): scalars.append("\u{0C}")
            case UInt8(ascii: "n"): scalars.append("\n")
            case UInt8(ascii: "r"): scalars.append("\r")
            case UInt8(ascii: "t"): scalars.append("\t")
            case UInt8(ascii: "u"):
                let first = try parseHex4()
                if (0xD800...0xDBFF).contains(first) {
                    guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                          bytes[index + 1] == UInt8(ascii: "u")
                    else { throw error("a \\u escape holds an unpaired surrogate") }
                    index += 2
                    let second = try parseHex4()
                    guard (0xDC00...0xDFFF).contains(second) else {
                        throw error("a \\u escape holds an unpaired surrogate")
                    }
                    let value = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    guard let scalar = Unicode.Scalar(value) else {
                        throw error("a \\u escape is not a valid character")
                    }
                    scalars.append(scalar)
                } else {
                    guard let scalar = Unicode.Scalar(first) else {
                        throw error("a \\u escape holds an unpaired surrogate")
                    }
                    scalars.append(scalar)
                }
            default:
                index -= 1
                throw error("unknown escape \\\(Character(UnicodeScalar(escape))) in a string")
            }
            runStart = index
        }
    }

    private mutating func parseHex4() throws(SyntaxError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard index < bytes.count else { throw error("a \\u escape needs four hexadecimal digits") }
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("a \\u escape needs four hexadecimal digits")
            }
            value = value * 16 + digit
            index += 1
        }
        return value
    }

    private mutating func parseNumber() throws(SyntaxError) -> ConfigNode {
        let start = index
        var isInteger = true
        func isDigit(_ position: Int) -> Bool {
            position < bytes.count && bytes[position] >= UInt8(ascii: "0") && bytes[position] <= UInt8(ascii: "9")
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard isDigit(index) else { throw error("a number needs digits after '-'") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if isDigit(index) { throw error("a number must not start with 0") }
        } else {
            while isDigit(index) { index += 1 }
        }
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard isDigit(index) else { throw error("a number needs digits after '.'") }
            while isDigit(index) { index += 1 }
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            isInteger = false
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) {
                index += 1
            }
            guard isDigit(index) else { throw error("a number needs digits in its exponent") }
            while isDigit(index) { index += 1 }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        return .scalar(ConfigScalar(text: text, kind: isInteger ? .integer : .float))
    }
}
