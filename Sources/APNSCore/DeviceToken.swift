import Foundation

/// A device token: the opaque bytes that address one app on one device.
///
/// Tokens are accepted as hex text, tolerating the spaces and angle brackets that
/// `-[NSData description]` used to print (`<740f4707 bebcf74f ...>`), or as raw bytes.
/// Apple asks providers not to assume a length (§3.5, §5 check 2); the binary API's token item
/// was "32 bytes" and later "up to 100 bytes" (§1.2, §6.6), so any length from 1 to
/// ``maximumLength`` bytes is accepted here and the gateway decides.
public struct DeviceToken: Sendable, Hashable, CustomStringConvertible {
    /// The longest token the binary API's token item can describe (§1.2, 2018 revision).
    public static let maximumLength = 100

    /// The token's bytes.
    public let bytes: [UInt8]

    /// Creates a token from raw bytes.
    public init(bytes: some Sequence<UInt8>) throws(APNSError) {
        let bytes = Array(bytes)
        guard !bytes.isEmpty else {
            throw APNSError(.invalidDeviceToken, "device token is empty")
        }
        guard bytes.count <= Self.maximumLength else {
            throw APNSError(
                .invalidDeviceToken,
                "device token is \(bytes.count) bytes long; APNs accepts at most \(Self.maximumLength)"
            )
        }
        self.bytes = bytes
    }

    /// A recipient that is not a device token, such as a broadcast channel's ID
    /// (``BroadcastChannelID/recipient``), whose own type has checked it.
    init(uncheckedBytes bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Creates a token from hex text; spaces, `<` and `>` are ignored.
    public init(hex: String) throws(APNSError) {
        var text = hex
        let bytes = try text.withUTF8 { utf8 in Result { () throws(APNSError) in try Self.parseHex(utf8, text: hex) } }
            .get()
        try self.init(bytes: bytes)
    }

    private static func parseHex(_ utf8: UnsafeBufferPointer<UInt8>, text hex: String) throws(APNSError) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var high: UInt8? = nil
        var position = 0  // 1-based, for the error message
        for char in utf8 {
            position += 1
            let nibble: UInt8
            switch char {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = char - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = char - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = char - UInt8(ascii: "A") + 10
            case UInt8(ascii: " "), UInt8(ascii: "<"), UInt8(ascii: ">"): continue
            default:
                throw APNSError(
                    .invalidDeviceToken,
                    "device token \(Self.redact(hex)) has a character that is not a hex digit at position \(position)"
                )
            }
            if let h = high {
                bytes.append(h << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        guard high == nil else {
            throw APNSError(
                .invalidDeviceToken,
                "device token \(Self.redact(hex)) has an odd number of hex digits"
            )
        }
        return bytes
    }

    public static func == (lhs: DeviceToken, rhs: DeviceToken) -> Bool {
        lhs.bytes.count == rhs.bytes.count
            && lhs.bytes.withUnsafeBytes { a in
                rhs.bytes.withUnsafeBytes { b in memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
            }
    }

    /// Hashes the bytes in one call rather than one by one: simulators look tokens up at
    /// hundreds of thousands per second.
    public func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    /// Lower-case hex, no separators.
    public var hex: String {
        bytes.withUnsafeBufferPointer { Self.lowercaseHex($0) }
    }

    /// Lower-case hex of `bytes` after `prefix` (an HTTP/2 path, say), written straight into
    /// the string's storage.
    public static func lowercaseHex(_ bytes: UnsafeBufferPointer<UInt8>, prefix: StaticString = "") -> String {
        String(unsafeUninitializedCapacity: prefix.utf8CodeUnitCount + bytes.count * 2) { out in
            var i = prefix.utf8CodeUnitCount
            if i > 0 {
                _ = UnsafeMutableRawBufferPointer(out).initializeMemory(
                    as: UInt8.self,
                    from: UnsafeBufferPointer(start: prefix.utf8Start, count: i)
                )
            }
            for b in bytes {
                let high = b >> 4, low = b & 0x0f
                out[i] = high < 10 ? high + UInt8(ascii: "0") : high + (UInt8(ascii: "a") - 10)
                out[i + 1] = low < 10 ? low + UInt8(ascii: "0") : low + (UInt8(ascii: "a") - 10)
                i += 2
            }
            return i
        }
    }

    /// A short form for logs: the first eight hex digits and the length. Full tokens stay out of logs.
    public var redacted: String {
        let h = hex
        return "\(h.prefix(8))…(\(bytes.count)B)"
    }

    public var description: String { redacted }

    private static func redact(_ text: String) -> String {
        text.count <= 12 ? "\"\(text)\"" : "\"\(text.prefix(8))…\""
    }
}
