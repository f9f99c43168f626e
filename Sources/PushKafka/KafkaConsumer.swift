import CRdKafka
import Dispatch
import Logging
import Synchronization

/// A consumer-group member with manual offset management.
///
/// Defaults (overridable through the configuration):
/// `partition.assignment.strategy=cooperative-sticky`, `enable.auto.commit=false`,
/// `enable.auto.offset.store=false`: with these, offsets only advance through
/// ``commit(_:timeout:)``. With `enable.auto.commit=true` and `enable.auto.offset.store=false`
/// (what the worker sets), librdkafka commits what ``store(_:)`` was given, on its timer and on
/// close, and ``commit(_:timeout:)`` commits at once.
///
/// Rebalances happen inside `poll` (and `close`) on the consumer's poll thread. The consumer
/// applies an assignment itself (incremental assign for the COOPERATIVE protocol, full assign
/// for EAGER) and reports it on `rebalanceEvents`. A revocation is applied at once with
/// ``Revocation/immediate``; with ``Revocation/deferred`` it is only reported
/// (``KafkaRebalanceEvent/revoking(_:generation:)``): the partitions are paused and stay this
/// member's, so that their work can be finished and committed, until the owner calls
/// ``completeRevocation(_:)``, which unassigns them on the poll thread. Keep calling `poll`
/// regularly, at least every `max.poll.interval.ms`, or the group evicts this member.
public final class KafkaConsumer: Sendable {
    /// Assignment changes, after librdkafka applied them. Finishes when the consumer closes.
    public let rebalanceEvents: AsyncStream<KafkaRebalanceEvent>

    private let client: RdKafkaHandle
    private let context: ConsumerContext
    /// librdkafka's lines and this consumer's own (its service's close).
    let logger: Logger
    /// Runs `consumer_poll` and `consumer_close`, hence the rebalance callback.
    private let pollQueue = DispatchQueue(label: "PushKafka.KafkaConsumer.poll")
    /// Runs blocking offset requests so they need not wait for a poll in progress.
    private let offsetQueue = DispatchQueue(label: "PushKafka.KafkaConsumer.offsets")

    /// What the consumer does when the group takes partitions away.
    public enum Revocation: Sendable {
        /// Unassigns them at once, inside the poll that learns of it.
        case immediate
        /// Pauses them and reports ``KafkaRebalanceEvent/revoking(_:generation:)``; they are
        /// unassigned (and the group's rebalance goes on) once ``completeRevocation(_:)`` is
        /// called, or when the consumer closes. The group waits for that up to
        /// `max.poll.interval.ms`.
        case deferred
    }

    public init(configuration: KafkaConfiguration, revocation: Revocation = .immediate) throws(KafkaError) {
        guard configuration.groupId?.isEmpty == false else {
            throw KafkaError(RD_KAFKA_RESP_ERR__INVALID_ARG, "KafkaConsumer requires the 'group.id' property")
        }
        let conf = try configuration.makeConf(defaults: [
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
        ])
        let (events, continuation) = AsyncStream.makeStream(of: KafkaRebalanceEvent.self)
        let context = ConsumerContext(deferRevocations: revocation == .deferred, events: continuation)
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
        self.logger = configuration.clientLogger
        self.rebalanceEvents = events
    }

    /// Closes (if `close()` was not called) and destroys the handle on the poll thread.
    deinit {
        let (client, context) = (client, context)
        pollQueue.async {
            if context.markClosed() { _ = rd_kafka_consumer_close(client.pointer) }
            context.lanes.close()
            let opaque = rd_kafka_opaque(client.pointer)
            rd_kafka_destroy(client.pointer)
            context.events.finish()
            if let opaque { Unmanaged<ClientContext>.fromOpaque(opaque).release() }
        }
    }

