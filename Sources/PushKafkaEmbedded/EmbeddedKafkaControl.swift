import CRdKafka
import PushKafka

/// One line of `apn-worker kafka-embedded --control`: a fault injected into an
/// ``EmbeddedKafkaCluster``, or its end (docs/simulator.md, "Kafka faults").
public enum EmbeddedKafkaCommand: Sendable, Equatable {
    /// `down BROKER|all`
    case brokerDown(Int32?)
    /// `up BROKER|all`
    case brokerUp(Int32?)
    /// `rtt BROKER|all MILLISECONDS`
    case roundTripTime(broker: Int32?, Duration)
    /// `leader TOPIC PARTITION|all BROKER|none` (`partition` nil: every partition of the topic)
    case leader(topic: String, partition: Int32?, broker: Int32?)
    /// `coordinator GROUP BROKER`
    case coordinator(group: String, broker: Int32)
    /// `errors REQUEST ERROR [COUNT]`, or with `broker`: `broker-errors BROKER REQUEST ERROR [COUNT [DELAY_MS]]`
    case errors(broker: Int32?, KafkaRequestType, KafkaErrorCode, count: Int, delay: Duration)
    /// `clear-errors REQUEST`
    case clearErrors(KafkaRequestType)
    /// `topic NAME PARTITIONS [REPLICATION_FACTOR]`
    case createTopic(String, partitions: Int32, replicationFactor: Int32)

    /// The commands, one line each, as `help` answers.
    public static let usage = [
        "down BROKER|all", "up BROKER|all", "rtt BROKER|all MILLISECONDS", "leader TOPIC PARTITION|all BROKER|none",
        "coordinator GROUP BROKER", "errors REQUEST ERROR [COUNT]",
        "broker-errors BROKER REQUEST ERROR [COUNT [DELAY_MS]]", "clear-errors REQUEST",
        "topic NAME PARTITIONS [REPLICATION_FACTOR]", "help",
    ]

    /// The command of one line; nil for a blank line, a `#` comment or `help`.
    public static func parse(_ line: String) throws(KafkaError) -> EmbeddedKafkaCommand? {
        let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard let verb = words.first, !verb.hasPrefix("#"), verb != "help" else { return nil }
        let arguments = Array(words.dropFirst())
        switch verb {
        case "down", "up":
            try expect(arguments, 1...1, "\(verb) BROKER|all")
            let broker = try brokerOrAll(arguments[0])
            return verb == "down" ? .brokerDown(broker) : .brokerUp(broker)
        case "rtt":
            try expect(arguments, 2...2, "rtt BROKER|all MILLISECONDS")
            return try .roundTripTime(broker: brokerOrAll(arguments[0]), .milliseconds(number(arguments[1])))
        case "leader":
            try expect(arguments, 3...3, "leader TOPIC PARTITION|all BROKER|none")
            let partition: Int32? = try arguments[1] == "all" ? nil : Int32(number(arguments[1]))
            let broker: Int32? = try arguments[2] == "none" ? nil : brokerId(arguments[2])
            return .leader(topic: arguments[0], partition: partition, broker: broker)
        case "coordinator":
            try expect(arguments, 2...2, "coordinator GROUP BROKER")
            return try .coordinator(group: arguments[0], broker: brokerId(arguments[1]))
        case "errors":
            try expect(arguments, 2...3, "errors REQUEST ERROR [COUNT]")
            let count = try arguments.count > 2 ? number(arguments[2]) : 1
            return try .errors(broker: nil, request(arguments[0]), error(arguments[1]), count: count, delay: .zero)
        case "broker-errors":
            try expect(arguments, 3...5, "broker-errors BROKER REQUEST ERROR [COUNT [DELAY_MS]]")
            let count = try arguments.count > 3 ? number(arguments[3]) : 1
            let delay = try arguments.count > 4 ? number(arguments[4]) : 0
            return try .errors(
                broker: brokerId(arguments[0]),
                request(arguments[1]),
                error(arguments[2]),
                count: count,
                delay: .milliseconds(delay)
            )
        case "clear-errors":
            try expect(arguments, 1...1, "clear-errors REQUEST")
            return try .clearErrors(request(arguments[0]))
        case "topic":
            try expect(arguments, 2...3, "topic NAME PARTITIONS [REPLICATION_FACTOR]")
            let replicationFactor = try arguments.count > 2 ? number(arguments[2], max: 16) : 1
            return try .createTopic(
                arguments[0],
                partitions: Int32(number(arguments[1], max: 1000)),
                replicationFactor: Int32(replicationFactor)
            )
        default:
            throw invalid("unknown command \"\(verb)\"; the commands: \(usage.joined(separator: "; "))")
        }
    }

