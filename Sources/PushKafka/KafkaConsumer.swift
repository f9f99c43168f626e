import CRdKafka
import Dispatch
import Synchronization

/// A consumer-group member with manual offset management.
///
/// Defaults (overridable through the configuration):
/// `partition.assignment.strategy=cooperative-sticky`, `enable.auto.commit=false`,
/// `enable.auto.offset.store=false`. Offsets only advance through `commit(_:)`.
///
/// Rebalances happen inside `poll` (and `close`) on the consumer's poll thread:
/// the consumer applies them itself (incremental assign/unassign for the
/// COOPERATIVE protocol, full assign for EAGER) and reports them on
/// `rebalanceEvents`. Keep calling `poll` regularly, at least every
/// `max.poll.interval.ms`, or the group evicts this member.
public final class KafkaConsumer: Sendable {
    /// Assignment changes, after librdkafka applied them. Finishes when the consumer closes.
    public let rebalanceEvents: AsyncStream<KafkaRebalanceEvent>

    private let client: RdKafkaHandle
    private let context: ConsumerContext
    /// Runs `consumer_poll` and `consumer_close`, hence the rebalance callback.
    private let pollQueue = DispatchQueue(label: "PushKafka.KafkaConsumer.poll")
    /// Runs blocking offset requests so they need not wait for a poll in progress.
    private let offsetQueue = DispatchQueue(label: "PushKafka.KafkaConsumer.offsets")

    /// - Parameter onRevoke: called synchronously with partitions about to be taken
    ///   away, before the revocation is acknowledged to the group: finish or hand back
    ///   in-flight work and commit its offsets here. It runs on, and blocks, the poll
    ///   thread (no messages are fetched meanwhile); the group waits for it up to
    ///   `max.poll.interval.ms`. Do not call this consumer's `poll`/`close` from it.
    public init(
        configuration: KafkaConfiguration,
        onRevoke: @escaping @Sendable ([TopicPartition]) -> Void = { _ in }
    ) throws(KafkaError) {
        guard configuration.groupId?.isEmpty == false else {
            throw KafkaError(RD_KAFKA_RESP_ERR__INVALID_ARG, "KafkaConsumer requires the 'group.id' property")
        }
        let conf = try configuration.makeConf(defaults: [
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
        ])
        let (events, continuation) = AsyncStream.makeStream(of: KafkaRebalanceEvent.self)
        let context = ConsumerContext(onRevoke: onRevoke, events: continuation)
        // Balanced by the release after rd_kafka_destroy in deinit.
        let clientContext = Unmanaged.passRetained(ClientContext(logger: configuration.clientLogger, consumer: context))
        rd_kafka_conf_set_opaque(conf, clientContext.toOpaque())
        rd_kafka_conf_set_rebalance_cb(conf, rebalanceCallback)
        rd_kafka_conf_set_offset_commit_cb(conf, offsetCommitCallback)
        let rk: OpaquePointer
        do {
            rk = try makeClient(RD_KAFKA_CONSUMER, conf)
        } catch {
            clientContext.release()
            throw error
        }
        rd_kafka_poll_set_consumer(rk)
        self.client = RdKafkaHandle(rk)
        self.context = context
        self.rebalanceEvents = events
    }

    /// Closes (if `close()` was not called) and destroys the handle on the poll thread.
    deinit {
        let (client, context) = (client, context)
        pollQueue.async {
            if context.markClosed() { _ = rd_kafka_consumer_close(client.pointer) }
            let opaque = rd_kafka_opaque(client.pointer)
            rd_kafka_destroy(client.pointer)
            context.events.finish()
            if let opaque { Unmanaged<ClientContext>.fromOpaque(opaque).release() }
        }
    }

