/// An integer's decimal text, written once and kept inline (24 bytes, no allocation): an
/// argument that goes into several commands without being formatted for each.
public struct DecimalArgument: Sendable, Equatable {
    /// The digits (and a `-` before them when negative), at the end of these 24 bytes.
    private var storage: (UInt64, UInt64, UInt64) = (0, 0, 0)
    private let start: UInt8

    public init(_ value: Int64) {
        var start = 0
        withUnsafeMutableBytes(of: &storage) { buffer in
            start = DecimalBytes.write(value.magnitude, endingAt: buffer.count, into: buffer)
            if value < 0 {
                start -= 1
                buffer[start] = UInt8(ascii: "-")
            }
        }
        self.start = UInt8(start)
    }

    /// Calls `body` with the text's bytes.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: storage) { try body(UnsafeRawBufferPointer(rebasing: $0[Int(start)...])) }
    }

    /// Appends the text to `bytes`.
    public func append(to bytes: inout [UInt8]) {
        withUnsafeBytes { bytes.append(contentsOf: $0) }
    }

    public static func == (lhs: DecimalArgument, rhs: DecimalArgument) -> Bool {
        lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in a.elementsEqual(b) } }
    }
}

extension RedisCommands {
    /// A number written before (``DecimalArgument``).
    public mutating func append(_ argument: DecimalArgument) {
        argument.withUnsafeBytes { append($0) }
    }
}