    /// Applies the command to `cluster`; `partitions` are the topics' partition counts, for
    /// `leader TOPIC all`.
    public func apply(to cluster: EmbeddedKafkaCluster, partitions: [String: Int32]) throws(KafkaError) {
        switch self {
        case .brokerDown(let broker):
            try cluster.setBrokerDown(broker)
        case .brokerUp(let broker):
            try cluster.setBrokerUp(broker)
        case .roundTripTime(let broker, let delay):
            try cluster.setRoundTripTime(broker: broker, delay)
        case .leader(let topic, let partition, let broker):
            guard let count = partitions[topic] else {
                throw Self.invalid("unknown topic \"\(topic)\": create it with `topic` first")
            }
            for p in partition.map({ [$0] }) ?? Array(0..<count) {
                try cluster.setPartitionLeader(topic: topic, partition: p, broker: broker)
            }
        case .coordinator(let group, let broker):
            try cluster.setGroupCoordinator(group: group, broker: broker)
        case .errors(let broker?, let request, let error, let count, let delay):
            try cluster.pushRequestErrors(
                broker: broker,
                request,
                Array(repeating: (error: error, delay: delay), count: count)
            )
        case .errors(nil, let request, let error, let count, _):
            cluster.pushRequestErrors(request, Array(repeating: error, count: count))
        case .clearErrors(let request):
            cluster.clearRequestErrors(request)
        case .createTopic(let name, let count, let replicationFactor):
            try cluster.createTopic(name, partitions: count, replicationFactor: replicationFactor)
        }
    }

    private static func invalid(_ message: String) -> KafkaError {
        KafkaError(RD_KAFKA_RESP_ERR__INVALID_ARG, message)
    }

    private static func expect(_ arguments: [String], _ counts: ClosedRange<Int>, _ form: String) throws(KafkaError) {
        guard counts.contains(arguments.count) else { throw invalid("expected \(form)") }
    }

    private static func number(_ text: String, max: Int = 1_000_000) throws(KafkaError) -> Int {
        guard let value = Int(text), (0...max).contains(value) else {
            throw invalid("\"\(text)\" is not a number from 0 to \(max)")
        }
        return value
    }

    private static func brokerId(_ text: String) throws(KafkaError) -> Int32 {
        guard let id = Int32(text), id >= 1 else { throw invalid("\"\(text)\" is not a broker id (1, 2, …)") }
        return id
    }

    private static func brokerOrAll(_ text: String) throws(KafkaError) -> Int32? {
        try text == "all" ? nil : brokerId(text)
    }

    private static func request(_ text: String) throws(KafkaError) -> KafkaRequestType {
        guard let type = KafkaRequestType(name: text) else {
            throw invalid(
                "unknown request type \"\(text)\"; known: \(KafkaRequestType.allCases.map(\.name).joined(separator: ", "))"
            )
        }
        return type
    }

    private static func error(_ text: String) throws(KafkaError) -> KafkaErrorCode {
        guard let code = KafkaErrorCode(name: text) else {
            throw invalid("unknown error \"\(text)\": a librdkafka error name (NOT_COORDINATOR) or code")
        }
        return code
    }
}
