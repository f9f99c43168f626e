import Testing

@testable import APNSCore

private func text(_ value: JSONValue) -> String {
    String(decoding: value.serialized(), as: UTF8.self)
}

// MARK: - Serializer

@Test("Strings are escaped wherever the special byte falls, eight-byte runs included")
func stringEscapesAtEveryPosition() throws {
    // Every special byte at every position of strings up to 40 bytes, among ASCII and
    // multi-byte text: the escaped form must parse back to the same string, and equal the
    // byte-by-byte escaping.
    func reference(_ string: String) -> String {
        var out = "\""
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += "\\\""
            case UInt8(ascii: "\\"): out += "\\\\"
            case 0x08: out += "\\b"
            case 0x09: out += "\\t"
            case 0x0A: out += "\\n"
            case 0x0C: out += "\\f"
            case 0x0D: out += "\\r"
            case 0..<0x20: out += "\\u00" + String(byte >> 4, radix: 16) + String(byte & 15, radix: 16)
            default: out.unicodeScalars.append(contentsOf: String(decoding: [byte], as: UTF8.self).unicodeScalars)
            }
        }
        return out + "\""
    }
    for special in ["\"", "\\", "\u{0}", "\u{1F}", "\n", "\u{7F}", "é"] {
        for length in 0...40 {
            for position in 0..<max(length, 1) {
                var characters = Array(repeating: Character("a"), count: length)
                if length > 0 { characters[position] = Character(special) }
                let string = String(characters)
                let written = String(decoding: JSONValue.string(string).serialized(), as: UTF8.self)
                if string.unicodeScalars.allSatisfy(\.isASCII) {
                    #expect(written == reference(string), "\(string.debugDescription)")
                }
                #expect(try JSONValue.parse(Array(written.utf8)) == .string(string), "\(string.debugDescription)")
            }
        }
    }
}

@Test("The parser finds a quote, a backslash or a raw control byte wherever it falls in a long string")
func parserScansEveryPosition() throws {
    for length in 1...40 {
        for position in 0..<length {
            var body = Array(repeating: UInt8(ascii: "a"), count: length)
            body[position] = 0x09  // a raw tab: refused, at its own byte
            let quoted = [UInt8(ascii: "\"")] + body + [UInt8(ascii: "\"")]
            do {
                _ = try JSONValue.parse(quoted)
                Issue.record("a raw tab at \(position) of \(length) was accepted")
            } catch {
                #expect(error.message.contains("U+0009"), "\(error.message)")
                #expect(error.offset == position + 1, "\(length)/\(position): \(error.message)")
            }
            var escaped = Array(repeating: UInt8(ascii: "a"), count: length)
            escaped.replaceSubrange(position...position, with: Array("\\\"".utf8))
            let value = try JSONValue.parse([UInt8(ascii: "\"")] + escaped + [UInt8(ascii: "\"")])
            var expected = String(repeating: "a", count: length - 1)
            expected.insert("\"", at: expected.index(expected.startIndex, offsetBy: position))
            #expect(value == .string(expected))
        }
    }
}

@Test func serializerIsCompactWithSortedKeys() {
    let value: JSONValue = ["b": 1, "a": [true, false, .null], "c": ["z": "y", "x": -7]]
    #expect(text(value) == #"{"a":[true,false,null],"b":1,"c":{"x":-7,"z":"y"}}"#)
}

@Test func serializerEscapesMinimally() {
    let value = JSONValue.string("q\"b\\s/n\nr\rt\tb\u{08}f\u{0C}\u{01}\u{1F}é😀")
    #expect(text(value) == #""q\"b\\s/n\nr\rt\tb\bf\f\u0001\u001fé😀""#)
    // Non-ASCII stays raw UTF-8 (§5 check 8): é is C3 A9, 😀 is F0 9F 98 80.
    let bytes = JSONValue.string("é😀").serialized()
    #expect(bytes == [0x22, 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80, 0x22])
}

@Test func serializerNumbers() throws {
    #expect(text(.int(0)) == "0")
    #expect(text(.int(-42)) == "-42")
    #expect(text(.int(.max)) == "9223372036854775807")
    #expect(text(.int(.min)) == "-9223372036854775808")
    #expect(text(.double(1)) == "1.0")
    #expect(text(.double(0.5)) == "0.5")
    #expect(text(.double(.infinity)) == "null")
    #expect(text(.double(-.infinity)) == "null")
    #expect(text(.double(.nan)) == "null")
    for d in [1.0, -2.5e-7, 1e16, 123456.789, .leastNonzeroMagnitude, 1.7976931348623157e308] {
        #expect(try JSONValue.parse(text(.double(d))) == .double(d))
    }
}

