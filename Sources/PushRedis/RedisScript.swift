import Crypto

/// A Lua script together with its SHA-1, computed locally exactly as Redis does
/// (so `sha1` equals what `SCRIPT LOAD` returns for `source`).
///
/// Run it directly with ``RedisConnection/evalsha(_:keys:args:)``, or put
/// ``evalshaCommand(keys:args:)`` into a pipeline and pass the script in
/// ``RedisConnection/pipeline(_:scripts:)``'s `scripts:` so the connection can load it
/// when the server answers `NOSCRIPT`.
public struct RedisScript: Sendable, Hashable {
    /// The Lua source.
    public let source: String
    /// The lowercase hex SHA-1 of `source`'s UTF-8 bytes.
    public let sha1: String

    /// Wraps `source` and computes its SHA-1.
    public init(_ source: String) {
        self.source = source
        // Only to name the script as Redis does; SHA-1's weakness does not matter here.
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(40)
        for byte in Insecure.SHA1.hash(data: Array(source.utf8)) {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0f)])
        }
        self.sha1 = String(decoding: hex, as: UTF8.self)
    }

    /// `EVALSHA sha1 numkeys key... arg...`, ready for ``RedisConnection/pipeline(_:scripts:)``
    /// or ``RedisConnection/send(_:)``.
    public func evalshaCommand(keys: [[UInt8]], args: [[UInt8]]) -> [[UInt8]] {
        [Array("EVALSHA".utf8), Array(sha1.utf8), Array(String(keys.count).utf8)] + keys + args
    }

    /// `EVALSHA` with text keys and arguments.
    public func evalshaCommand(keys: [String] = [], args: [String] = []) -> [[UInt8]] {
        evalshaCommand(keys: keys.map { Array($0.utf8) }, args: args.map { Array($0.utf8) })
    }

}
