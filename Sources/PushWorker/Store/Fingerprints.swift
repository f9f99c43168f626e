import Crypto
import PushRedis
import Synchronization

/// What names a notification in its claims bucket (``RedisKeys``, `c:`): 128 bits of its
/// `resultId`. 64 of them choose its bucket, the other 64 are its field in the bucket's hash (a
/// signed 64-bit integer, which a `listpack` keeps in 9 bytes).
///
/// Every result id the worker makes is the lowercase hex of 16 bytes of a SHA-256 digest
/// (``WorkerResult/notificationId(jobId:token:)``, `docs/results.md`): its own 128 bits, decoded,
/// are as evenly spread as a digest of them would be, for a tenth of the cost of hashing it again
/// (about 0.2 µs per notification). Any other id is hashed: 128 bits of its SHA-256.
///
/// A distinct notification is taken for another only when its field equals one of the fields of
/// the (at most two) buckets it is looked up in: with `k` fields there, a chance of `k / 2^64`.
/// Buckets hold a few hundred fields at most (``FingerprintLayout``), so it is below `3 · 10^-17`
/// per notification, and still `5 · 10^-14` if a bucket grew to a million
/// (`docs/architecture.md#compact-state`).
struct NotificationFingerprint: Sendable, Equatable {
    /// The field in its bucket.
    let member: Int64
    /// ``member`` in decimal, as it goes into the commands that name it (a claim, its lookup in
    /// the generation before, its outcome's field, the outcome's deletion, a release): formatted
    /// once.
    let text: DecimalArgument
    /// Chooses the bucket (``FingerprintLayout/bucket(of:)``).
    let bucketBits: UInt64

    init(resultId: String) {
        if let (high, low) = Self.digestBits(resultId) {
            (member, bucketBits) = (Int64(bitPattern: high), low)
        } else {
            var id = resultId
            let digest = id.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
            (member, bucketBits) = digest.withUnsafeBytes {
                (
                    Int64(littleEndian: $0.loadUnaligned(as: Int64.self)),
                    UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
                )
            }
        }
        text = DecimalArgument(member)
    }

    /// The two 64-bit halves of an id of 32 lowercase hex digits, first digits first; `nil` for
    /// any other id.
    static func digestBits(_ id: String) -> (UInt64, UInt64)? {
        let decoded = id.utf8.withContiguousStorageIfAvailable { hex -> (UInt64, UInt64)? in
            guard hex.count == 32 else { return nil }
            var halves: (UInt64, UInt64) = (0, 0)
            var invalid: UInt8 = 0
            for index in 0..<32 {
                let c = hex[index]
                let digit: UInt8
                if c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") {
                    digit = c &- UInt8(ascii: "0")
                } else if c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f") {
                    digit = c &- UInt8(ascii: "a") &+ 10
                } else {
                    digit = 0
                    invalid = 1
                }
                if index < 16 {
                    halves.0 = halves.0 << 4 | UInt64(digit)
                } else {
                    halves.1 = halves.1 << 4 | UInt64(digit)
                }
            }
            return invalid == 0 ? halves : nil
        }
        return decoded ?? nil
    }
}

/// How claims are spread over keys: `c:<T><generation>:<bucket>`.
///
/// A generation is ``period`` seconds (the dedupe TTL) of UNIX time. A notification is claimed in
/// the generation current when it is claimed, whose keys expire two periods after the generation
/// began, and looked up in the current generation and the one before: it is found for at least
/// one period after its claim and gone after two.
///
/// On a server the buckets of a generation are ``buckets`` keys; on a cluster each of the 16,384
/// token tags has ``buckets`` ÷ 16,384 of them (at least one), in its slot, so that a
/// notification's claim shares a slot with its token's other keys.
struct FingerprintLayout: Sendable {
    /// The dedupe TTL in seconds.
    let period: Int64
    /// Buckets per generation (over all tags on a cluster).
    let buckets: Int
    let isCluster: Bool

    /// The default: 65,536 buckets keep about 15 fields each for a million notifications per
    /// period and stay `listpack`s (128 fields, Redis' default `hash-max-listpack-entries`) up
    /// to about 6 million.
    static let defaultBuckets = 65_536

    init(period: Int64, buckets: Int = FingerprintLayout.defaultBuckets, isCluster: Bool) {
        self.period = max(1, period)
        self.buckets = max(1, buckets)
        self.isCluster = isCluster
    }

    /// Buckets per key tag: all of them on a server.
    var bucketsPerTag: Int { isCluster ? max(1, buckets / 16_384) : buckets }

    func generation(at unixSeconds: Int64) -> Int64 { unixSeconds / period }

    /// The UNIX time at which a generation's keys expire.
    func expiry(of generation: Int64) -> Int64 { (generation + 2) * period }

    func bucket(of fingerprint: NotificationFingerprint) -> Int {
        Int(fingerprint.bucketBits % UInt64(bucketsPerTag))
    }

    /// A bucket's place among all the buckets of a generation, for ``FingerprintExpiries``.
    func place(bucket: Int, tag: UInt16?) -> Int { Int(tag ?? 0) * bucketsPerTag + bucket }

    /// How many places ``place(bucket:tag:)`` gives.
    var places: Int { isCluster ? 16_384 * bucketsPerTag : buckets }
}

/// The buckets whose expiry this worker has set in the current generation: a bucket's key is
/// given its expiry (`EXPIREAT`) with the first field this worker writes into it in a
/// generation, not with every one; a bucket never empties (a released claim stays as `F`), so
/// it keeps it. One bit per bucket.
struct FingerprintExpiries: Sendable {
    private var generation: Int64 = -1
    private var set: [UInt64] = []

    /// Whether the bucket at `place` still needs its expiry in `generation`. Marks it as set:
    /// call ``forget(_:generation:)`` if the write that set it failed.
    mutating func needsExpiry(place: Int, generation: Int64, places: Int) -> Bool {
        if generation != self.generation {
            self.generation = generation
            set = [UInt64](repeating: 0, count: (places + 63) / 64)
        }
        let (word, bit) = (place / 64, UInt64(1) << UInt64(place % 64))
        guard word < set.count, set[word] & bit == 0 else { return false }
        set[word] |= bit
        return true
    }

    /// Unmarks buckets whose expiry was not written.
    mutating func forget(_ places: [Int], generation: Int64) {
        guard generation == self.generation else { return }
        for place in places where place / 64 < set.count { set[place / 64] &= ~(UInt64(1) << UInt64(place % 64)) }
    }
}

/// ``FingerprintExpiries`` shared by a worker's stores (its claim and its state connections
/// write the same buckets).
final class SharedFingerprintExpiries: Sendable {
    private let expiries = Mutex(FingerprintExpiries())

    init() {}

    func withLock(_ body: (inout FingerprintExpiries) -> Void) {
        expiries.withLock { body(&$0) }
    }
}