    /// Replaces the subscription. Assignment follows asynchronously, during `poll`.
    public func subscribe(topics: [String]) throws(KafkaError) {
        let list = makePartitionList(topics.map { TopicPartition(topic: $0, partition: -1) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_subscribe(client.pointer, list)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(err, context: "Cannot subscribe to \(topics)")
        }
    }

    /// Returns up to `maxMessages` messages, waiting at most `timeout` for the first one
    /// (an empty result means none arrived). Partition-EOF events are skipped; any
    /// other consumer error is thrown (after any messages already gathered have been
    /// returned, on the next call). Check `isFatal`: non-fatal errors (e.g. a
    /// subscribed topic that does not exist yet) leave the consumer usable.
    public func poll(maxMessages: Int = 1000, timeout: Duration) async throws(KafkaError) -> [KafkaMessage] {
        let (client, context) = (client, context)
        return try await pollQueue.run { () throws(KafkaError) in
            try context.checkUsable()
            let deadline = ContinuousClock.now + timeout
            var messages: [KafkaMessage] = []
            while messages.count < maxMessages {
                let wait = messages.isEmpty ? (deadline - .now).timeoutMilliseconds : 0
                guard let message = rd_kafka_consumer_poll(client.pointer, wait) else {
                    if messages.isEmpty && ContinuousClock.now < deadline { continue }
                    break
                }
                defer { rd_kafka_message_destroy(message) }
                let err = message.pointee.err
                if err == RD_KAFKA_RESP_ERR_NO_ERROR {
                    // After any rebalance callback this call ran: librdkafka drops what it had
                    // fetched for partitions that callback took away.
                    var copy = KafkaMessage(copying: message)
                    copy.rebalanceGeneration = context.rebalanceGeneration
                    messages.append(copy)
                } else if err != RD_KAFKA_RESP_ERR__PARTITION_EOF {
                    context.setPendingError(consumerError(message))
                    break
                }
            }
            if messages.isEmpty { try context.checkUsable() }
            return messages
        }
    }

    /// Synchronously commits explicit offsets (next offset to read = last processed + 1).
    public func commit(_ offsets: [TopicPartitionOffset]) async throws(KafkaError) {
        guard !offsets.isEmpty else { return }
        try await offsetQueue.run { () throws(KafkaError) in
            guard !self.context.isClosed else { throw .closed("KafkaConsumer") }
            try self.commitBlocking(offsets)
        }
    }

    /// Commits explicit offsets on the calling thread and waits up to `timeout` for the
    /// coordinator's answer. Meant for `onRevoke`, which runs on the poll thread while the
    /// revoked partitions still belong to this member (the generation is current, so the commit
    /// is accepted), before the group hands them to another member.
    ///
    /// The wait is bounded because an answer may never come: a commit made in a revoke while
    /// the consumer is closing can wait on the very rebalance it is part of. Without an answer
    /// it throws `_TIMED_OUT` (not retriable); the commit may still complete later.
    public func commitBlocking(_ offsets: [TopicPartitionOffset], timeout: Duration = .seconds(10)) throws(KafkaError) {
        guard !offsets.isEmpty else { return }
        let list = makePartitionList(offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        // The answer comes as an event on a queue of its own, which is polled with a deadline
        // (`rd_kafka_commit` with async 0 waits for it however long it takes).
        guard let queue = rd_kafka_queue_new(client.pointer) else {
            throw KafkaError(RD_KAFKA_RESP_ERR__FAIL, context: "Cannot commit \(offsets): no queue for the answer")
        }
        defer { rd_kafka_queue_destroy(queue) }
        let err = rd_kafka_commit_queue(client.pointer, list, queue, nil, nil)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(err, context: "Cannot commit \(offsets)")
        }
        let milliseconds = Int32(
            clamping: max(0, timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
        guard let event = rd_kafka_queue_poll(queue, milliseconds) else {
            throw KafkaError(
                RD_KAFKA_RESP_ERR__TIMED_OUT, "Cannot commit \(offsets): the coordinator did not answer within \(timeout)",
                isRetriable: false)
        }
        defer { rd_kafka_event_destroy(event) }
        let result = rd_kafka_event_error(event)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(result, context: "Cannot commit \(offsets)")
        }
        if let committed = rd_kafka_event_topic_partition_list(event) {
            try checkPartitionErrors(committed, "Cannot commit offset for")
        }
    }

    /// Stores offsets (next offset to read = last processed + 1) for librdkafka's automatic
    /// commit. With `enable.auto.commit=true` and `enable.auto.offset.store=false`, stored
    /// offsets are committed every `auto.commit.interval.ms`, before partitions are revoked
    /// and on `close()` — librdkafka picks moments when the group is not rebalancing, which
    /// explicit commits cannot. Partitions no longer assigned are skipped.
    ///
    /// - Returns: the offsets that were not stored (their partition is not assigned).
    @discardableResult
    public func store(_ offsets: [TopicPartitionOffset]) throws(KafkaError) -> [TopicPartitionOffset] {
        guard !offsets.isEmpty else { return [] }
        guard !context.isClosed else { throw .closed("KafkaConsumer") }
        let list = makePartitionList(offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_offsets_store(client.pointer, list)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__STATE && err != RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION {
            throw KafkaError(err, context: "Cannot store offsets \(offsets)")
        }
        return partitionElements(list).filter { $0.1 != RD_KAFKA_RESP_ERR_NO_ERROR }.map(\.0)
    }

    /// The group's committed offsets for `partitions`. Partitions without a committed
    /// offset are left out.
    public func committed(
        _ partitions: [TopicPartition], timeout: Duration = .seconds(10)
    ) async throws(KafkaError) -> [TopicPartitionOffset] {
        let (client, context) = (client, context)
        return try await offsetQueue.run { () throws(KafkaError) in
            guard !context.isClosed else { throw .closed("KafkaConsumer") }
            let list = makePartitionList(partitions)
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let err = rd_kafka_committed(client.pointer, list, timeout.timeoutMilliseconds)
            guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
                throw KafkaError(err, context: "Cannot fetch committed offsets for \(partitions)")
            }
            try checkPartitionErrors(list, "Cannot fetch committed offset for")
            return partitionElements(list).map(\.0).filter { $0.offset >= 0 }
        }
    }

    /// The low watermark (the oldest offset kept) and the high watermark (the offset the next
    /// message will get) of each of `partitions`, asked of the partitions' leaders. A partition
    /// whose leader does not answer within `timeout` is left out.
    public func watermarks(
        _ partitions: [TopicPartition], timeout: Duration = .seconds(2)
    ) async throws(KafkaError) -> [TopicPartition: (low: Int64, high: Int64)] {
        let (client, context) = (client, context)
        return try await offsetQueue.run { () throws(KafkaError) in
            guard !context.isClosed else { throw .closed("KafkaConsumer") }
            var marks: [TopicPartition: (low: Int64, high: Int64)] = [:]
            for partition in partitions {
                var low: Int64 = 0
                var high: Int64 = 0
                let err = rd_kafka_query_watermark_offsets(
                    client.pointer, partition.topic, partition.partition, &low, &high, timeout.timeoutMilliseconds)
                if err == RD_KAFKA_RESP_ERR_NO_ERROR { marks[partition] = (low, high) }
            }
            return marks
        }
    }

    /// Counts of what happened to this member since it was made.
    public var statistics: KafkaConsumerStatistics { context.statistics }

    /// True once this member completed a join of the group (its first assignment arrived, even
    /// an empty one): from then on `close()` can leave the group with a LeaveGroup.
    public var hasJoined: Bool { context.hasJoined }

    /// How many rebalance callbacks (assignments and revocations) this member has run. It moves
    /// at the start of each, so `onRevoke` reads the generation of its own revocation; every
    /// message `poll` returns carries the generation it was returned at.
    public var rebalanceGeneration: UInt64 { context.rebalanceGeneration }

    /// The partitions currently assigned to this member.
    public func assignment() throws(KafkaError) -> [TopicPartition] {
        var list: CPartitionList?
        let err = rd_kafka_assignment(client.pointer, &list)
        defer { if let list { rd_kafka_topic_partition_list_destroy(list) } }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: "Cannot read assignment") }
        return list.map { partitionElements($0).map(\.0.topicPartition) } ?? []
    }

