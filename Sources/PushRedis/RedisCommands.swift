/// Commands encoded in RESP, back to back in one buffer: what a pipeline writes to the socket.
///
/// Building the commands straight into their wire form costs one growing buffer per pipeline,
/// where a list of argument arrays costs an allocation per argument and a copy into the
/// socket's buffer. Each command remembers where its first key is (a cluster routes it by that
/// key's slot) and, for an `EVALSHA`, where its script's SHA-1 is (a `NOSCRIPT` reply is
/// answered by loading that script and sending the command again).
///
/// ```swift
/// var commands = RedisCommands()
/// commands.set(key, value, expiry: .seconds(86_400))        // a typed command (RedisCommands+Typed)
/// commands.begin(.hset, arguments: 3)                        // or one built in place
/// commands.appendKey { $0 += "apn:n:".utf8; $0 += id.utf8 }  // routes the command on a cluster
/// commands.append(field)
/// commands.append(value)
/// let replies = try await redis.pipeline(commands)
/// ```
public struct RedisCommands: Sendable {
    /// One command's place in ``bytes``.
    struct Entry: Sendable {
        var start: Int
        var end: Int
        /// The first key's bytes (`nil`: a command without keys, which any primary answers).
        var key: Range<Int>?
        /// The SHA-1 of the script an `EVALSHA` runs.
        var sha1: Range<Int>?
    }

    /// The encoded commands.
    public private(set) var bytes: [UInt8] = []
    private(set) var entries: [Entry] = []
    /// Arguments the command being built still expects.
    private var remaining = 0
    /// The bytes of the argument appended last.
    private var lastArgument = 0..<0

    public init() {}

    /// Room for `bytes` bytes of commands.
    public init(capacity: Int) {
        bytes.reserveCapacity(capacity)
    }

    /// Commands given as argument lists. A command's first key is found by its name, as
    /// Redis Cluster does (``RedisClusterSlot``).
    ///
    /// - Throws: `.invalidCommand` for a command without arguments.
    public init(_ commands: [[[UInt8]]]) throws(RedisError) {
        bytes.reserveCapacity(
            commands.reduce(0) { total, command in command.reduce(total + 16) { $0 + $1.count + 16 } }
        )
        for command in commands {
            guard !command.isEmpty else {
                throw RedisError(.invalidCommand, "cannot send an empty command: it needs at least the command name")
            }
            begin(argumentCount: command.count)
            let keyIndex = RedisClusterSlot.keyIndex(of: command)
            let isEvalsha = RedisClusterSlot.isEvalsha(command)
            for (index, argument) in command.enumerated() {
                append(argument)
                if index == keyIndex { entries[entries.count - 1].key = lastArgument }
                if index == 1 && isEvalsha { entries[entries.count - 1].sha1 = lastArgument }
            }
        }
    }

    /// The number of commands.
    public var count: Int { entries.count }

    public var isEmpty: Bool { entries.isEmpty }

    // MARK: Building

    /// Starts a command of `argumentCount` arguments, its name included; the next
    /// `argumentCount` appends are its arguments. Commands are begun by name with
    /// ``begin(_:arguments:)``.
    mutating func begin(argumentCount: Int) {
        precondition(remaining == 0, "the previous command lacks \(remaining) arguments")
        precondition(argumentCount > 0, "a command has at least its name")
        entries.append(Entry(start: bytes.count, end: 0))
        bytes.append(UInt8(ascii: "*"))
        appendDecimalLine(argumentCount)
        remaining = argumentCount
    }

    /// Starts `EVALSHA <sha1> <keyCount> <keys...> <arguments...>`: `keyCount` keys, then
    /// `argumentCount` arguments follow.
    public mutating func beginEvalsha(_ script: RedisScript, keyCount: Int, argumentCount: Int) {
        begin(.evalsha, arguments: 2 + keyCount + argumentCount)
        append(script.sha1)
        entries[entries.count - 1].sha1 = lastArgument
        append(Int64(keyCount))
    }

    /// An argument.
    public mutating func append(_ argument: [UInt8]) {
        argument.withUnsafeBytes { append($0) }
    }

    /// An argument.
    public mutating func append(_ argument: UnsafeRawBufferPointer) {
        bytes.append(UInt8(ascii: "$"))
        appendDecimalLine(argument.count)
        let start = bytes.count
        bytes.append(contentsOf: argument)
        argumentWritten(start)
    }

