/// Redis Cluster's key-to-slot rule: CRC16 (XMODEM) of the key, modulo 16384, where a key
/// with a non-empty `{hash tag}` is hashed by the tag alone, so `{user:1}:a` and
/// `{user:1}:b` share a slot (and may be used together in one script or `MGET`).
public enum RedisClusterSlot {
    /// The number of slots in a cluster.
    public static let count = 16384

    /// The slot of `key`.
    public static func of(_ key: some Collection<UInt8>) -> Int {
        of(ArraySlice(key))
    }

    /// The slot of `key`.
    public static func of(_ key: ArraySlice<UInt8>) -> Int {
        var hashed = key
        // "if the key contains a {... and if there is a } to the right of {, and if there are
        // one or more characters between the first occurrence of { and the first occurrence
        // of } after it, then instead of hashing the key, only what is between is hashed."
        if let open = key.firstIndex(of: UInt8(ascii: "{")),
            let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1
        {
            hashed = key[(open + 1)..<close]
        }
        return Int(crc16(hashed) & 0x3FFF)
    }

    /// The slot of a text key.
    public static func of(_ key: String) -> Int {
        of(Array(key.utf8))
    }

    /// The slot a command addresses: its first key, or `nil` for a command without keys
    /// (`PING`, `SCRIPT LOAD`, an `EVALSHA` with no keys), which any primary can answer.
    static func of(command: [[UInt8]]) -> Int? {
        keyIndex(of: command).map { of(command[$0]) }
    }

    /// Where a command's first key is among its arguments, `nil` for a command without keys.
    static func keyIndex(of command: [[UInt8]]) -> Int? {
        guard command.count >= 2 else { return nil }
        let name = command[0]
        if name.count >= 4, name.count <= 10, let text = String(validating: name, as: UTF8.self),
            ["EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"].contains(text.uppercased())
        {
            guard command.count >= 4, let numkeys = Int(String(decoding: command[2], as: UTF8.self)), numkeys > 0 else {
                return nil
            }
            return 3
        }
        if let text = String(validating: name, as: UTF8.self),
            ["PING", "INFO", "SCRIPT", "CLUSTER", "DBSIZE", "ECHO", "CLIENT", "CONFIG", "FLUSHALL", "FLUSHDB", "TIME"]
                .contains(text.uppercased())
        {
            return nil
        }
        return 1
    }

    /// Whether a command runs a script by its SHA-1 (`EVALSHA`, `EVALSHA_RO`).
    static func isEvalsha(_ command: [[UInt8]]) -> Bool {
        guard command.count >= 2, let name = String(validating: command[0], as: UTF8.self) else { return false }
        return ["EVALSHA", "EVALSHA_RO"].contains(name.uppercased())
    }

    /// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as in Redis' `crc16.c`.
    static func crc16(_ bytes: ArraySlice<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc = (crc << 8) ^ table[Int((crc >> 8) ^ UInt16(byte)) & 0xFF]
        }
        return crc
    }

    private static let table: [UInt16] = (0..<256).map { index in
        var crc = UInt16(index) << 8
        for _ in 0..<8 {
            crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
        }
        return crc
    }
}
