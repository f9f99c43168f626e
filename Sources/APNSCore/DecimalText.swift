/// The decimal text of integers, written straight into bytes: JSON numbers, Redis arguments and
/// HTTP/2 header values all use it, so there is one digit writer.
public enum DecimalText {
    /// Calls `body` with the ASCII digits of `value` (a leading `-` when negative), from a
    /// buffer on the stack: no allocation.
    @inlinable
    public static func withDigits<R>(of value: Int64, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        // 40 bytes: room for a sign and the 19 digits of Int64.min's magnitude.
        var storage: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)
        return try withUnsafeMutableBytes(of: &storage) { buffer in
            // Two digits at a time, from a table of the pairs.
            let pairs = digitPairs.utf8Start
            var start = buffer.count
            var rest = value.magnitude
            while rest >= 100 {
                let pair = Int(truncatingIfNeeded: rest % 100) &* 2
                rest /= 100
                start &-= 2
                buffer[start] = pairs[pair]
                buffer[start &+ 1] = pairs[pair &+ 1]
            }
            if rest >= 10 {
                let pair = Int(truncatingIfNeeded: rest) &* 2
                start &-= 2
                buffer[start] = pairs[pair]
                buffer[start &+ 1] = pairs[pair &+ 1]
            } else {
                start &-= 1
                buffer[start] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest)
            }
            if value < 0 {
                start -= 1
                buffer[start] = UInt8(ascii: "-")
            }
            return try body(UnsafeRawBufferPointer(rebasing: buffer[start...]))
        }
    }

    /// "00", "01", … "99", back to back.
    @usableFromInline
    static let digitPairs: StaticString = """
        0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
        5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899
        """

    /// Appends the decimal text of `value`.
    @inlinable
    public static func append(_ value: Int64, to bytes: inout [UInt8]) {
        withDigits(of: value) { bytes.append(contentsOf: $0) }
    }
}
