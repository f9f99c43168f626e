import DequeModule

/// Values by tag, for tags handed out in increasing order and mostly given back in about that
/// order (a pool's outcomes): a ring indexed by the tag, so that neither putting a value in nor
/// taking it out hashes anything. A dictionary keyed by tag paid for hashing on both, and its
/// removal moved and rehashed the entries after the removed one.
///
/// Bounded by what it holds, not by the tags' span: a value still held when `span` newer tags
/// have been handed out (a notification queued through its gateway's outage, while other apps'
/// notifications go on) moves to a dictionary, so the ring never holds more than `span` slots.
struct TagTable<Value> {
    private var ring = Deque<Value?>()
    /// The tag of `ring`'s first slot.
    private var base: UInt64
    /// Values older than the ring's span.
    private var overflow: [UInt64: Value] = [:]
    private let span: Int
    /// Values held.
    private(set) var count = 0

    init(firstTag: UInt64 = 1, span: Int = 1 << 16) {
        precondition(span > 0)
        base = firstTag
        self.span = span
    }

    /// Puts a value in under the next tag, which it returns.
    mutating func insert(_ value: Value) -> UInt64 {
        let tag = base + UInt64(ring.count)
        ring.append(value)
        count += 1
        while ring.count > span {
            if let oldest = ring.removeFirst() { overflow[base] = oldest }
            base += 1
        }
        return tag
    }

    /// Takes out the value of `tag`; `nil` when it holds none (taken out already, or never put in).
    mutating func remove(_ tag: UInt64) -> Value? {
        if tag < base {
            guard let value = overflow.removeValue(forKey: tag) else { return nil }
            count -= 1
            return value
        }
        let index = tag - base
        guard index < UInt64(ring.count), let value = ring[Int(index)] else { return nil }
        ring[Int(index)] = nil
        count -= 1
        // Slots before the oldest value held are dropped.
        while case .some(.none) = ring.first {
            ring.removeFirst()
            base += 1
        }
        return value
    }

    /// The values held, in no particular order.
    func forEach(_ body: (Value) throws -> Void) rethrows {
        for case let value? in ring { try body(value) }
        for value in overflow.values { try body(value) }
    }
}