    /// An argument given as text (its UTF-8 bytes).
    public mutating func append(_ argument: String) {
        var argument = argument
        argument.withUTF8 { append(UnsafeRawBufferPointer($0)) }
    }

    /// An argument given as text.
    public mutating func append(_ argument: StaticString) {
        append(UnsafeRawBufferPointer(start: argument.utf8Start, count: argument.utf8CodeUnitCount))
    }

    /// A number, in decimal.
    public mutating func append(_ value: Int64) {
        append { DecimalBytes.append(value, to: &$0) }
    }

    /// An argument written by `body`, which may only append to the bytes it is given.
    public mutating func append(_ body: (inout [UInt8]) -> Void) {
        let start = bytes.count
        body(&bytes)
        let length = bytes.count - start
        // The length line (`$<length>\r\n`) goes in front of the bytes just written.
        let header = DecimalBytes.withDigits(of: UInt64(length)) { digits in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: digits.count + 3) { line in
                line[0] = UInt8(ascii: "$")
                _ = UnsafeMutableBufferPointer(rebasing: line[1...]).initialize(from: digits)
                line[digits.count + 1] = UInt8(ascii: "\r")
                line[digits.count + 2] = UInt8(ascii: "\n")
                bytes.insert(contentsOf: line, at: start)
                return line.count
            }
        }
        argumentWritten(start + header)
    }

    /// A key (a command's first key routes it on a cluster), written by `body`.
    public mutating func appendKey(_ body: (inout [UInt8]) -> Void) {
        append(body)
        markKey()
    }

    /// A key.
    public mutating func appendKey(_ key: [UInt8]) {
        append(key)
        markKey()
    }

    /// Appends the commands of `other` at `indices`, in that order.
    mutating func append(_ other: RedisCommands, at indices: some Sequence<Int>) {
        precondition(remaining == 0, "the previous command lacks \(remaining) arguments")
        for index in indices {
            let entry = other.entries[index]
            let shift = bytes.count - entry.start
            bytes.append(contentsOf: other.bytes[entry.start..<entry.end])
            func moved(_ range: Range<Int>?) -> Range<Int>? {
                range.map { ($0.lowerBound + shift)..<($0.upperBound + shift) }
            }
            entries.append(
                Entry(
                    start: bytes.count - (entry.end - entry.start),
                    end: bytes.count,
                    key: moved(entry.key),
                    sha1: moved(entry.sha1)
                )
            )
        }
    }

    // MARK: Reading

    /// The slot of command `index`'s first key, `nil` for a command without keys.
    func slot(of index: Int) -> Int? {
        entries[index].key.map { RedisClusterSlot.of(bytes[$0]) }
    }

    /// The SHA-1 (lowercase hex) of the script command `index` runs with `EVALSHA`, if it does.
    func script(of index: Int) -> ArraySlice<UInt8>? {
        entries[index].sha1.map { bytes[$0] }
    }

    /// Whether the last command has all its arguments.
    var isComplete: Bool { remaining == 0 }

    // MARK: Private

    /// Ends the argument whose bytes start at `start`.
    private mutating func argumentWritten(_ start: Int) {
        precondition(remaining > 0, "more arguments than the command was begun with")
        lastArgument = start..<bytes.count
        bytes.append(UInt8(ascii: "\r"))
        bytes.append(UInt8(ascii: "\n"))
        remaining -= 1
        if remaining == 0 { entries[entries.count - 1].end = bytes.count }
    }

    private mutating func markKey() {
        if entries[entries.count - 1].key == nil { entries[entries.count - 1].key = lastArgument }
    }

    private mutating func appendDecimalLine(_ value: Int) {
        DecimalBytes.append(Int64(value), to: &bytes)
        bytes.append(UInt8(ascii: "\r"))
        bytes.append(UInt8(ascii: "\n"))
    }
}

/// Decimal digits of an integer appended to bytes, without a String.
enum DecimalBytes {
    static func append(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        withDigits(of: value.magnitude) { bytes.append(contentsOf: $0) }
    }

    /// Calls `body` with the decimal digits of `value`, from a buffer on the stack.
    static func withDigits<R>(of value: UInt64, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            let start = write(value, endingAt: 20, into: UnsafeMutableRawBufferPointer(digits))
            return body(UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    /// Writes the digits of `value` so that they end before `end` in `buffer` (20 bytes before
    /// it at least); returns where they start.
    static func write(_ value: UInt64, endingAt end: Int, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        var index = end
        var rest = value
        repeat {
            index -= 1
            buffer[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        } while rest > 0
        return index
    }
}
