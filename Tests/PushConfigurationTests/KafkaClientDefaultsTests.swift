import PushConfiguration
import Testing

/// The librdkafka properties the worker sets itself, as its clients get them.
@Test func kafkaClientDefaults() {
    let defaults = WorkerConfiguration.KafkaClientDefaults()
    #expect(defaults.clientProperties == ["socket.nagle.disable": "true"])
    #expect(defaults.producerProperties == ["linger.ms": "2"])
    #expect(
        defaults.consumerProperties == [
            "session.timeout.ms": "10000",
            "heartbeat.interval.ms": "1000",
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": "200",
        ]
    )
    #expect(defaults.consumerForcedProperties == ["enable.auto.commit": "true", "enable.auto.offset.store": "false"])
    var changed = defaults
    changed.autoOffsetReset = .latest
    changed.producerLingerMs = 5
    #expect(changed.consumerProperties["auto.offset.reset"] == "latest")
    #expect(changed.producerProperties == ["linger.ms": "5"])
}
