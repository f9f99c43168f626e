import Crypto

/// What a claim (``RedisKeys`` `c:`) holds while its notification is remembered: 16 bytes, the
/// claiming owner's name and its message's, 8 bytes each. Public so that tools and tests can
/// read a claims bucket.
public enum ClaimNames {
    /// What names an owner (a worker incarnation, as the store knows it) in its claims: the
    /// first 8 bytes of the SHA-256 of its name. Incarnations are named uniquely: two of `n`
    /// share an id with a chance of about `n² / 2^65`.
    public static func owner(_ name: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(name.utf8)).prefix(8))
    }

    /// What names a notification's message in its claim: a 64-bit hash of its topic, partition
    /// and offset (FNV-1a, then SplitMix64's finalizer to spread it), little-endian. A claim's
    /// message is compared with the claiming message's by this alone: a duplicate job in another
    /// message is taken for the message itself with a chance of 2^-64 (it is then neither sent
    /// nor answered, as a duplicate, unless that claim is taken over from a dead owner).
    public static func message(topic: String, partition: Int32, offset: Int64) -> [UInt8] {
        var key = [UInt8](repeating: 0, count: 8)
        appendMessage(topic: topic, partition: partition, offset: offset, to: &key, at: 0)
        return key
    }

    /// Writes ``message(topic:partition:offset:)`` into `bytes[at..<at+8]`.
    static func appendMessage(topic: String, partition: Int32, offset: Int64, to bytes: inout [UInt8], at: Int) {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in topic.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0100_0000_01B3 }
        hash = (hash ^ 0xFF) &* 0x0100_0000_01B3
        for shift in stride(from: 0, to: 32, by: 8) {
            hash = (hash ^ UInt64(UInt32(bitPattern: partition) >> UInt32(shift) & 0xFF)) &* 0x0100_0000_01B3
        }
        for shift in stride(from: 0, to: 64, by: 8) {
            hash = (hash ^ (UInt64(bitPattern: offset) >> UInt64(shift) & 0xFF)) &* 0x0100_0000_01B3
        }
        hash = (hash ^ (hash >> 30)) &* 0xBF58_476D_1CE4_E5B9
        hash = (hash ^ (hash >> 27)) &* 0x94D0_49BB_1331_11EB
        hash ^= hash >> 31
        for n in 0..<8 { bytes[at + n] = UInt8(truncatingIfNeeded: hash >> UInt64(8 * n)) }
    }
}