    /// Subscribes to `lanes`, topics in priority order: ``poll(maxMessages:timeout:lanes:)``
    /// returns the messages of a topic before those of the topics after it, however they were
    /// fetched. Call it once, before the first poll; one topic is ``subscribe(topics:)``.
    public func subscribe(lanes: [String]) throws(KafkaError) {
        if lanes.count > 1 { try context.lanes.open(client.pointer, topics: lanes) }
        try subscribe(topics: lanes)
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
    ///
    /// Subscribed with priority lanes (``subscribe(lanes:)``), the messages of a higher lane come
    /// before those of a lower one, and only the first `lanes` lanes are read.
    public func poll(
        maxMessages: Int = 1000,
        timeout: Duration,
        lanes: Int = .max
    ) async throws(KafkaError) -> [KafkaMessage] {
        let (client, context) = (client, context)
        return try await pollQueue.run { () throws(KafkaError) in
            try context.checkUsable()
            let deadline = ContinuousClock.now + timeout
            var messages: [KafkaMessage] = []
            if context.lanes.isActive {
                context.pollLanes(client.pointer, lanes, maxMessages, deadline, into: &messages)
            } else {
                while messages.count < maxMessages {
                    let wait = messages.isEmpty ? (deadline - .now).timeoutMilliseconds : 0
                    guard let message = rd_kafka_consumer_poll(client.pointer, wait) else {
                        if messages.isEmpty && ContinuousClock.now < deadline { continue }
                        break
                    }
                    if !context.take(message, into: &messages) { break }
                }
            }
            if messages.isEmpty { try context.checkUsable() }
            return messages
        }
    }

    /// Synchronously commits explicit offsets (next offset to read = last processed + 1).
    /// Waits up to `timeout` for the coordinator's answer (see ``commitBlocking(_:timeout:)``),
    /// and not past the task's cancellation.
    public func commit(_ offsets: [TopicPartitionOffset], timeout: Duration = .seconds(10)) async throws(KafkaError) {
        guard !offsets.isEmpty else { return }
        // Bounded from the call, including any wait behind other offset requests.
        try await offsetQueue.run(what: "Commit of \(offsets)", abandoningAfter: timeout) { () throws(KafkaError) in
            guard !self.context.isClosed else { throw .closed("KafkaConsumer") }
            try self.commitBlocking(offsets, timeout: timeout)
        }
    }

    /// Commits explicit offsets on the calling thread and waits up to `timeout` for the
    /// coordinator's answer. Meant for a deferred revocation, while the revoked partitions still
    /// belong to this member (the generation is current, so the commit is accepted), before the
    /// group hands them to another member.
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
            clamping: max(0, timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        )
        guard let event = rd_kafka_queue_poll(queue, milliseconds) else {
            throw KafkaError(
                RD_KAFKA_RESP_ERR__TIMED_OUT,
                "Cannot commit \(offsets): the coordinator did not answer within \(timeout)",
                isRetriable: false
            )
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
        if err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__STATE
            && err != RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
        {
            throw KafkaError(err, context: "Cannot store offsets \(offsets)")
        }
        return partitionElements(list).filter { $0.1 != RD_KAFKA_RESP_ERR_NO_ERROR }.map(\.0)
    }

    /// The group's committed offsets for `partitions`. Partitions without a committed
    /// offset are left out.
    public func committed(
        _ partitions: [TopicPartition],
        timeout: Duration = .seconds(10)
    ) async throws(KafkaError) -> [TopicPartitionOffset] {
        let (client, context) = (client, context)
        return try await offsetQueue.run(what: "Fetching committed offsets", abandoningAfter: timeout + .seconds(1)) {
            () throws(KafkaError) in
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
    /// message will get) of each of `partitions`, asked of the partitions' leaders. `timeout`
    /// bounds the whole call: partitions whose leader has not answered by then are left out.
    public func watermarks(
        _ partitions: [TopicPartition],
        timeout: Duration = .seconds(2)
    ) async throws(KafkaError) -> [TopicPartition: (low: Int64, high: Int64)] {
        let (client, context) = (client, context)
        return try await offsetQueue.run(what: "Fetching watermarks", abandoningAfter: timeout + .seconds(1)) {
            () throws(KafkaError) in
            guard !context.isClosed else { throw .closed("KafkaConsumer") }
            var marks: [TopicPartition: (low: Int64, high: Int64)] = [:]
            let deadline = ContinuousClock.now + timeout
            for partition in partitions {
                let remaining = deadline - .now
                if remaining <= .zero { break }
                var low: Int64 = 0
                var high: Int64 = 0
                let err = rd_kafka_query_watermark_offsets(
                    client.pointer,
                    partition.topic,
                    partition.partition,
                    &low,
                    &high,
                    remaining.timeoutMilliseconds
                )
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
    /// at the start of each: a revocation is reported with its own generation, and every
    /// message `poll` returns carries the generation it was returned at.
    public var rebalanceGeneration: UInt64 { context.rebalanceGeneration }

    /// `messages` without those fetched before their partition's latest revocation: a
    /// revocation can run inside a poll after earlier polls returned messages of the partition,
    /// and those belong to its next owner, which consumes them from the committed offset.
    public func current(_ messages: [KafkaMessage]) -> (current: [KafkaMessage], dropped: Int) {
        context.current(messages)
    }

    /// The generation of each partition's latest revocation (see ``rebalanceGeneration``).
    public var revocations: [TopicPartition: UInt64] { context.revocations }

    /// Ends a deferred revocation: unassigns `partitions` on the poll thread (between two polls),
    /// which lets the group's rebalance go on, and reports
    /// ``KafkaRebalanceEvent/revoked(_:)``. Partitions already unassigned (the consumer closed
    /// meanwhile) are skipped.
    public func completeRevocation(_ partitions: [TopicPartition]) async {
        let (client, context) = (client, context)
        // Only a cancelled wait throws; the unassignment still runs on the poll thread.
        _ = try? await pollQueue.run(what: "Completing a revocation") { () throws(KafkaError) in
            context.unassign(client.pointer, partitions)
        }
    }

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

    /// Moves the fetch position of each partition to its offset: the next message `poll`
    /// returns from it is the one at that offset, and the messages fetched before the seek are
    /// not returned. Waits up to `timeout` for the fetcher to take the new positions; a
    /// partition paused meanwhile fetches from there once it is resumed.
    public func seek(_ offsets: [TopicPartitionOffset], timeout: Duration = .seconds(2)) throws(KafkaError) {
        guard !offsets.isEmpty else { return }
        let list = makePartitionList(offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        if let error = rd_kafka_seek_partitions(client.pointer, list, timeout.timeoutMilliseconds) {
            throw KafkaError(consuming: error, context: "Cannot seek \(offsets)")
        }
        try checkPartitionErrors(list, "Cannot seek")
    }

    /// Resumes fetching from paused `partitions`.
    public func resume(_ partitions: [TopicPartition]) throws(KafkaError) {
        let list = makePartitionList(partitions)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_resume_partitions(client.pointer, list)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: "Cannot resume \(partitions)") }
        try checkPartitionErrors(list, "Cannot resume")
    }

    /// Leaves the group cleanly: completes deferred revocations, revokes the assignment (at
    /// once, whatever ``Revocation`` says), lets the group rebalance without waiting for a
    /// session timeout, and finishes `rebalanceEvents`. Idempotent. Commits nothing by itself
    /// (librdkafka commits the stored offsets when auto-commit is on).
    ///
    /// Waits at most `timeout`, and not past the task's cancellation: a group coordinator that
    /// is gone can hold librdkafka's close for long. The close then goes on in the background
    /// (the group notices the member's absence after its session timeout), and this throws.
    public func close(timeout: Duration = .seconds(5)) async throws(KafkaError) {
        let (client, context) = (client, context)
        try await pollQueue.run(what: "Leaving the consumer group", abandoningAfter: timeout) { () throws(KafkaError) in
            guard context.markClosed() else { return }
            defer { context.events.finish() }
            // Deferred revocations not completed are completed now: librdkafka's close would
            // otherwise wait for them.
            context.unassign(client.pointer, nil)
            let err = rd_kafka_consumer_close(client.pointer)
            guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(err, context: "Cannot close consumer") }
        }
    }
}

/// What the rebalance callback needs; reached through the handle's ``ClientContext``.
final class ConsumerContext: Sendable {
    let deferRevocations: Bool
    let events: AsyncStream<KafkaRebalanceEvent>.Continuation
    /// The queues of the priority lanes, when there are several (``KafkaConsumer/subscribe(lanes:)``).
    let lanes = LaneQueues()
    /// Revocations by partition: the generation of each partition's latest, and the partitions
    /// whose deferred revocation is not completed (with the protocol it was made under).
    private struct Revoked {
        var marks = RevocationMarks()
        var pending: [TopicPartition: Bool] = [:]
        /// Partitions paused by a deferred revocation: librdkafka keeps an application's pause
        /// across an unassign, so they are resumed when they are assigned again.
        var paused: Set<TopicPartition> = []
    }
    private let revoked = Mutex(Revoked())
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
        counts.withLock { counts in
            if err == RD_KAFKA_RESP_ERR_NO_ERROR {
                counts.commits += 1
            } else {
                counts.commitFailures += 1
            }
        }
    }

    init(deferRevocations: Bool, events: AsyncStream<KafkaRebalanceEvent>.Continuation) {
        self.deferRevocations = deferRevocations
        self.events = events
    }

    var revocations: [TopicPartition: UInt64] { revoked.withLock { $0.marks.at } }

    /// Whether `message`'s partition has a deferred revocation under way.
    func isRevoking(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> Bool {
        revoked.withLock { r in
            guard !r.pending.isEmpty, let rkt = message.pointee.rkt else { return false }
            return r.pending[
                TopicPartition(topic: String(cString: rd_kafka_topic_name(rkt)), partition: message.pointee.partition)
            ]
                != nil
        }
    }

    func current(_ messages: [KafkaMessage]) -> (current: [KafkaMessage], dropped: Int) {
        // Generations only grow along a batch: most batches need no copy of the marks.
        guard let first = messages.first else { return (messages, 0) }
        let marks = revoked.withLock { r in first.rebalanceGeneration < r.marks.latest ? r.marks : nil }
        return marks?.current(messages) ?? (messages, 0)
    }

    /// Unassigns `partitions` (all pending ones with `nil`) whose deferred revocation is pending;
    /// runs on the poll thread.
    func unassign(_ rk: OpaquePointer, _ partitions: [TopicPartition]?) {
        let due = revoked.withLock { r -> [(TopicPartition, Bool)] in
            let due =
                partitions.map { $0.compactMap { p in r.pending[p].map { (p, $0) } } }
                ?? r.pending.map { ($0.key, $0.value) }
            for (partition, _) in due { r.pending[partition] = nil }
            return due
        }
        guard !due.isEmpty else { return }
        let cooperative = due.filter(\.1).map(\.0)
        let eager = due.filter { !$0.1 }.map(\.0)
        if !cooperative.isEmpty {
            let list = makePartitionList(cooperative)
            defer { rd_kafka_topic_partition_list_destroy(list) }
            if let error = rd_kafka_incremental_unassign(rk, list) {
                setPendingError(KafkaError(consuming: error, context: "Unassigning \(cooperative) failed"))
            }
        }
        if !eager.isEmpty {
            let err = rd_kafka_assign(rk, nil)
            if err != RD_KAFKA_RESP_ERR_NO_ERROR {
                setPendingError(KafkaError(err, context: "Unassigning \(eager) failed"))
            }
        }
        let all = cooperative + eager
        counts.withLock { $0.revocations += 1 }
        events.yield(.revoked(all))
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
            let pausedBefore = revoked.withLock { r -> [TopicPartition] in
                for p in partitions { r.pending[p] = nil }
                guard !r.paused.isEmpty else { return [] }
                let again = partitions.filter { r.paused.contains($0) }
                r.paused.subtract(again)
                return again
            }
            let ok = cooperative ? check(rd_kafka_incremental_assign(rk, list)) : check(rd_kafka_assign(rk, list))
            if ok { lanes.forward(rk, partitions) }
            if !pausedBefore.isEmpty {
                let resumed = makePartitionList(pausedBefore)
                defer { rd_kafka_topic_partition_list_destroy(resumed) }
                _ = check(rd_kafka_resume_partitions(rk, resumed))
            }
            if ok && !partitions.isEmpty {
                counts.withLock { $0.assignments += 1 }
                events.yield(.assigned(partitions))
            }
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            let now = generation.load(ordering: .acquiring)
            revoked.withLock { $0.marks.revoke(partitions, at: now) }
            if deferRevocations && !isClosed && !partitions.isEmpty {
                // Stops fetching them; they stay assigned until ``KafkaConsumer/completeRevocation(_:)``.
                _ = rd_kafka_pause_partitions(rk, list)
                revoked.withLock { r in
                    for p in partitions { r.pending[p] = cooperative }
                    r.paused.formUnion(partitions)
                }
                events.yield(.revoking(partitions, generation: now, lost: rd_kafka_assignment_lost(rk) != 0))
                return
            }
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

private let rebalanceCallback:
    @convention(c) (OpaquePointer?, rd_kafka_resp_err_t, CPartitionList?, UnsafeMutableRawPointer?) -> Void = {
        rk,
        err,
        list,
        opaque in
        guard let rk, let list, let opaque else { return }
        Unmanaged<ClientContext>.fromOpaque(opaque).takeUnretainedValue().consumer?.rebalance(rk, err, list)
    }

private let offsetCommitCallback:
    @convention(c) (OpaquePointer?, rd_kafka_resp_err_t, CPartitionList?, UnsafeMutableRawPointer?) -> Void =
        {
            _,
            err,
            _,
            opaque in
            guard let opaque else { return }
            Unmanaged<ClientContext>.fromOpaque(opaque).takeUnretainedValue().consumer?.committed(err)
        }
