import PushKafka
import PushKafkaEmbedded
import Testing

/// The fault commands of `apn-worker kafka-embedded --control`, parsed and applied to a cluster.
@Suite(.timeLimit(.minutes(2)))
struct EmbeddedKafkaControlTests {
    @Test func everyCommandFormParses() throws {
        #expect(try EmbeddedKafkaCommand.parse("down 2") == .brokerDown(2))
        #expect(try EmbeddedKafkaCommand.parse("up all") == .brokerUp(nil))
        #expect(try EmbeddedKafkaCommand.parse("rtt 1 250") == .roundTripTime(broker: 1, .milliseconds(250)))
        #expect(
            try EmbeddedKafkaCommand.parse("leader apn.requests all 3")
                == .leader(topic: "apn.requests", partition: nil, broker: 3)
        )
        #expect(
            try EmbeddedKafkaCommand.parse("leader apn.results 4 none")
                == .leader(topic: "apn.results", partition: 4, broker: nil)
        )
        #expect(
            try EmbeddedKafkaCommand.parse("coordinator apn-worker 2") == .coordinator(group: "apn-worker", broker: 2)
        )
        #expect(
            try EmbeddedKafkaCommand.parse("errors OffsetCommit COORDINATOR_LOAD_IN_PROGRESS 5")
                == .errors(broker: nil, .offsetCommit, .coordinatorLoadInProgress, count: 5, delay: .zero)
        )
        #expect(
            try EmbeddedKafkaCommand.parse("errors heartbeat 16")
                == .errors(broker: nil, .heartbeat, .notCoordinator, count: 1, delay: .zero)
        )
        #expect(
            try EmbeddedKafkaCommand.parse("broker-errors 2 Produce NOT_ENOUGH_REPLICAS 3 100")
                == .errors(broker: 2, .produce, .notEnoughReplicas, count: 3, delay: .milliseconds(100))
        )
        #expect(try EmbeddedKafkaCommand.parse("broker-errors 1 Fetch _TRANSPORT")?.transportCut == true)
        #expect(try EmbeddedKafkaCommand.parse("clear-errors Fetch") == .clearErrors(.fetch))
        #expect(
            try EmbeddedKafkaCommand.parse("topic t 6 3") == .createTopic("t", partitions: 6, replicationFactor: 3)
        )
        #expect(try EmbeddedKafkaCommand.parse("  ") == nil)
        #expect(try EmbeddedKafkaCommand.parse("# a comment") == nil)
        #expect(try EmbeddedKafkaCommand.parse("help") == nil)
    }

    @Test func aMalformedCommandIsRefusedWithItsForm() {
        for (line, expected) in [
            ("down", "expected down BROKER|all"),
            ("down 0", "not a broker id"),
            ("leader t x 1", "not a number"),
            ("errors Gossip REQUEST_TIMED_OUT", "unknown request type \"Gossip\""),
            ("errors Produce NOT_AN_ERROR", "unknown error \"NOT_AN_ERROR\""),
            ("reboot 1", "unknown command \"reboot\""),
        ] {
            let error = #expect(throws: KafkaError.self) { try EmbeddedKafkaCommand.parse(line) }
            #expect(error?.message.contains(expected) == true, "\(line): \(String(describing: error))")
        }
    }

    @Test func aTopicLedByABrokerThatIsDownCannotBeWrittenUntilItIsUp() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 2)
        defer { cluster.shutdown() }
        let topic = uniqueName("led")
        let partitions = [topic: Int32(2)]
        for line in ["topic \(topic) 2 2", "leader \(topic) all 2", "down 2"] {
            try EmbeddedKafkaCommand.parse(line)?.apply(to: cluster, partitions: partitions)
        }
        let producer = try KafkaProducer(configuration: producerConfiguration(cluster, ["message.timeout.ms": "1500"]))
        let refused = try await producer.send([KafkaOutgoingMessage(topic: topic, key: nil, value: bytes("x"))])
        #expect(throws: KafkaError.self) { try refused[0].get() }
        try EmbeddedKafkaCommand.parse("up 2")?.apply(to: cluster, partitions: partitions)
        await producer.close()
        // A new producer: the first one may be waiting out its reconnection back-off.
        let second = try KafkaProducer(configuration: producerConfiguration(cluster))
        let accepted = try await second.send([KafkaOutgoingMessage(topic: topic, key: nil, value: bytes("y"))])
        #expect(throws: Never.self) { try accepted[0].get() }
        await second.close()
    }

    @Test func anInjectedErrorFailsTheNextRequestOfItsType() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        defer { cluster.shutdown() }
        let topic = uniqueName("errors")
        try cluster.createTopic(topic, partitions: 1)
        // No retries, so that the injected error reaches the caller.
        let producer = try KafkaProducer(
            configuration: producerConfiguration(cluster, ["enable.idempotence": "false", "retries": "0", "acks": "1"])
        )
        let first = try await producer.send([KafkaOutgoingMessage(topic: topic, key: nil, value: bytes("warm"))])
        _ = try first[0].get()
        try EmbeddedKafkaCommand.parse("errors Produce NOT_ENOUGH_REPLICAS 1")?.apply(to: cluster, partitions: [:])
        let failed = try await producer.send([KafkaOutgoingMessage(topic: topic, key: nil, value: bytes("x"))])
        let error = #expect(throws: KafkaError.self) { try failed[0].get() }
        #expect(error?.name == "NOT_ENOUGH_REPLICAS", "\(String(describing: error))")
        let next = try await producer.send([KafkaOutgoingMessage(topic: topic, key: nil, value: bytes("y"))])
        #expect(throws: Never.self) { try next[0].get() }
        await producer.close()
    }
}

extension EmbeddedKafkaCommand {
    /// The command injects errors that cut the connection.
    fileprivate var transportCut: Bool {
        if case .errors(_, _, let error, _, _) = self { return error == .transport }
        return false
    }
}
