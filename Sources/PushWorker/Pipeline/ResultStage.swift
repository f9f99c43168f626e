import DequeModule
import Logging
import PushConfiguration
import PushKafka
import Synchronization

/// The last stage: records outcomes in Redis, produces one result per notification to
/// `apn.results`, and once Kafka has acknowledged them marks their messages written in the
/// ``OffsetTracker`` and hands the committable offsets to librdkafka.
///
/// Every stage hands it ``ResultItem``s; they wait in one list, which holds in-flight
/// notifications only (``InFlightLimit`` bounds it), and a doorbell (an `AsyncStream` that keeps
/// at most one ring) wakes the writer. The writer takes what has gathered, at most
/// `resultBatchSize`, and after a smaller batch lets `resultFlushInterval` pass before it takes
/// the next, so that results are written in few round trips.
final class ResultStage: Sendable {
    private struct State {
        var tracker = OffsetTracker()
        /// Notifications in a pool or waiting here, by partition (a revocation waits for them).
        var active: [TopicPartition: Int] = [:]
        /// The written positions stored in Redis (`pw:`), by partition.
        var writtenMarks: [TopicPartition: Int64] = [:]
        var writerExited = false
        /// What waits for the writer. A deque: the writer takes up to `resultBatchSize` from the
        /// front of a list that may hold `maxInFlight` items, and an array shifted the rest down
        /// each time (a profile of `bench-worker` put that copy at 1–3% of the worker's CPU).
        var waiting = Deque<ResultItem>()
        /// Offsets may have moved without a result (a message with nothing to send, a duplicate).
        var commitNeeded = false
        /// A revocation waits for the written positions of its partitions.
        var positionsRequested = false
        /// When the writer last started or finished an attempt to write (liveness).
        var lastAttempt = ContinuousClock.now
        /// Results taken by the writer and not yet written.
        var writing = 0
        /// Messages of jobs that asked for a summary, until their token results are all written.
        var summaries: [MessageRef: PendingSummary] = [:]

        /// Counts token results of messages with a summary; returns the messages whose token
        /// results are now all written. A result is `nil` for a token settled without one.
        mutating func countForSummaries(_ counted: [(MessageRef, TokenResult?)]) -> [(MessageRef, PendingSummary)] {
            var ready: [(MessageRef, PendingSummary)] = []
            for (ref, result) in counted {
                guard var pending = summaries.removeValue(forKey: ref) else { continue }
                pending.count(result)
                if pending.remaining > 0 { summaries[ref] = pending } else { ready.append((ref, pending)) }
            }
            return ready
        }

        /// Written positions that moved since they were last stored.
        func pendingMarks() -> [TopicPartitionOffset] {
            tracker.allPositions().filter { $0.offset > (writtenMarks[$0.topicPartition] ?? -1) }
        }
    }

    private let state = Mutex(State())
    private let doorbell: AsyncStream<Void>
    private let doorbellIn: AsyncStream<Void>.Continuation
    private let store: NotificationStore
    private let producer: KafkaProducer
    private let consumer: KafkaConsumer
    private let localClaims: LocalClaims
    private let limit: InFlightLimit
    private let control: PipelineControl
    private let configuration: WorkerConfiguration
    /// Where messages go once their token results are all written, when their job asked for a
    /// summary.
    private let summaryStage: SummaryStage?
    /// Each configured app's transport, for the metrics' labels.
    private let transports: [String: String]
    private let logger: Logger

