extension WorkerConfiguration {
    /// The librdkafka properties the worker sets on its clients unless `kafka.properties` sets
    /// them (``clientProperties``, ``producerProperties``, ``consumerProperties``), and those it
    /// sets whatever `kafka.properties` says (``consumerForcedProperties``).
    public struct KafkaClientDefaults: Sendable, Hashable {
        /// librdkafka `auto.offset.reset`: where the consumer starts in a partition without a
        /// committed offset.
        public enum OffsetReset: String, Sendable, Hashable, CaseIterable {
            /// At the partition's first message.
            case earliest
            /// After the partition's last message.
            case latest
            /// Nowhere: the consumer reports an error.
            case error
        }

        /// `socket.nagle.disable`, both clients: requests go out at once instead of waiting for
        /// the previous segment's ACK (Nagle), which cost about 40 ms per acknowledged produce,
        /// and a result's latency includes an acknowledged produce.
        public var socketNagleDisable = true
        /// `linger.ms`, the producer: results are sent after at most 2 ms of gathering, so
        /// that one flush's results go in few requests without delaying them noticeably.
        public var producerLingerMs = 2
        /// `session.timeout.ms`, the consumer: a member that dies without leaving is noticed
        /// within 10 s (librdkafka's own default is 45 s).
        public var sessionTimeoutMs = 10_000
        /// `heartbeat.interval.ms`, the consumer: a rebalance reaches the members within a second.
        public var heartbeatIntervalMs = 1_000
        /// `auto.offset.reset`, the consumer: a partition the group has never committed is read
        /// from its start, so that jobs written before the first worker joined are delivered.
        public var autoOffsetReset = OffsetReset.earliest
        /// `auto.commit.interval.ms`, the consumer: the offsets stored are committed every
        /// 200 ms, so that a worker that dies leaves little to be consumed again.
        public var autoCommitIntervalMs = 200

        /// `enable.auto.commit`, the consumer, always: librdkafka commits the offsets the
        /// worker stores.
        public let enableAutoCommit = true
        /// `enable.auto.offset.store`, the consumer, always false: an offset is stored by the
        /// worker once the results of its message are written, never by librdkafka when the
        /// message is handed over, which the delivery guarantee rests on.
        public let enableAutoOffsetStore = false

        public init() {}

        /// The defaults of both clients, as librdkafka properties.
        public var clientProperties: [String: String] {
            ["socket.nagle.disable": String(socketNagleDisable)]
        }

        /// The producer's defaults, as librdkafka properties.
        public var producerProperties: [String: String] {
            ["linger.ms": String(producerLingerMs)]
        }

        /// The consumer's defaults, as librdkafka properties.
        public var consumerProperties: [String: String] {
            [
                "session.timeout.ms": String(sessionTimeoutMs),
                "heartbeat.interval.ms": String(heartbeatIntervalMs),
                "auto.offset.reset": autoOffsetReset.rawValue,
                "auto.commit.interval.ms": String(autoCommitIntervalMs),
            ]
        }

        /// The consumer's properties that `kafka.properties` cannot change.
        public var consumerForcedProperties: [String: String] {
            [
                "enable.auto.commit": String(enableAutoCommit),
                "enable.auto.offset.store": String(enableAutoOffsetStore),
            ]
        }
    }
}
