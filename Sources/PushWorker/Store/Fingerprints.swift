import Crypto
import Synchronization

/// What remembers a settled notification once its record is gone (``RedisKeys``, `f:`): 128 bits
/// of the SHA-256 of its `resultId`. 64 of them choose its bucket, the other 64 are the member
/// stored in the bucket's set (a signed 64-bit integer, so that a small set stays an `intset`:
/// 8 bytes a member).
///
/// A distinct notification is taken for a settled one only when its member equals one of the
/// members of the (at most two) buckets it is looked up in: with `k` members there, a chance of
/// `k / 2^64`. Buckets hold a few hundred members (``FingerprintLayout``), so it is about
/// `3 · 10^-17` per notification, and still `5 · 10^-14` if a bucket grew to a million
/// (`docs/architecture.md#compact-state`).
struct NotificationFingerprint: Sendable, Equatable {
    /// The set member.
    let member: Int64
    /// Chooses the bucket (``FingerprintLayout/bucket(of:)``).
    let bucketBits: UInt64

    init(resultId: String) {
        var id = resultId
        let digest = id.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
        (member, bucketBits) = digest.withUnsafeBytes {
            (
                Int64(littleEndian: $0.loadUnaligned(as: Int64.self)),
                UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            )
        }
    }
}

/// How fingerprints are spread over keys: `f:<T><generation>:<bucket>`.
///
/// A generation is ``period`` seconds (the dedupe TTL) of UNIX time. A fingerprint is written
/// into the generation current when its notification settles, whose keys expire two periods after
/// the generation began, and looked up in the current generation and the one before: it is
/// found for at least one period after it was written and gone after two.
///
/// On a server the buckets of a generation are ``buckets`` keys; on a cluster each of the 16,384
/// token tags has ``buckets`` ÷ 16,384 of them (at least one), in its slot, so that a
/// notification's record and its fingerprint share a slot.
struct FingerprintLayout: Sendable {
    /// The dedupe TTL in seconds.
    let period: Int64
    /// Buckets per generation (over all tags on a cluster).
    let buckets: Int
    let isCluster: Bool

    /// The default: 65,536 buckets keep about 15 fingerprints each for a million notifications
    /// per period and stay `intset`s (512 members, Redis' `set-max-intset-entries`) up to 30
    /// million.
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
/// given its expiry (`EXPIREAT`) with the first fingerprint this worker writes into it in a
/// generation, not with every one. One bit per bucket.
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

/// ``FingerprintExpiries`` shared by the store's callers.
typealias SharedFingerprintExpiries = Mutex<FingerprintExpiries>
