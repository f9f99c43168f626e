import PushKafka
import Testing

@testable import PushWorker

@Suite struct OffsetTrackerTests {
    let p0 = TopicPartition(topic: "t", partition: 0)
    let p1 = TopicPartition(topic: "t", partition: 1)

    @Test func commitsOnlyPastFullyWrittenMessages() {
        var tracker = OffsetTracker()
        tracker.register(p0, offset: 10, results: 2)
        tracker.register(p0, offset: 11, results: 1)
        tracker.register(p0, offset: 12, results: 1)
        #expect(tracker.committable() == [TopicPartitionOffset(p0, offset: 10)])
        tracker.complete(p0, offset: 11)
        tracker.complete(p0, offset: 12)
        // Offset 10 still has a result outstanding: nothing past it.
        #expect(tracker.committable() == [TopicPartitionOffset(p0, offset: 10)])
        tracker.complete(p0, offset: 10)
        #expect(tracker.committable() == [TopicPartitionOffset(p0, offset: 10)])
        tracker.complete(p0, offset: 10)
        #expect(tracker.committable() == [TopicPartitionOffset(p0, offset: 13)])
        #expect(tracker.outstandingMessages == 0)
    }

    @Test func markCommittedSuppressesRepeats() {
        var tracker = OffsetTracker()
        tracker.register(p0, offset: 0, results: 0)
        let first = tracker.committable()
        #expect(first == [TopicPartitionOffset(p0, offset: 1)])
        tracker.markCommitted(first)
        #expect(tracker.committable().isEmpty)
    }

    @Test func partitionsAreIndependent() {
        var tracker = OffsetTracker()
        tracker.register(p0, offset: 5, results: 1)
        tracker.register(p1, offset: 7, results: 1)
        tracker.complete(p1, offset: 7)
        #expect(
            Set(tracker.committable()) == [TopicPartitionOffset(p0, offset: 5), TopicPartitionOffset(p1, offset: 8)]
        )
        #expect(tracker.outstanding(in: [p0]) == 1)
        #expect(tracker.outstanding(in: [p1]) == 0)
    }

    @Test func removedPartitionsIgnoreLateCompletions() {
        var tracker = OffsetTracker()
        tracker.register(p0, offset: 5, results: 1)
        tracker.remove([p0])
        tracker.complete(p0, offset: 5)
        #expect(tracker.committable().isEmpty)
        #expect(tracker.outstandingMessages == 0)
    }

    /// A notification still in a pool when its partition was revoked (a gateway outage) can
    /// finish after the partition came back to this worker and its message was consumed again:
    /// that late result must not count for the message's new notifications, or the offset
    /// would be committed while one of them is still unwritten.
    @Test func aCompletionFromAnEarlierOwnershipDoesNotCount() {
        var tracker = OffsetTracker()
        tracker.register(p0, offset: 5, results: 2, epoch: 0)
        tracker.remove([p0])
        // The partition comes back (revoked at epoch 1) and the message is consumed again.
        tracker.register(p0, offset: 5, results: 2, epoch: 1)
        tracker.complete(p0, offset: 5, epoch: 0)
        tracker.complete(p0, offset: 5, epoch: 1)
        #expect(tracker.committable() == [TopicPartitionOffset(p0, offset: 5)])
        #expect(tracker.outstandingMessages == 1)
        tracker.complete(p0, offset: 5, epoch: 1)
        #expect(tracker.committable() == [TopicPartitionOffset(p0, offset: 6)])
        #expect(tracker.outstandingMessages == 0)
    }

    @Test func consumingAgainFromAnEarlierOffsetRestartsThePartition() {
        var tracker = OffsetTracker()
        tracker.register(p0, offset: 5, results: 1)
        tracker.register(p0, offset: 6, results: 1)
        tracker.register(p0, offset: 5, results: 1)
        #expect(tracker.outstandingMessages == 1)
        tracker.complete(p0, offset: 5)
        #expect(tracker.committable() == [TopicPartitionOffset(p0, offset: 6)])
    }
}
