import PushKafka
import PushKafkaEmbedded
import Testing

/// A revocation says whether the assignment was lost (librdkafka's `rd_kafka_assignment_lost`):
/// the worker hands a lost one back at once instead of finishing and committing it.
@Suite(.timeLimit(.minutes(2)))
struct LostAssignmentTests {
    @Test func aMemberWhoseHeartbeatsGoUnansweredPastItsSessionReportsItsPartitionsLost() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        let (topic, group, all) = try fourPartitionTopic(on: cluster, "lost")
        let consumer = try KafkaConsumer(
            configuration: consumerConfiguration(cluster, group: group),
            revocation: .deferred
        )
        let lost = Recorder<Bool>()
        let drain = Task {
            for await event in consumer.rebalanceEvents {
                guard case .revoking(let partitions, _, let wasLost) = event else { continue }
                lost.append(wasLost)
                await consumer.completeRevocation(partitions)
            }
        }
        try consumer.subscribe(topics: [topic])
        try await pollUntil(consumer, owns: all, "the member owns every partition")
        #expect(lost.all.isEmpty, "revoked before the heartbeats went unanswered: \(lost.all)")

        // The coordinator answers the next heartbeats only after 8 s, past the 6 s session:
        // librdkafka gives the assignment up as lost.
        try cluster.pushRequestErrors(broker: 1, .heartbeat, Array(repeating: (.noError, .seconds(8)), count: 3))
        try await waitUntil("the member reports its revocation") {
            _ = try await consumer.poll(timeout: .milliseconds(100))
            return !lost.all.isEmpty
        }
        #expect(lost.all.first == true, "the revocation after a session timeout was not reported lost")
        try await consumer.close()
        await drain.value
        cluster.shutdown()
    }
}
