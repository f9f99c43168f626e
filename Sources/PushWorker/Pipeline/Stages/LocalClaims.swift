import PushKafka
import Synchronization

/// The notifications this process has claimed and not yet written a result for, by result id:
/// a copy of the same message's notification consumed meanwhile waits instead of claiming.
///
/// Every notification is looked up, added and removed once, so a result id (32 hex digits) is
/// kept as its 32 bytes in four integers: no string to retain and release in the table, and
/// comparisons of integers instead of `String`'s (the string keys were about 5% of the worker's
/// CPU in a profile of `bench-worker`; decoding the hex digits instead cost as much as it saved).
/// The keys live in a ``KeyTable`` rather than a `Dictionary` (see its comment and
/// `docs/architecture.md`, "Bytes per notification, and the worker's own tables").
final class LocalClaims: Sendable {
    /// A result id of 32 bytes (every id the worker makes): its UTF-8 in four integers.
    struct Key: Equatable {
        var words: (UInt64, UInt64, UInt64, UInt64)

        /// `nil` for an id of another length.
        init?(_ resultId: String) {
            let loaded = resultId.utf8.withContiguousStorageIfAvailable { bytes -> (UInt64, UInt64, UInt64, UInt64)? in
                guard bytes.count == 32 else { return nil }
                let raw = UnsafeRawBufferPointer(bytes)
                return (
                    raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self),
                    raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                    raw.loadUnaligned(fromByteOffset: 16, as: UInt64.self),
                    raw.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
                )
            }
            guard let words = loaded ?? nil else { return nil }
            self.words = words
        }

        fileprivate init(empty: ()) { words = (0, 0, 0, 0) }

        // Word by word: the tuples' own `==` is generic and went through `Equatable`'s witness
        // for each word (1.7% of the worker's samples).
        static func == (a: Key, b: Key) -> Bool {
            a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2 && a.words.3 == b.words.3
        }

        /// The first 16 bytes spread the keys well enough: an id is the hex of a digest, so they
        /// hold 64 bits of it (equality still compares all 32).
        fileprivate var hash: UInt64 {
            (words.0 ^ (words.1 &* 0x9E37_79B9_7F4A_7C15)) &* 0xFF51_AFD7_ED55_8CCD
        }
    }

    /// Message references by ``Key``: open addressing with linear probing, and removal by
    /// shifting the entries after a removed one back (no tombstones). Beside the slots, a byte
    /// per slot holds seven bits of its key's hash (0: empty), so that a probe reads a slot only
    /// when that byte matches: the bytes of a table sized for `maxInFlight` stay in the cache,
    /// the slots do not. Keys are already digests, so a multiply spreads them; `Dictionary` ran
    /// each through `Hasher` (SipHash) and read its keys and values from two arrays.
    struct KeyTable {
        private struct Slot {
            var key: Key
            var ref: MessageRef
        }
        private static let emptySlot = Slot(
            key: Key(empty: ()),
            ref: MessageRef(partition: TopicPartition(topic: "", partition: 0), offset: 0)
        )

        private var tags: [UInt8]
        private var slots: [Slot]
        private(set) var count = 0

        /// Room for `capacity` keys with half the slots free; it grows when three quarters are
        /// used (a claim or two past the in-flight limit must not rebuild a full table).
        init(capacity: Int = 0) {
            let n = Swift.max(16, capacity * 2)
            tags = Array(repeating: 0, count: n)
            slots = Array(repeating: Self.emptySlot, count: n)
        }

        /// Where `key`'s probe starts (the hash's high bits scaled to the slot count), and its tag.
        private func place(_ key: Key) -> (home: Int, tag: UInt8) {
            let hash = key.hash
            return (
                Int(truncatingIfNeeded: hash.multipliedFullWidth(by: UInt64(slots.count)).high),
                UInt8(truncatingIfNeeded: hash >> 24) | 0x80
            )
        }

        /// The slot holding `key`, or the empty one where the probe ends.
        private func find(_ key: Key) -> (index: Int, found: Bool, tag: UInt8) {
            var (i, tag) = place(key)
            while true {
                let t = tags[i]
                if t == 0 { return (i, false, tag) }
                if t == tag && slots[i].key == key { return (i, true, tag) }
                i += 1
                if i == tags.count { i = 0 }
            }
        }

        subscript(_ key: Key) -> MessageRef? {
            get {
                let (i, found, _) = find(key)
                return found ? slots[i].ref : nil
            }
            set {
                if let ref = newValue {
                    insert(key, ref)
                } else {
                    remove(key)
                }
            }
        }

        private mutating func insert(_ key: Key, _ ref: MessageRef) {
            var (i, found, tag) = find(key)
            if !found {
                if (count + 1) * 4 > tags.count * 3 {
                    grow()
                    (i, _, tag) = find(key)
                }
                count += 1
            }
            tags[i] = tag
            slots[i] = Slot(key: key, ref: ref)
        }

        private mutating func remove(_ key: Key) {
            var (hole, found, _) = find(key)
            guard found else { return }
            count -= 1
            // Each entry after the hole, up to the next empty slot, moves into it unless its
            // probe starts after the hole (it would no longer be found there).
            let n = tags.count
            var j = hole
            while true {
                j += 1
                if j == n { j = 0 }
                if tags[j] == 0 { break }
                let start = place(slots[j].key).home
                let fromStart = j >= start ? j - start : j + n - start
                let fromHole = j >= hole ? j - hole : j + n - hole
                if fromStart >= fromHole {
                    tags[hole] = tags[j]
                    slots[hole] = slots[j]
                    hole = j
                }
            }
            tags[hole] = 0
            slots[hole] = Self.emptySlot
        }

        private mutating func grow() {
            let (oldTags, oldSlots) = (tags, slots)
            tags = Array(repeating: 0, count: oldTags.count * 2)
            slots = Array(repeating: Self.emptySlot, count: oldTags.count * 2)
            count = 0
            for (tag, slot) in zip(oldTags, oldSlots) where tag != 0 { insert(slot.key, slot.ref) }
        }
    }

    private struct Table {
        var byKey: KeyTable
        /// Ids of another length (none the worker makes), by their text.
        var byText: [String: MessageRef] = [:]

        subscript(_ resultId: String, key key: Key?) -> MessageRef? {
            get { if let key { byKey[key] } else { byText[resultId] } }
            set { if let key { byKey[key] = newValue } else { byText[resultId] = newValue } }
        }
    }

    private let claims: Mutex<Table>

    /// Room for `capacity` claims from the start (the in-flight limit bounds how many are held),
    /// so that the table does not grow, moving everything it holds, as the worker gets busy.
    init(capacity: Int = 0) {
        claims = Mutex(Table(byKey: KeyTable(capacity: capacity)))
    }

    func holds(_ resultId: String, for ref: MessageRef) -> Bool {
        let key = Key(resultId)
        return claims.withLock { $0[resultId, key: key]?.isSameMessage(as: ref) ?? false }
    }

    func claim(_ candidates: [Candidate]) {
        let keys = candidates.map { Key($0.resultId) }
        claims.withLock { c in
            for (key, candidate) in zip(keys, candidates) { c[candidate.resultId, key: key] = candidate.ref }
        }
    }

    func forget(_ resultIds: [String]) {
        guard !resultIds.isEmpty else { return }
        let keys = resultIds.map(Key.init)
        claims.withLock { c in for (key, resultId) in zip(keys, resultIds) { c[resultId, key: key] = nil } }
    }
}