@Test func roundTrip() throws {
    let value: JSONValue = [
        "s": "line\nbreak \"quoted\" \\ \u{0} 漢字 👨‍👩‍👧‍👦",
        "n": [1, -1, 2.5, .int(.min), .int(.max)],
        "nested": ["empty": [:], "list": []],
        "flag": true,
        "nothing": .null,
    ]
    #expect(try JSONValue.parse(value.serialized()) == value)
}

// MARK: - Parser accepts

@Test func parsesRFC8259Examples() throws {
    // RFC 8259 §13, first example.
    let image = try JSONValue.parse(
        """
        {
          "Image": {
              "Width":  800,
              "Height": 600,
              "Title":  "View from 15th Floor",
              "Thumbnail": {
                  "Url":    "http://www.example.com/image/481989943",
                  "Height": 125,
                  "Width":  100
              },
              "Animated" : false,
              "IDs": [116, 943, 234, 38793]
            }
        }
        """
    )
    #expect(image["Image"]?["Width"]?.intValue == 800)
    #expect(image["Image"]?["Thumbnail"]?["Url"]?.stringValue == "http://www.example.com/image/481989943")
    #expect(image["Image"]?["Animated"]?.boolValue == false)
    #expect(image["Image"]?["IDs"]?.arrayValue == [116, 943, 234, 38793])

    // RFC 8259 §13, second example.
    let places = try JSONValue.parse(
        """
        [
          {
             "precision": "zip",
             "Latitude":  37.7668,
             "Longitude": -122.3959,
             "Address":   "",
             "City":      "SAN FRANCISCO",
             "State":     "CA",
             "Zip":       "94107",
             "Country":   "US"
          },
          {
             "precision": "zip",
             "Latitude":  37.371991,
             "Longitude": -122.026020,
             "Address":   "",
             "City":      "SUNNYVALE",
             "State":     "CA",
             "Zip":       "94085",
             "Country":   "US"
          }
        ]
        """
    )
    #expect(places.arrayValue?.count == 2)
    #expect(places[1]?["Longitude"] == .double(-122.026020))
    #expect(places[0]?["Address"] == "")

    // RFC 8259 §13, scalar texts.
    #expect(try JSONValue.parse(#""Hello world!""#) == "Hello world!")
    #expect(try JSONValue.parse("42") == 42)
    #expect(try JSONValue.parse(" true ") == true)
    #expect(try JSONValue.parse("null") == .null)
}

@Test func parsesNumbers() throws {
    #expect(try JSONValue.parse("9223372036854775807") == .int(.max))
    #expect(try JSONValue.parse("-9223372036854775808") == .int(.min))
    #expect(try JSONValue.parse("9223372036854775808") == .double(9223372036854775808))
    #expect(try JSONValue.parse("-0") == .int(0))
    #expect(try JSONValue.parse("1.5") == .double(1.5))
    #expect(try JSONValue.parse("1E2") == .double(100))
    #expect(try JSONValue.parse("-2.5e-3") == .double(-0.0025))
    #expect(try JSONValue.parse("0.1e+1") == .double(1))
}

