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
            var start = buffer.count
            var rest = value.magnitude
            repeat {
                start -= 1
                buffer[start] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
            } while rest != 0
            if value < 0 {
                start -= 1
                buffer[start] = UInt8(ascii: "-")
            }
            return try body(UnsafeRawBufferPointer(rebasing: buffer[start...]))
        }
    }

    /// Appends the decimal text of `value`.
    @inlinable
    public static func append(_ value: Int64, to bytes: inout [UInt8]) {
        withDigits(of: value) { bytes.append(contentsOf: $0) }
    }
}
