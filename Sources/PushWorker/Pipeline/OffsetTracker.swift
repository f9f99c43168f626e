import DequeModule
import PushKafka

/// Which offsets of `apn.requests` may be committed.
///
/// Each consumed message is registered with the number of results it still waits for. A
/// partition's committable offset is the offset of its oldest message with results still
/// outstanding, or one past the newest message when none are: an offset is never committed
/// before every result of that message and of all earlier messages of the partition is written.
struct OffsetTracker {
    private struct Partition {
        /// Registered messages in offset order with their outstanding result counts.
        var messages = Deque<(offset: Int64, remaining: Int)>()
        /// One past the newest registered message.
        var end: Int64 = -1
        /// The last offset committed (or handed to a commit).
        var committed: Int64 = -1

        mutating func dropFinished() {
            while let first = messages.first, first.remaining == 0 { messages.removeFirst() }
        }

        var committable: Int64 { messages.first?.offset ?? end }
    }

    private var partitions: [TopicPartition: Partition] = [:]

    /// Messages with results outstanding, over all partitions.
    private(set) var outstandingMessages = 0

    /// Registers a message that will produce `results` results (0: nothing to wait for).
    /// A message at or before the newest one registered restarts the partition's tracking,
    /// as happens when a partition is consumed again from its committed offset.
    mutating func register(_ partition: TopicPartition, offset: Int64, results: Int) {
        // Changed in place (one lookup, and the deque is not copied).
        let outstanding = Self.register(&partitions[partition, default: Partition()], offset: offset, results: results)
        outstandingMessages += outstanding
    }

    /// ``register(_:offset:results:)`` on one partition's state; returns the change in
    /// outstanding messages.
    private static func register(_ state: inout Partition, offset: Int64, results: Int) -> Int {
        var change = 0
        if offset < state.end {
            change -= state.messages.count(where: { $0.remaining > 0 })
            state.messages.removeAll()
            state.committed = min(state.committed, offset)
        }
        state.end = offset + 1
        if results > 0 {
            state.messages.append((offset, results))
            change += 1
        }
        state.dropFinished()
        return change
    }

    /// Records that `count` results of the message were written. Unknown messages (of a
    /// partition since revoked or restarted) are ignored.
    mutating func complete(_ partition: TopicPartition, offset: Int64, count: Int = 1) {
        guard let index = partitions.index(forKey: partition) else { return }
        // Changed in place (no second lookup, and the deque is not copied).
        if Self.complete(&partitions.values[index], offset: offset, count: count) { outstandingMessages -= 1 }
    }

    /// ``complete(_:offset:count:)`` on one partition's state; returns whether its message has
    /// no result outstanding any more.
    private static func complete(_ state: inout Partition, offset: Int64, count: Int) -> Bool {
        // Binary search: messages are in offset order.
        var low = 0
        var high = state.messages.count
        while low < high {
            let mid = (low + high) / 2
            if state.messages[mid].offset < offset { low = mid + 1 } else { high = mid }
        }
        guard low < state.messages.count, state.messages[low].offset == offset, state.messages[low].remaining > 0 else { return false }
        state.messages[low].remaining = max(0, state.messages[low].remaining - count)
        let finished = state.messages[low].remaining == 0
        state.dropFinished()
        return finished
    }

    /// The offsets to commit now: those that moved since the last ``markCommitted(_:)``.
    func committable() -> [TopicPartitionOffset] {
        partitions.compactMap { partition, state in
            let offset = state.committable
            return offset > state.committed && offset >= 0 ? TopicPartitionOffset(partition, offset: offset) : nil
        }
    }

    mutating func markCommitted(_ offsets: [TopicPartitionOffset]) {
        for offset in offsets {
            guard var state = partitions[offset.topicPartition] else { continue }
            state.committed = max(state.committed, offset.offset)
            partitions[offset.topicPartition] = state
        }
    }

    /// The committable offset of every partition.
    func allPositions() -> [TopicPartitionOffset] {
        partitions.compactMap { partition, state in
            state.committable >= 0 ? TopicPartitionOffset(partition, offset: state.committable) : nil
        }
    }

    /// The committable offset of each partition in `selection` that has one, whether or not it
    /// was handed to a commit before (for a commit that must not rely on an earlier one).
    func positions(in selection: Set<TopicPartition>) -> [TopicPartitionOffset] {
        selection.compactMap { partition in
            guard let offset = partitions[partition]?.committable, offset >= 0 else { return nil }
            return TopicPartitionOffset(partition, offset: offset)
        }
    }

    /// Messages with results outstanding in `selection`.
    func outstanding(in selection: Set<TopicPartition>) -> Int {
        selection.reduce(0) { sum, partition in
            sum + (partitions[partition]?.messages.count(where: { $0.remaining > 0 }) ?? 0)
        }
    }

    /// Forgets partitions (revoked): their later completions are ignored.
    mutating func remove(_ selection: some Sequence<TopicPartition>) {
        for partition in selection {
            if let state = partitions.removeValue(forKey: partition) {
                outstandingMessages -= state.messages.count(where: { $0.remaining > 0 })
            }
        }
    }
}
