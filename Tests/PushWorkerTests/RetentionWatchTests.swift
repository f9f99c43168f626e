import PushKafka
import Testing

@testable import PushWorker

/// How a worker finds jobs Kafka deleted before it read them: offsets are followed per partition
/// and ownership, and a jump is a loss only when the partition's oldest offset is past the one
/// expected.
@Suite struct RetentionWatchTests {
    static let p0 = TopicPartition(topic: "apn.requests", partition: 0)
    static let p1 = TopicPartition(topic: "apn.requests", partition: 1)

    static func message(_ offset: Int64, partition: Int32 = 0, epoch: UInt64 = 1) -> KafkaMessage {
        var message = StageTests.message("{}", offset: offset, partition: partition)
        message.rebalanceGeneration = epoch
        return message
    }

    @Test func theFirstMessageOfAnOwnershipAndEveryJumpOfMoreThanOneAreSuspects() {
        var watch = RetentionWatch()
        #expect(
            watch.note([Self.message(10), Self.message(11), Self.message(5, partition: 1)]) == [
                .init(partition: Self.p0, expected: nil, first: 10), .init(partition: Self.p1, expected: nil, first: 5),
            ]
        )
        // One offset skipped (a transaction marker) is not checked; more are.
        #expect(watch.note([Self.message(13), Self.message(14)]).isEmpty)
        #expect(watch.note([Self.message(40)]) == [.init(partition: Self.p0, expected: 15, first: 40)])
        // A new ownership starts over; a message of an older one is ignored.
        #expect(watch.note([Self.message(41, epoch: 2)]) == [.init(partition: Self.p0, expected: nil, first: 41)])
        #expect(watch.note([Self.message(90, epoch: 1)]).isEmpty)
    }

    @Test func aJumpIsALossOnlyUpToThePartitionsOldestOffset() {
        let suspects: [RetentionWatch.Suspect] = [
            .init(partition: Self.p0, expected: nil, first: 1335),
            .init(partition: Self.p1, expected: 15, first: 40),
        ]
        // Partition 0: committed at 120, oldest kept 1335: 1,215 lost. Partition 1: the oldest
        // kept is before the one expected, so the jump was markers or compaction, not retention.
        let losses = RetentionWatch.losses(
            of: suspects,
            committed: [Self.p0: 120],
            lowWatermarks: [Self.p0: 1335, Self.p1: 3]
        )
        #expect(losses == [.init(partition: Self.p0, from: 120, to: 1335)])
        #expect(losses.first?.count == 1215)
        // Nothing committed, or no watermark answered: not judged.
        #expect(
            RetentionWatch.losses(of: suspects, committed: [:], lowWatermarks: [Self.p1: 30]) == [
                .init(partition: Self.p1, from: 15, to: 30)
            ]
        )
        #expect(RetentionWatch.losses(of: suspects, committed: [Self.p0: 120], lowWatermarks: [:]).isEmpty)
    }
}