@Test func parsesStringEscapes() throws {
    let value = try JSONValue.parse(#""a\"\\\/\b\f\n\r\t\u00e9\u4E2D\ud83d\ude00\u0000""#)
    #expect(value == .string("a\"\\/\u{08}\u{0C}\n\r\té中😀\u{0}"))
    #expect(try JSONValue.parse(Array("\"é😀\"".utf8)) == "é😀")
}

@Test func parsesNonContiguousCollections() throws {
    let bytes = Array(#"{"k":[1,"v"]}"#.utf8)
    let lazy = bytes.lazy.map { $0 }  // no contiguous storage
    #expect(try JSONValue.parse(lazy) == ["k": [1, "v"]])
}

@Test func depthLimit() throws {
    let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
    #expect(throws: Never.self) { try JSONValue.parse(ok) }
    let tooDeep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
    let error = #expect(throws: JSONParseError.self) { try JSONValue.parse(tooDeep) }
    #expect(error?.offset == 64)
    #expect(error?.message.contains("64 levels") == true)
    let objects = #"{"a":{"b":{"c":1}}}"#
    #expect(throws: JSONParseError.self) { try JSONValue.parse(objects, maxDepth: 2) }
    #expect(try JSONValue.parse(objects, maxDepth: 3)["a"]?["b"]?["c"] == 1)
}

// MARK: - Parser rejects

struct Malformed: Sendable, CustomTestStringConvertible {
    var bytes: [UInt8]
    var offset: Int
    var fragment: String
    var testDescription: String { String(decoding: bytes, as: UTF8.self) }

    init(_ text: String, _ offset: Int, _ fragment: String) {
        self.init(Array(text.utf8), offset, fragment)
    }

    init(_ bytes: [UInt8], _ offset: Int, _ fragment: String) {
        self.bytes = bytes
        self.offset = offset
        self.fragment = fragment
    }
}

@Test(arguments: [
    Malformed(#"{"a":}"#, 5, "expected a value"),
    Malformed("[1,]", 3, "expected a value"),
    Malformed("01", 0, "leading zeros"),
    Malformed("[-012]", 2, "leading zeros"),
    Malformed(#""\ud800""#, 1, "high surrogate"),
    Malformed(#""\ud800\u0041""#, 1, "high surrogate"),
    Malformed(#""\udc00""#, 1, "low surrogate"),
    Malformed(#"{"a":1} x"#, 8, "after the top-level value"),
    Malformed("[1]]", 3, "after the top-level value"),
    Malformed("[1 2]", 3, "expected ',' or ']'"),
    Malformed(#"{"a":1 "b":2}"#, 7, "expected ',' or '}'"),
    Malformed(#"{"a" 1}"#, 5, "expected ':'"),
    Malformed(#"{"a":1,}"#, 7, "member name after ','"),
    Malformed("{a:1}", 1, "string member name"),
    Malformed(#"{"a":1,"a":2}"#, 7, "duplicate member name"),
    Malformed("[1,2", 4, "end of input"),
    Malformed(#""abc"#, 4, "unterminated string"),
    Malformed("", 0, "end of input"),
    Malformed("  ", 2, "end of input"),
    Malformed("1.", 2, "decimal point"),
    Malformed(".5", 0, "expected a value"),
    Malformed("-", 1, "digit after '-'"),
    Malformed("+1", 0, "expected a value"),
    Malformed("1e", 2, "exponent"),
    Malformed("1e400", 0, "too large"),
    Malformed("NaN", 0, "expected a value"),
    Malformed("tru", 0, "expected 'true'"),
    Malformed("nul1", 0, "expected 'null'"),
    Malformed(#""\x""#, 1, "invalid escape"),
    Malformed(#""\u12G4""#, 1, "four hex digits"),
    Malformed("\"a\tb\"", 2, "must be escaped"),
    Malformed("[1]\u{0}", 3, "after the top-level value"),
    Malformed([0x22, 0xC3, 0x28, 0x22], 1, "invalid UTF-8"),  // bad continuation
    Malformed([0x22, 0xC0, 0xAF, 0x22], 1, "invalid UTF-8"),  // overlong '/'
    Malformed([0x22, 0xE0, 0x80, 0xAF, 0x22], 1, "invalid UTF-8"),  // overlong 3-byte
    Malformed([0x22, 0xED, 0xA0, 0x80, 0x22], 1, "invalid UTF-8"),  // encoded surrogate
    Malformed([0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], 1, "invalid UTF-8"),  // above U+10FFFF
    Malformed([0x22, 0x61, 0xFF, 0x22], 2, "invalid UTF-8"),
    Malformed([0x22, 0xE2, 0x82], 1, "invalid UTF-8"),  // truncated at end of input
    Malformed([0xC3, 0xA9], 0, "expected a value"),  // non-ASCII outside a string
])
func rejectsMalformedInput(_ input: Malformed) {
    let error = #expect(throws: JSONParseError.self) { try JSONValue.parse(input.bytes) }
    #expect(error?.offset == input.offset)
    #expect(error?.message.hasPrefix("invalid JSON at byte \(input.offset): ") == true)
    #expect(error?.message.contains(input.fragment) == true, "\(error?.message ?? "no error")")
}

@Test func errorMessageIsActionable() {
    let error = #expect(throws: JSONParseError.self) { try JSONValue.parse(#"{"alert":"hi" "badge":1}"#) }
    #expect(error?.message == "invalid JSON at byte 14: expected ',' or '}' after an object member")
    #expect(error?.description == error?.message)
}

// MARK: - Accessors

@Test func accessors() {
    let value: JSONValue = ["s": "x", "i": 3, "d": 2.0, "f": 2.5, "b": true, "a": [1], "o": ["k": .null]]
    #expect(value["s"]?.stringValue == "x")
    #expect(value["i"]?.intValue == 3)
    #expect(value["d"]?.intValue == 2)  // integral double
    #expect(value["f"]?.intValue == nil)
    #expect(JSONValue.double(1e300).intValue == nil)
    #expect(value["i"]?.doubleValue == 3)
    #expect(value["f"]?.doubleValue == 2.5)
    #expect(value["b"]?.boolValue == true)
    #expect(value["a"]?.arrayValue == [1])
    #expect(value["a"]?[0] == 1)
    #expect(value["a"]?[1] == nil)
    #expect(value["o"]?.objectValue == ["k": .null])
    #expect(value["o"]?["k"]?.isNull == true)
    #expect(value["missing"] == nil)
    #expect(value["s"]?.intValue == nil)
    #expect(JSONValue.string("x")["k"] == nil)
}

@Test func decimalTextWritesEveryInt64() {
    let edges: [Int64] = [0, 7, -7, 9, 10, 11, 99, 100, 101, 999, 1000, -99, -100, 1_700_000_000_123, -1]
    let powers = (1...18).flatMap { n -> [Int64] in
        let power = (0..<n).reduce(Int64(1)) { value, _ in value * 10 }
        return [power - 1, power, power + 1, -power]
    }
    for value: Int64 in edges + powers + [Int64.max, Int64.min, Int64.max - 1, Int64.min + 1] {
        var bytes: [UInt8] = []
        DecimalText.append(value, to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == String(value))
    }
}

// MARK: - Top-level members

/// `parseObjectMembers` accepts and refuses exactly what `parse` does, with the same errors; an
/// object's members come in document order, other values give `nil`.
@Test func objectMembersAgreeWithParse() throws {
    let many = (0..<20).map { "\"k\($0)\":\($0)" }.joined(separator: ",")
    let texts = [
        #"{"id":"j","app":"a","token":"ab","alert":"hi","badge":1}"#, " { } ", #"{"a":{"b":[1,{"c":null}]}}"#,
        #"{"a":1,"a":2}"#, #"{"a":1,"b":{"a":1,"a":2}}"#, "{\(many),\"k3\":0}", "{\(many),\"k19\":0}", "{\(many)}",
        "{\"\u{E9}\":1,\"e\u{301}\":2}", #"[1,2]"#, #""text""#, "7", #"{"a":1} x"#, #"{"a":1,}"#, #"{"a" 1}"#,
        #"{"a":tru}"#,
        "{", "", #"{"a":"\ud800"}"#, String(repeating: "[", count: 70) + String(repeating: "]", count: 70),
        "{\"a\":" + String(repeating: "[", count: 64) + String(repeating: "]", count: 64) + "}",
    ]
    for text in texts {
        let bytes = Array(text.utf8)
        let whole = Result { () throws(JSONParseError) -> JSONValue in try JSONValue.parse(bytes) }
        let members = Result { () throws(JSONParseError) -> [(key: String, value: JSONValue)]? in
            try JSONValue.parseObjectMembers(bytes)
        }
        switch (whole, members) {
        case (.success(.object(let dictionary)), .success(let list?)):
            #expect(list.count == dictionary.count, "\(text)")
            for (key, value) in list { #expect(dictionary[key] == value, "\(text)") }
            #expect(
                list.map(\.key)
                    == list.map(\.key).sorted {
                        text.range(of: "\"\($0)\"")!.lowerBound < text.range(of: "\"\($1)\"")!.lowerBound
                    }
            )
        case (.success(let value), .success(nil)):
            if case .object = value { Issue.record("an object gave nil: \(text)") }
        case (.failure(let a), .failure(let b)):
            #expect(a == b, "\(text)")
        default:
            Issue.record("parse and parseObjectMembers disagree on \(text): \(whole) against \(members)")
        }
    }
}