    init(
        store: NotificationStore,
        producer: KafkaProducer,
        consumer: KafkaConsumer,
        localClaims: LocalClaims,
        limit: InFlightLimit,
        control: PipelineControl,
        configuration: WorkerConfiguration,
        summaries: SummaryStage? = nil,
        logger: Logger
    ) {
        self.store = store
        self.producer = producer
        self.consumer = consumer
        self.localClaims = localClaims
        self.limit = limit
        self.control = control
        self.configuration = configuration
        self.summaryStage = summaries
        self.transports = configuration.apps.mapValues(\.transport.rawValue)
        self.logger = logger
        (doorbell, doorbellIn) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    // MARK: What the other stages call

    /// Registers parsed messages with how many results each waits for.
    func register(_ registrations: [(MessageRef, Int)]) {
        guard !registrations.isEmpty else { return }
        var total = 0
        var empty = false
        state.withLock { s in
            for (ref, count) in registrations {
                s.tracker.register(ref.partition, offset: ref.offset, results: count, epoch: ref.epoch)
                total += count
                empty = empty || count == 0
            }
        }
        limit.add(total)
        if empty { ring { $0.commitNeeded = true } }
    }

    /// Registers the messages (registered already, with one result more than their token
    /// results) whose jobs asked for a summary. Each holds its summary's place under
    /// `maxInFlight` until the summary stage settles it, or until it is dropped (its message is
    /// then consumed again).
    func registerSummaries(_ summaries: [(MessageRef, PendingSummary)]) {
        guard !summaries.isEmpty else { return }
        let replaced = state.withLock { s in
            summaries.reduce(0) { count, entry in
                count + (s.summaries.updateValue(entry.1, forKey: entry.0) == nil ? 0 : 1)
            }
        }
        limit.remove(replaced)
    }

    /// Forgets the summaries of messages some of whose notifications were handed back unclaimed
    /// (their messages are consumed again, and their summaries are counted then).
    func dropSummaries(of refs: [MessageRef]) {
        guard !refs.isEmpty else { return }
        let dropped = state.withLock { s in
            s.summaries.isEmpty ? 0 : Set(refs).reduce(0) { $0 + (s.summaries.removeValue(forKey: $1) == nil ? 0 : 1) }
        }
        limit.remove(dropped)
    }

    /// Notifications of these partitions went into a pool.
    func activate(_ partitions: [TopicPartition]) {
        guard !partitions.isEmpty else { return }
        state.withLock { s in for p in partitions { s.active[p, default: 0] += 1 } }
    }

    /// Hands results (and released claims) to the writer.
    func submit(_ items: [ResultItem]) {
        guard !items.isEmpty else { return }
        ring { s in
            for item in items where !item.fromPool { s.active[item.ref.partition, default: 0] += 1 }
            if s.waiting.isEmpty && s.writing == 0 { s.lastAttempt = .now }
            s.waiting.append(contentsOf: items)
        }
    }

    /// Messages consumed again whose notifications need nothing written.
    func complete(_ refs: [MessageRef]) {
        guard !refs.isEmpty else { return }
        let ready = state.withLock { s in
            for ref in refs { s.tracker.complete(ref.partition, offset: ref.offset, epoch: ref.epoch) }
            return s.summaries.isEmpty ? [] : s.countForSummaries(refs.map { ($0, nil) as (MessageRef, TokenResult?) })
        }
        limit.remove(refs.count)
        ring { $0.commitNeeded = true }
        summaryStage?.submit(ready)
    }

    /// Asks the writer to store the written positions now.
    func requestPositions() { ring { $0.positionsRequested = true } }

    /// Ends the writer once it has written what it was given.
    func finish() { doorbellIn.finish() }

    private func ring(_ change: (inout State) -> Void) {
        state.withLock { change(&$0) }
        doorbellIn.yield()
    }

    /// How long the writer has gone without an attempt to write while results wait, when that
    /// is longer than `limit`: it is stuck. `nil` otherwise.
    func stuck(for limit: Duration) -> Duration? {
        state.withLock { s in
            let idle = ContinuousClock.now - s.lastAttempt
            return (s.waiting.count + s.writing > 0 && idle > limit) ? idle : nil
        }
    }

    private func attempted() { state.withLock { $0.lastAttempt = .now } }

    // MARK: The writer

    func run() async {
        defer {
            state.withLock { $0.writerExited = true }
            control.madeProgress()
        }
        var rings = doorbell.makeAsyncIterator()
        var lastFlush = ContinuousClock.now
        while true {
            let (batch, commit, positions) = state.withLock { s in
                defer { (s.commitNeeded, s.positionsRequested) = (false, false) }
                let count = min(s.waiting.count, configuration.worker.resultBatchSize)
                var batch: [ResultItem] = []
                batch.reserveCapacity(count)
                // Moved out one by one: no copy of each item and no release of the original.
                for _ in 0..<count { batch.append(s.waiting.removeFirst()) }
                s.writing = count
                return (batch, s.commitNeeded, s.positionsRequested)
            }
            guard !batch.isEmpty || commit || positions else {
                // Nothing to do: wait for a ring; none comes after `finish()`.
                if await rings.next() == nil { return }
                continue
            }
            attempted()
            await write(batch, positions: positions)
            state.withLock { s in
                s.writing = 0
                s.lastAttempt = .now
            }
            if commit || !batch.isEmpty { self.commit() }
            // Gather a fuller batch next time when this one was small.
            if batch.count < configuration.worker.resultBatchSize {
                try? await Task.sleep(until: lastFlush + configuration.worker.resultFlushInterval)
            }
            lastFlush = .now
        }
    }

    /// What one batch asks of Redis and Kafka; no I/O.
    struct WritePlan {
        var records: [RecordedResult] = []
        var unregistered: [(app: String, environment: String, token: String, since: Int64)] = []
        /// Claims to delete: notifications never written to a gateway.
        var released: [(resultId: String, token: String)] = []
        var messages: [KafkaOutgoingMessage] = []
        /// The result ids whose claims this process holds until the batch is written.
        var settled: [String] = []
        /// Results produced (a released claim produces none).
        var results = 0
        /// What each message counts as in the metrics (a stored result produced again is read
        /// back from its value).
        var metrics: [ResultMetric] = []
    }

    static func plan(_ batch: [ResultItem], topic: String) -> WritePlan {
        var plan = WritePlan()
        plan.messages.reserveCapacity(batch.count)
        plan.metrics.reserveCapacity(batch.count)
        func produce(_ message: ResultMessage) {
            plan.messages.append(KafkaOutgoingMessage(topic: topic, key: message.key, value: message.value))
            if let metric = message.metric ?? ResultMetric(parsing: message.value) { plan.metrics.append(metric) }
        }
        for item in batch {
            switch item {
            case .rejected(_, let message):
                produce(message)
            case .reemitted(_, _, let list):
                list.forEach(produce)
            case .released(_, let id, let token):
                plan.released.append((id, token))
                plan.settled.append(id)
            case .handedBack(_, let id):
                plan.settled.append(id)
            case .decided(let r), .delivered(let r):
                plan.records.append(r)
                if let u = r.unregister { plan.unregistered.append((u.app, u.environment, u.token, u.since)) }
                produce(r.result)
                if let feedback = r.feedback { produce(feedback) }
                plan.settled.append(r.resultId)
            }
            if !item.isGivenBack { plan.results += 1 }
        }
        return plan
    }

    /// Records outcomes in Redis, produces the results, then marks them written. Retries until
    /// both stores accept them: nothing is dropped (unless the worker is cancelled: then their
    /// messages are not committed, so they are consumed again).
    private func write(_ batch: [ResultItem], positions: Bool) async {
        guard positions || !batch.isEmpty else { return }
        let plan = Self.plan(batch, topic: configuration.kafka.resultsTopic)
        // The written positions reached by earlier batches go with this one.
        let marks = state.withLock { $0.pendingMarks() }
        guard
            await record(
                plan.records,
                unregistered: plan.unregistered,
                released: plan.released,
                marks: marks,
                count: batch.count
            ),
            await producer.produceAll(
                plan.messages,
                what: "result",
                control: control,
                logger: logger,
                attempted: attempted
            )
        else { return }
        // The token results of messages whose job asked for a summary, read outside the lock.
        let summaryRefs = state.withLock { s in
            s.summaries.isEmpty ? [] : Set(batch.map(\.ref).filter { s.summaries[$0] != nil })
        }
        let counted =
            summaryRefs.isEmpty
            ? []
            : batch.compactMap { item in
                item.summaryCount.flatMap { ref, value in
                    summaryRefs.contains(ref) ? (ref, value.flatMap(TokenResult.init(parsing:))) : nil
                }
            }
        let (ready, dropped) = state.withLock { s -> ([(MessageRef, PendingSummary)], Int) in
            for mark in marks {
                s.writtenMarks[mark.topicPartition] = max(s.writtenMarks[mark.topicPartition] ?? -1, mark.offset)
            }
            for item in batch {
                let ref = item.ref
                // A released notification's message is not complete: it is consumed again.
                if !item.isGivenBack { s.tracker.complete(ref.partition, offset: ref.offset, epoch: ref.epoch) }
                let left = (s.active[ref.partition] ?? 1) - 1
                s.active[ref.partition] = left > 0 ? left : nil
            }
            guard !s.summaries.isEmpty else { return ([], 0) }
            // A released notification's message is consumed again; its summary waits for that.
            var dropped = 0
            for item in batch {
                if item.isGivenBack, s.summaries.removeValue(forKey: item.ref) != nil { dropped += 1 }
            }
            return (s.countForSummaries(counted), dropped)
        }
        limit.remove(dropped)
        summaryStage?.submit(ready)
        control.count { $0.results += plan.results }
        control.metrics.produced(plan.metrics, transports: transports, now: ResultFactory.nowMilliseconds())
        localClaims.forget(plan.settled)
        limit.remove(batch.count)
        control.madeProgress()
    }

    private func record(
        _ records: [RecordedResult],
        unregistered: [(app: String, environment: String, token: String, since: Int64)],
        released: [(resultId: String, token: String)],
        marks: [TopicPartitionOffset],
        count: Int
    ) async -> Bool {
        var delay: Duration = .milliseconds(50)
        while true {
            do {
                try await store.write(
                    records: records,
                    unregistered: unregistered,
                    released: released,
                    positions: marks,
                    ttlSeconds: configuration.worker.dedupeTTLSeconds
                )
                if delay > .milliseconds(50) { control.setRedisDown(false) }
                return true
            } catch {
                if Task.isCancelled { return false }
                logger.error(
                    "Cannot record outcomes in Redis; retrying",
                    metadata: ["error": "\(error.message)", "results": "\(count)"]
                )
                control.setRedisDown(true)
                attempted()
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
                await store.reconnect(logger: logger)
            }
        }
    }

    /// Hands the offsets of fully written messages to librdkafka, which commits them on its
    /// auto-commit timer and on close. (A revocation commits its partitions itself.)
    func commit() {
        let offsets = state.withLock { $0.tracker.committable() }
        guard !offsets.isEmpty else { return }
        do {
            let skipped = Set(try consumer.store(offsets))
            state.withLock { $0.tracker.markCommitted(offsets.filter { !skipped.contains($0) }) }
        } catch {
            logger.warning(
                "Cannot store offsets for commit; will retry",
                metadata: ["error": "\(error)", "offsets": "\(offsets)"]
            )
            ring { $0.commitNeeded = true }
        }
    }

    // MARK: Revocation and shutdown

    /// Notifications of `selection` in a pool or waiting to be written.
    func active(in selection: Set<TopicPartition>) -> Int {
        state.withLock { s in selection.reduce(0) { $0 + (s.active[$1] ?? 0) } }
    }

    /// Whether the written positions of `selection` are stored (or can no longer be).
    func positionsStored(for selection: Set<TopicPartition>) -> Bool {
        state.withLock { s in
            s.writerExited
                || s.tracker.positions(in: selection).allSatisfy {
                    $0.offset <= (s.writtenMarks[$0.topicPartition] ?? -1)
                }
        }
    }

    /// Stores the written positions that moved, directly (shutdown, once the writer is idle).
    func storePositions() async {
        let marks = state.withLock { $0.pendingMarks() }
        guard !marks.isEmpty else { return }
        do {
            try await store.write(
                records: [],
                unregistered: [],
                released: [],
                positions: marks,
                ttlSeconds: configuration.worker.dedupeTTLSeconds
            )
            state.withLock { s in for mark in marks { s.writtenMarks[mark.topicPartition] = mark.offset } }
        } catch {
            logger.warning(
                "Cannot store the written positions; the next owners may write some results again",
                metadata: ["error": "\(error.message)"]
            )
        }
    }

    /// Leaves hand-off marks for `positions` of partitions handed on without a commit, so that
    /// their next owner skips the messages whose results are written
    /// (``NotificationStore/storeHandoffs(_:at:ttlSeconds:)``).
    func leaveHandoffs(_ positions: [TopicPartitionOffset]) async {
        do {
            try await store.storeHandoffs(
                positions,
                at: ResultFactory.nowMilliseconds(),
                ttlSeconds: configuration.worker.dedupeTTLSeconds
            )
        } catch {
            logger.warning(
                "Cannot leave hand-off marks; the next owners write the results of bad input again",
                metadata: ["error": "\(error.message)", "offsets": "\(positions)"]
            )
        }
    }

    func positions(in selection: Set<TopicPartition>) -> [TopicPartitionOffset] {
        state.withLock { $0.tracker.positions(in: selection) }
    }

    func markCommitted(_ offsets: [TopicPartitionOffset]) {
        state.withLock { $0.tracker.markCommitted(offsets) }
    }

    /// Forgets revoked partitions.
    func remove(_ selection: Set<TopicPartition>) {
        let dropped = state.withLock { s in
            s.tracker.remove(selection)
            for partition in selection { s.writtenMarks.removeValue(forKey: partition) }
            let before = s.summaries.count
            if before > 0 { s.summaries = s.summaries.filter { !selection.contains($0.key.partition) } }
            return before - s.summaries.count
        }
        limit.remove(dropped)
    }
}

extension ResultItem {
    /// Given back without a result: its message is consumed again.
    var isGivenBack: Bool {
        switch self {
        case .released, .handedBack: true
        case .rejected, .reemitted, .decided, .delivered: false
        }
    }

    /// What a written item counts as for its job's summary: its message and its token's result
    /// (a released claim counts as nothing: its message is consumed again).
    var summaryCount: (MessageRef, [UInt8]?)? {
        switch self {
        case .rejected(let ref, let message): (ref, message.value)
        case .reemitted(let ref, _, let messages): (ref, messages.first?.value)
        case .decided(let r), .delivered(let r): (r.ref, r.result.value)
        case .released, .handedBack: nil
        }
    }
}
