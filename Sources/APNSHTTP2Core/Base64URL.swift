import Foundation

/// Base64url without padding (RFC 7515 §2), as used by every part of a JWT (§4).
package enum Base64URL {
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    package static func encode(_ string: String) -> String { encode(Array(string.utf8)) }

    /// Decodes unpadded base64url; returns `nil` for padding, characters outside the
    /// alphabet, or an impossible length.
    package static func decode(_ text: Substring) -> [UInt8]? {
        var standard = ""
        standard.reserveCapacity(text.utf8.count + 3)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "-"): standard.append("+")
            case UInt8(ascii: "_"): standard.append("/")
            default: return nil
            }
        }
        switch standard.utf8.count % 4 {
        case 0: break
        case 2: standard.append("==")
        case 3: standard.append("=")
        default: return nil
        }
        guard let data = Data(base64Encoded: standard) else { return nil }
        return Array(data)
    }
}
