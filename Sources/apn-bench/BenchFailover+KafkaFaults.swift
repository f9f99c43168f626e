import PushKafka
import PushKafkaEmbedded
import PushLocalStack

/// The Kafka faults of `apn-bench failover`, on the embedded cluster: a broker down, partition
/// leadership moved, bursts of retriable errors, the group coordinator's broker down.
extension BenchFailover {
    static let kafkaScenarios = ["broker-down", "leader-moves", "request-errors", "coordinator-down"]

    /// The topics whose leaders the scenarios place and move.
    private static let topics = ["apn.requests", "apn.results"]

    /// Where a scenario's fault strikes: broker 1. Before the workers start, it is made to lead
    /// half the partitions of both topics (broker-down) or none of them while it coordinates
    /// both groups (coordinator-down); otherwise partition p is led by broker p mod brokers + 1.
    /// The result reader's group is coordinated by broker 2 unless the workers' group is.
    static func placeKafkaRoles(
        _ scenario: String,
        _ stack: LocalStack,
        brokers: Int,
        readerGroup: String
    ) throws {
        let others = Int32(brokers - 1)
        for topic in Self.topics {
            for partition in Int32(0)..<12 {
                let leader: Int32 =
                    switch scenario {
                    case "broker-down": partition < 6 ? 1 : 2 + partition % others
                    case "coordinator-down": 2 + partition % others
                    default: partition % Int32(brokers) + 1
                    }
                try stack.kafka.setPartitionLeader(topic: topic, partition: partition, broker: leader)
            }
        }
        let workerCoordinator: Int32 = scenario == "coordinator-down" ? 1 : 2
        try stack.kafka.setGroupCoordinator(group: stack.options.groupId ?? "apn-worker", broker: workerCoordinator)
        try stack.kafka.setGroupCoordinator(group: readerGroup, broker: 2)
    }

    /// Applies the scenario's fault, `faultSeconds` long; returns when it has ended.
    static func injectKafkaFault(_ scenario: String, _ stack: LocalStack, brokers: Int, faultSeconds: Int) async throws
    {
        let kafka = stack.kafka
        switch scenario {
        case "broker-down", "coordinator-down":
            try kafka.setBrokerDown(1)
            try await Task.sleep(for: .seconds(faultSeconds))
            try kafka.setBrokerUp(1)
        case "leader-moves":
            // Every partition to the next broker, then again `faultSeconds` later.
            for move in Int32(1)...2 {
                if move == 2 { try await Task.sleep(for: .seconds(faultSeconds)) }
                for topic in Self.topics {
                    for partition in Int32(0)..<12 {
                        let leader = (partition + move) % Int32(brokers) + 1
                        try kafka.setPartitionLeader(topic: topic, partition: partition, broker: leader)
                    }
                }
            }
        default:
            // request-errors: a burst every 3 s. Heartbeats and commits are few (a second apart
            // per member, every 200 ms per worker), so a burst fails about one of each per member;
            // produces and fetches are many, so theirs are larger.
            let bursts = max(1, faultSeconds / 3)
            for burst in 0..<bursts {
                if burst > 0 { try await Task.sleep(for: .seconds(3)) }
                // A produce's retriable failure is a cut connection: every request in flight on it
                // fails and is retried in order. (A refused produce, NOT_ENOUGH_REPLICAS, while
                // later ones are in flight can lose a batch on this broker: docs/simulator.md.)
                kafka.pushRequestErrors(.produce, Array(repeating: .transport, count: 5))
                kafka.pushRequestErrors(.fetch, Array(repeating: .notLeaderForPartition, count: 20))
                kafka.pushRequestErrors(.offsetCommit, Array(repeating: .coordinatorLoadInProgress, count: 5))
                kafka.pushRequestErrors(.heartbeat, Array(repeating: .notCoordinator, count: 3))
            }
            try await Task.sleep(for: .seconds(3))
            for request in [KafkaRequestType.produce, .fetch, .offsetCommit, .heartbeat] {
                kafka.clearRequestErrors(request)
            }
        }
    }
}