    /// Stops fetching from `partitions` (they stay assigned); `poll` keeps serving rebalances.
    public func pause(_ partitions: [TopicPartition]) throws(KafkaError) {
        let list = makePartitionList(partitions)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_pause_partitions(client.pointer, list)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: "Cannot pause \(partitions)") }
        try checkPartitionErrors(list, "Cannot pause")
    }

    /// Resumes fetching from paused `partitions`.
    public func resume(_ partitions: [TopicPartition]) throws(KafkaError) {
        let list = makePartitionList(partitions)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_resume_partitions(client.pointer, list)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: "Cannot resume \(partitions)") }
        try checkPartitionErrors(list, "Cannot resume")
    }

    /// Leaves the group cleanly: revokes the assignment (calling `onRevoke`), lets the
    /// group rebalance without waiting for a session timeout, and finishes
    /// `rebalanceEvents`. Idempotent. Commits nothing by itself.
    public func close() async throws(KafkaError) {
        let (client, context) = (client, context)
        try await pollQueue.run { () throws(KafkaError) in
            guard context.markClosed() else { return }
            defer { context.events.finish() }
            let err = rd_kafka_consumer_close(client.pointer)
            guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: "Cannot close consumer") }
        }
    }
}

/// What the rebalance callback needs; reached through the handle's ``ClientContext``.
final class ConsumerContext: Sendable {
    let onRevoke: @Sendable ([TopicPartition]) -> Void
    let events: AsyncStream<KafkaRebalanceEvent>.Continuation
    private let state = Mutex<(closed: Bool, pendingError: KafkaError?)>((false, nil))
    private let joined = Atomic<Bool>(false)
    private let counts = Mutex(KafkaConsumerStatistics())

    var hasJoined: Bool { joined.load(ordering: .relaxed) }
    /// Rebalance callbacks so far (``KafkaConsumer/rebalanceGeneration``).
    private let generation = Atomic<UInt64>(0)
    var rebalanceGeneration: UInt64 { generation.load(ordering: .acquiring) }
    var statistics: KafkaConsumerStatistics { counts.withLock { $0 } }

