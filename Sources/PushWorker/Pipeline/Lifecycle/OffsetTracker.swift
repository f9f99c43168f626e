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
        /// This ownership of the partition: the rebalance generation its first message was
        /// fetched at (see ``MessageRef/epoch``).
        var since: UInt64
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

        /// ``OffsetTracker/register(_:offset:results:epoch:)`` on this partition; returns the change
        /// in outstanding messages.
        mutating func register(offset: Int64, results: Int) -> Int {
            var change = 0
            if offset < end {
                change -= messages.count(where: { $0.remaining > 0 })
                messages.removeAll()
                committed = min(committed, offset)
            }
            end = offset + 1
            if results > 0 {
                messages.append((offset, results))
                change += 1
            }
            dropFinished()
            return change
        }

        /// ``OffsetTracker/complete(_:offset:epoch:count:)`` on this partition; returns whether its
        /// message has no result outstanding any more.
        mutating func complete(offset: Int64, count: Int) -> Bool {
            // Binary search: messages are in offset order.
            var low = 0
            var high = messages.count
            while low < high {
                let mid = (low + high) / 2
                if messages[mid].offset < offset { low = mid + 1 } else { high = mid }
            }
            guard low < messages.count, messages[low].offset == offset, messages[low].remaining > 0 else {
                return false
            }
            messages[low].remaining = max(0, messages[low].remaining - count)
            let finished = messages[low].remaining == 0
            dropFinished()
            return finished
        }
    }

    private var partitions: [TopicPartition: Partition] = [:]

    /// Messages with results outstanding, over all partitions.
    private(set) var outstandingMessages = 0

    /// Registers a message, fetched at rebalance generation `epoch`, that will produce `results` results
    /// (0: nothing to wait for). A message at or before the newest one registered restarts the
    /// partition's tracking, as happens when a partition is consumed again from its committed
    /// offset.
    mutating func register(_ partition: TopicPartition, offset: Int64, results: Int, epoch: UInt64 = 0) {
        // Changed in place: one lookup, and the deque is not copied.
        outstandingMessages += partitions[partition, default: Partition(since: epoch)].register(
            offset: offset,
            results: results
        )
    }

    /// Records that `count` results of the message, fetched at rebalance generation `epoch`, were
    /// written.
    /// Unknown messages (of a partition since revoked or restarted) are ignored, and so are
    /// those of an earlier ownership of the partition: a notification still in a pool when its
    /// partition was revoked may finish after the partition came back, and its message, consumed
    /// again, waits for the results of the new ownership's notifications.
    mutating func complete(_ partition: TopicPartition, offset: Int64, epoch: UInt64 = 0, count: Int = 1) {
        guard let index = partitions.index(forKey: partition), epoch >= partitions.values[index].since else { return }
        if partitions.values[index].complete(offset: offset, count: count) { outstandingMessages -= 1 }
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
