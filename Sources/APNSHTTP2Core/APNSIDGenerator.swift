import Synchronization

/// Hands out `apns-id` values (§3.3): canonical lower-case UUIDs (version 4 layout), unique for
/// the generator's lifetime and, with a random base, across generators.
///
/// `UUID()` costs a call into the system's random source per request; at tens of thousands of
/// requests per second that showed in profiles. Here the randomness is drawn once, and each ID
/// adds a counter to the base's low 62 bits (the version and variant bits stay fixed).
public final class APNSIDGenerator: Sendable {
    private let high: UInt64
    private let low: UInt64
    private let counter = Atomic<UInt64>(0)

    public convenience init() {
        var random = SystemRandomNumberGenerator()
        self.init(high: random.next(), low: random.next())
    }

    /// A generator with a fixed base, for tests.
    public init(high: UInt64, low: UInt64) {
        // Version 4 in bits 76-79, variant 10 in bits 62-63.
        self.high = (high & ~0xF000) | 0x4000
        self.low = low
    }

    /// The next ID.
    public func next() -> String {
        let n = counter.wrappingAdd(1, ordering: .relaxed).oldValue
        return Self.format(high: high, low: ((low &+ n) & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000)
    }

    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` of the 128 bits `high`:`low`.
    static func format(high: UInt64, low: UInt64) -> String {
        String(unsafeUninitializedCapacity: 36) { out in
            var i = 0
            func put(_ value: UInt64, _ digits: Int) {
                var shift = (digits - 1) * 4
                for _ in 0..<digits {
                    let nibble = UInt8((value >> UInt64(shift)) & 0xF)
                    out[i] = nibble < 10 ? nibble + UInt8(ascii: "0") : nibble + (UInt8(ascii: "a") - 10)
                    i += 1
                    shift -= 4
                }
            }
            func dash() {
                out[i] = UInt8(ascii: "-")
                i += 1
            }
            put(high >> 32, 8)
            dash()
            put((high >> 16) & 0xFFFF, 4)
            dash()
            put(high & 0xFFFF, 4)
            dash()
            put(low >> 48, 4)
            dash()
            put(low & 0xFFFF_FFFF_FFFF, 12)
            return i
        }
    }
}