    /// Counts an offset commit's outcome; runs on the poll thread. A commit with nothing to
    /// commit is neither.
    func committed(_ err: rd_kafka_resp_err_t) {
        guard err != RD_KAFKA_RESP_ERR__NO_OFFSET else { return }
        counts.withLock { err == RD_KAFKA_RESP_ERR_NO_ERROR ? ($0.commits += 1) : ($0.commitFailures += 1) }
    }

    init(onRevoke: @escaping @Sendable ([TopicPartition]) -> Void, events: AsyncStream<KafkaRebalanceEvent>.Continuation) {
        self.onRevoke = onRevoke
        self.events = events
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    /// Returns false if already closed.
    func markClosed() -> Bool {
        state.withLock { state in
            defer { state.closed = true }
            return !state.closed
        }
    }

    /// Throws if closed, or the error deferred by an earlier poll or rebalance.
    func checkUsable() throws(KafkaError) {
        let error = state.withLock { state -> KafkaError? in
            if state.closed { return .closed("KafkaConsumer") }
            defer { state.pendingError = nil }
            return state.pendingError
        }
        if let error { throw error }
    }

    func setPendingError(_ error: KafkaError) {
        state.withLock { $0.pendingError = $0.pendingError ?? error }
    }

    /// Applies a rebalance; runs on the poll thread inside `rd_kafka_consumer_poll`/`close`.
    func rebalance(_ rk: OpaquePointer, _ err: rd_kafka_resp_err_t, _ list: CPartitionList) {
        generation.add(1, ordering: .releasing)
        let partitions = partitionElements(list).map(\.0.topicPartition)
        let cooperative = rd_kafka_rebalance_protocol(rk).map { String(cString: $0) } == "COOPERATIVE"
        func check(_ error: OpaquePointer?) -> Bool {
            guard let error else { return true }
            setPendingError(KafkaError(consuming: error, context: "Rebalance of \(partitions) failed"))
            return false
        }
        func check(_ err: rd_kafka_resp_err_t) -> Bool {
            guard err != RD_KAFKA_RESP_ERR_NO_ERROR else { return true }
            setPendingError(KafkaError(err, context: "Rebalance of \(partitions) failed"))
            return false
        }
        switch err {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            joined.store(true, ordering: .relaxed)
            let ok = cooperative ? check(rd_kafka_incremental_assign(rk, list)) : check(rd_kafka_assign(rk, list))
            if ok && !partitions.isEmpty {
                counts.withLock { $0.assignments += 1 }
                events.yield(.assigned(partitions))
            }
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            if !partitions.isEmpty { onRevoke(partitions) }
            let ok = cooperative ? check(rd_kafka_incremental_unassign(rk, list)) : check(rd_kafka_assign(rk, nil))
            if ok && !partitions.isEmpty {
                counts.withLock { $0.revocations += 1 }
                events.yield(.revoked(partitions))
            }
        default:
            setPendingError(KafkaError(err, context: "Rebalance failed"))
            _ = rd_kafka_assign(rk, nil)
        }
    }
}

private let rebalanceCallback: @convention(c) (OpaquePointer?, rd_kafka_resp_err_t, CPartitionList?, UnsafeMutableRawPointer?) -> Void = {
    rk, err, list, opaque in
    guard let rk, let list, let opaque else { return }
    Unmanaged<ClientContext>.fromOpaque(opaque).takeUnretainedValue().consumer?.rebalance(rk, err, list)
}

private let offsetCommitCallback: @convention(c) (OpaquePointer?, rd_kafka_resp_err_t, CPartitionList?, UnsafeMutableRawPointer?) -> Void =
    {
        _, err, _, opaque in
        guard let opaque else { return }
        Unmanaged<ClientContext>.fromOpaque(opaque).takeUnretainedValue().consumer?.committed(err)
    }

private func consumerError(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> KafkaError {
    let text = String(cString: rd_kafka_message_errstr(message))
    guard let rkt = message.pointee.rkt else { return KafkaError(message.pointee.err, "Consumer error: \(text)") }
    let partition = TopicPartition(topic: String(cString: rd_kafka_topic_name(rkt)), partition: message.pointee.partition)
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
                        value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []))
                index += 1
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        self.init(
            topic: String(cString: rd_kafka_topic_name(m.rkt)), partition: m.partition, offset: m.offset,
            key: bytes(m.key, m.key_len), value: bytes(m.payload, m.len) ?? [], headers: headers,
            timestamp: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp)
    }
}
