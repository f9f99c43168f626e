import CRdKafka
import Synchronization

/// The queues of a consumer's priority lanes (``KafkaConsumer/subscribe(lanes:)``): one per
/// topic, to which librdkafka forwards what it fetches for the topic's partitions once they are
/// assigned. The consumer's own queue then carries only rebalances and errors, and a poll
/// takes the lanes in order, so a higher lane's messages never wait behind a lower lane's,
/// however many of those were fetched first.
final class LaneQueues: Sendable {
    /// A queue handle, used only on the consumer's poll thread and in its rebalance callback.
    struct Queue: @unchecked Sendable {
        let pointer: OpaquePointer
    }
    private struct State {
        var lanes: [String: Int] = [:]
        var queues: [Queue] = []
    }
    private let state = Mutex(State())

    /// How long a poll waits on the highest lane before it looks at every queue again.
    static let wait: Duration = .milliseconds(10)

    /// Whether the consumer has lanes.
    var isActive: Bool { state.withLock { !$0.queues.isEmpty } }

    var queues: [Queue] { state.withLock { $0.queues } }

    /// Makes a queue for each of `topics`, in priority order.
    func open(_ rk: OpaquePointer, topics: [String]) throws(KafkaError) {
        var made: [Queue] = []
        for _ in topics {
            guard let queue = rd_kafka_queue_new(rk) else {
                made.forEach { rd_kafka_queue_destroy($0.pointer) }
                throw KafkaError(RD_KAFKA_RESP_ERR__FAIL, context: "Cannot make the queues of the lanes \(topics)")
            }
            made.append(Queue(pointer: queue))
        }
        let lanes = Dictionary(topics.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        let old = state.withLock { s in
            defer { (s.queues, s.lanes) = (made, lanes) }
            return s.queues
        }
        old.forEach { rd_kafka_queue_destroy($0.pointer) }
    }

    /// Forwards the fetched messages of newly assigned `partitions` to their lane's queue; runs
    /// in the rebalance callback. librdkafka keeps an application's forwarding when it starts
    /// fetching. A partition whose forwarding fails is read from the consumer's own queue.
    func forward(_ rk: OpaquePointer, _ partitions: [TopicPartition]) {
        let (lanes, queues) = state.withLock { ($0.lanes, $0.queues) }
        guard !queues.isEmpty else { return }
        for partition in partitions {
            guard let lane = lanes[partition.topic],
                let queue = rd_kafka_queue_get_partition(rk, partition.topic, partition.partition)
            else { continue }
            rd_kafka_queue_forward(queue, queues[lane].pointer)
            rd_kafka_queue_destroy(queue)
        }
    }

    /// Destroys the queues; before the client is destroyed.
    func close() {
        let queues = state.withLock { s in
            defer { s.queues = [] }
            return s.queues
        }
        queues.forEach { rd_kafka_queue_destroy($0.pointer) }
    }
}

extension ConsumerContext {
    /// Takes one polled `message` (destroying it): a message of a partition not being revoked is
    /// added to `messages`; a consumer error other than a partition's end is kept for the next
    /// poll to throw, and `false` says that this poll ends.
    func take(_ message: UnsafeMutablePointer<rd_kafka_message_t>, into messages: inout [KafkaMessage]) -> Bool {
        defer { rd_kafka_message_destroy(message) }
        let err = message.pointee.err
        if err == RD_KAFKA_RESP_ERR_NO_ERROR {
            // After any rebalance callback this call ran: librdkafka drops what it had fetched
            // for partitions that callback took away. A partition whose deferred revocation is
            // under way is paused; whatever of it was fetched before is its next owner's.
            if isRevoking(message) { return true }
            var copy = KafkaMessage(copying: message)
            copy.rebalanceGeneration = rebalanceGeneration
            messages.append(copy)
        } else if err != RD_KAFKA_RESP_ERR__PARTITION_EOF {
            setPendingError(consumerError(message))
            return false
        }
        return true
    }

    /// A poll with priority lanes: serves the consumer's queue (rebalances, errors) without
    /// waiting, then takes what the first `allowed` lanes hold, in order, up to `maxMessages`;
    /// while none of them holds anything, waits on the highest lane, up to `deadline`.
    func pollLanes(
        _ rk: OpaquePointer,
        _ allowed: Int,
        _ maxMessages: Int,
        _ deadline: ContinuousClock.Instant,
        into messages: inout [KafkaMessage]
    ) {
        let queues = lanes.queues.prefix(max(1, allowed)).map(\.pointer)
        guard let highest = queues.first else { return }
        while true {
            while messages.count < maxMessages, let event = rd_kafka_consumer_poll(rk, 0) {
                if !take(event, into: &messages) { return }
            }
            for queue in queues {
                while messages.count < maxMessages, let message = rd_kafka_consume_queue(queue, 0) {
                    if !take(message, into: &messages) { return }
                }
            }
            let remaining = deadline - .now
            if !messages.isEmpty || remaining <= .zero { return }
            if let message = rd_kafka_consume_queue(highest, min(remaining, LaneQueues.wait).timeoutMilliseconds) {
                if !take(message, into: &messages) { return }
            }
        }
    }
}

private func consumerError(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> KafkaError {
    let text = String(cString: rd_kafka_message_errstr(message))
    guard let rkt = message.pointee.rkt else { return KafkaError(message.pointee.err, "Consumer error: \(text)") }
    let partition = TopicPartition(
        topic: String(cString: rd_kafka_topic_name(rkt)),
        partition: message.pointee.partition
    )
    return KafkaError(message.pointee.err, "Consumer error on \(partition): \(text)")
}

extension KafkaMessage {
    init(copying message: UnsafeMutablePointer<rd_kafka_message_t>) {
        let m = message.pointee
        func bytes(_ pointer: UnsafeMutableRawPointer?, _ count: Int) -> [UInt8]? {
            pointer.map { Array(UnsafeRawBufferPointer(start: $0, count: count)) }
        }
        var headers: [KafkaHeader] = []
        var list: OpaquePointer?
        if rd_kafka_message_headers(message, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list {
            var name: UnsafePointer<CChar>?
            var value: UnsafeRawPointer?
            var size = 0
            var index = 0
            while rd_kafka_header_get_all(list, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(
                    KafkaHeader(
                        name.map { String(cString: $0) } ?? "",
                        value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
                    )
                )
                index += 1
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        self.init(
            topic: String(cString: rd_kafka_topic_name(m.rkt)),
            partition: m.partition,
            offset: m.offset,
            key: bytes(m.key, m.key_len),
            value: bytes(m.payload, m.len) ?? [],
            headers: headers,
            timestamp: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp,
            timestampType: timestampType == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? .logAppendTime : .createTime
        )
    }
}
