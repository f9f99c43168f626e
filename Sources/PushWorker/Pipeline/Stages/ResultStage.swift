import APNSCore
import DequeModule
import Logging
import PushConfiguration
import PushKafka
import Synchronization

/// The last stage: records outcomes in Redis, produces one result per notification to
/// `apn.results`, and once Kafka has acknowledged them reports them written to the
/// ``PipelineLedger`` and hands the committable offsets to librdkafka.
///
/// Every stage hands it ``ResultItem``s; they wait in one list, which holds in-flight
/// notifications only (the ledger's `maxInFlight` bounds it), and a doorbell (an `AsyncStream` that keeps
/// at most one ring) wakes the writer. The writer takes what has gathered, at most
/// `resultBatchSize`, and after a smaller batch lets `resultFlushInterval` pass before it takes
/// the next, so that results are written in few round trips.
final class ResultStage: Sendable {
    private struct State {
        /// What waits for the writer. A deque: the writer takes up to `resultBatchSize` from the
        /// front of a list that may hold `maxInFlight` items, and an array shifted the rest down
        /// each time (a profile of `bench-worker` put that copy at 1–3% of the worker's CPU).
        var waiting = Deque<ResultItem>()
        /// The results of the highest priority lane's jobs, when the worker reads several: they
        /// are written before `waiting`.
        var urgent = Deque<ResultItem>()
        /// Offsets may have moved without a result (a message with nothing to send, a duplicate).
        var commitNeeded = false
        /// A revocation waits for the written positions of its partitions.
        var positionsRequested = false
        /// When the writer last started or finished an attempt to write (liveness).
        var lastAttempt = ContinuousClock.now
        /// The writer took a batch and has not written it yet.
        var writing = false
        /// The writer is producing a batch: waiting for Kafka's acknowledgements, which may take
        /// up to `message.timeout.ms` per attempt while Kafka cannot be reached.
        var producing = false
        /// When the writer took the batch it is writing.
        var writeStarted = ContinuousClock.now
        /// How many items at the front of ``waiting`` are recorded in Redis ahead of their
        /// batch (``recordAheadWhileProducing()``).
        var recordedAhead = 0
        /// How many items the writer has taken from ``waiting``, ever.
        var takenFromWaiting = 0
        /// Written outcomes, deleted once their messages are before their partitions' stored
        /// written positions (``compactable(stored:storing:)``), per partition in the order they
        /// were written (nearly their offsets' order).
        var settledRecords: [TopicPartition: Deque<SettledRecord>] = [:]
        /// How many ``settledRecords`` hold.
        var settledCount = 0
        /// Passed by the positions of the last write that succeeded: their outcomes are deleted
        /// with the next one (``NotificationStore/write``, `forgotten`).
        var forgettable: [SettledRecord] = []
        /// Takes the settled records whose messages are before the written positions `stored`
        /// already (the ledger's, ``PipelineLedger/storedPositions``) or about to be with
        /// `storing`: from the front of each partition's records, up to the first one still at
        /// or after its position (which holds back the few written out of order behind it until
        /// the position passes it too).
        mutating func compactable(
            stored: [TopicPartition: Int64],
            storing: [TopicPartitionOffset]
        ) -> [SettledRecord] {
            guard settledCount > 0 else { return [] }
            var positions = stored
            for position in storing {
                positions[position.topicPartition] = max(positions[position.topicPartition] ?? -1, position.offset)
            }
            var taken: [SettledRecord] = []
            for (partition, position) in positions {
                guard var records = settledRecords[partition], let first = records.first, first.offset < position
                else { continue }
                settledRecords[partition] = nil  // uniquely referenced while it shrinks
                while let next = records.first, next.offset < position { taken.append(records.removeFirst()) }
                if !records.isEmpty { settledRecords[partition] = records }
            }
            settledCount -= taken.count
            return taken
        }

        /// Notes the records of a written batch (their outcomes recorded in `generation`), and
        /// the records its positions passed. At most `limit` records wait: beyond it the oldest
        /// keep their outcomes until their generation's outcomes expire (a message consumed
        /// again still finds its outcome).
        mutating func written(
            _ records: [RecordedResult],
            compacted: [SettledRecord],
            generation: Int64,
            limit: Int
        ) {
            // One lookup per run of one partition's records (a batch is mostly of a few).
            var start = 0
            while start < records.count {
                let partition = records[start].ref.partition
                var end = start + 1
                while end < records.count && records[end].ref.partition == partition { end += 1 }
                var settled = settledRecords.removeValue(forKey: partition) ?? []  // uniquely referenced
                for record in records[start..<end] {
                    settled.append(
                        SettledRecord(
                            fingerprint: record.fingerprint,
                            partition: partition,
                            offset: record.ref.offset,
                            outcomeGeneration: generation
                        )
                    )
                }
                settledRecords[partition] = settled
                start = end
            }
            settledCount += records.count
            // Over the limit (positions that stopped moving): the oldest of the partition
            // holding most are dropped.
            while settledCount > limit,
                let (partition, most) = settledRecords.max(by: { $0.value.count < $1.value.count })
            {
                let dropped = min(most.count, settledCount - limit)
                settledRecords[partition]?.removeFirst(dropped)
                if settledRecords[partition]?.isEmpty == true { settledRecords[partition] = nil }
                settledCount -= dropped
            }
            forgettable = compacted
        }
    }

    private let state = Mutex(State())
    private let doorbell: AsyncStream<Void>
    private let doorbellIn: AsyncStream<Void>.Continuation
    private let store: NotificationStore
    private let producer: KafkaProducer
    private let consumer: KafkaConsumer
    private let localClaims: LocalClaims
    private let ledger: SharedLedger
    private let control: PipelineControl
    private let configuration: WorkerConfiguration
    /// Where messages go once their token results are all written, when their job asked for a
    /// summary.
    private let summaryStage: SummaryStage
    /// The highest priority lane, when the worker reads several (``State/urgent``).
    private let urgentTopic: String?
    /// Each configured app's transport, for the metrics' labels.
    private let transports: [String: String]
    private let logger: Logger

    init(
        store: NotificationStore,
        producer: KafkaProducer,
        consumer: KafkaConsumer,
        localClaims: LocalClaims,
        ledger: SharedLedger,
        control: PipelineControl,
        configuration: WorkerConfiguration,
        summaries: SummaryStage,
        logger: Logger
    ) {
        self.store = store
        self.producer = producer
        self.consumer = consumer
        self.localClaims = localClaims
        self.ledger = ledger
        self.control = control
        self.configuration = configuration
        self.summaryStage = summaries
        self.transports = configuration.apps.mapValues(\.transport.rawValue)
        self.urgentTopic = configuration.kafka.highestLane
        self.logger = logger
        (doorbell, doorbellIn) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    // MARK: What the other stages call

    /// Registers parsed messages with how many results each waits for, and the messages whose
    /// jobs asked for a summary (``PipelineLedger/registered(_:summaries:)``).
    func register(_ registrations: [(MessageRef, Int)], summaries: [(MessageRef, PendingSummary)]) {
        guard !registrations.isEmpty else { return }
        if ledger.update({ $0.registered(registrations, summaries: summaries) }).commit {
            ring { $0.commitNeeded = true }
        }
    }

    /// Hands results (and released claims) to the writer.
    func submit(_ items: [ResultItem]) {
        guard !items.isEmpty else { return }
        ledger.update { $0.submitted(items) }
        ring { s in
            if s.waiting.isEmpty && s.urgent.isEmpty && !s.writing { s.lastAttempt = .now }
            if let urgentTopic, items.contains(where: { $0.ref.partition.topic == urgentTopic }) {
                for item in items {
                    if item.ref.partition.topic == urgentTopic { s.urgent.append(item) } else { s.waiting.append(item) }
                }
            } else {
                s.waiting.append(contentsOf: items)
            }
        }
    }

    /// Messages consumed again whose notifications need nothing written.
    func complete(_ refs: [MessageRef]) {
        guard !refs.isEmpty else { return }
        carryOut(ledger.update { $0.completed(refs) })
    }

    /// Job summaries settled by the summary stage (written, or not this message's to write).
    func settleSummaries(_ refs: [MessageRef]) {
        guard !refs.isEmpty else { return }
        carryOut(ledger.update { $0.summariesSettled(refs) })
    }

    private func carryOut(_ actions: PipelineLedger.Actions) {
        if actions.commit { ring { $0.commitNeeded = true } }
        summaryStage.submit(actions.summaries)
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
    /// is longer than `limit`, or than `limit` + `acknowledgementWait` while an attempt to
    /// produce waits for Kafka (an outage: the producer's `message.timeout.ms` ends each attempt):
    /// it is stuck. `nil` otherwise.
    func stuck(for limit: Duration, acknowledgementWait: Duration) -> Duration? {
        state.withLock { s in
            Self.stuck(
                idle: ContinuousClock.now - s.lastAttempt,
                pending: !s.waiting.isEmpty || !s.urgent.isEmpty || s.writing,
                producing: s.producing,
                limit: limit,
                acknowledgementWait: acknowledgementWait
            )
        }
    }

    /// ``stuck(for:acknowledgementWait:)``'s judgement; no state.
    static func stuck(
        idle: Duration,
        pending: Bool,
        producing: Bool,
        limit: Duration,
        acknowledgementWait: Duration
    ) -> Duration? {
        pending && idle > (producing ? limit + acknowledgementWait : limit) ? idle : nil
    }

    private func attempted() { state.withLock { $0.lastAttempt = .now } }

    // MARK: The writer

    func run() async {
        defer {
            ledger.update { $0.writerEnded() }
            control.madeProgress()
        }
        var rings = doorbell.makeAsyncIterator()
        var lastFlush = ContinuousClock.now
        while true {
            let (batch, commit, positions) = state.withLock { s in
                defer { (s.commitNeeded, s.positionsRequested) = (false, false) }
                let count = min(s.urgent.count + s.waiting.count, configuration.worker.resultBatchSize)
                var batch: [ResultItem] = []
                batch.reserveCapacity(count)
                // Moved out one by one: no copy of each item and no release of the original.
                var fromWaiting = 0
                for _ in 0..<count {
                    if let item = s.urgent.popFirst() {
                        batch.append(item)
                    } else {
                        batch.append(s.waiting.removeFirst())
                        fromWaiting += 1
                    }
                }
                s.recordedAhead = max(0, s.recordedAhead - fromWaiting)
                s.takenFromWaiting += fromWaiting
                s.writing = count > 0
                s.writeStarted = .now
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
                s.writing = false
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

    /// Records outcomes in Redis, produces the results, then marks them written. Retries until
    /// both stores accept them: nothing is dropped (unless the worker is cancelled: then their
    /// messages are not committed, so they are consumed again).
    private func write(_ batch: [ResultItem], positions: Bool) async {
        guard positions || !batch.isEmpty else { return }
        var plan = Self.plan(batch, topic: configuration.kafka.resultsTopic)
        // The written positions reached by earlier batches go with this one; the outcomes they
        // pass are deleted with the next one.
        let (positions, stored) = ledger.read { ($0.pendingPositions(), $0.storedPositions) }
        let (compacted, forgotten) = state.withLock {
            ($0.compactable(stored: stored, storing: positions), $0.forgettable)
        }
        let generation = store.outcomeGeneration(ttlSeconds: configuration.worker.dedupeTTLSeconds)
        guard
            await record(
                plan.records,
                unregistered: plan.unregistered,
                environments: plan.environments,
                accepted: plan.accepted,
                channels: plan.channels,
                released: plan.released,
                positions: positions,
                forgotten: forgotten,
                generation: generation,
                count: batch.count
            )
        else { return }
        // Recorded: had this worker's liveness key expired meanwhile, another worker may have
        // taken some of these claims over (and sent them again) before the outcomes were there.
        let liveness = control.liveness.snapshot()
        if !plan.sent.isEmpty {
            let marked = plan.markPossibleDuplicates { liveness.ongoing || $0 != liveness.lapses }
            if marked > 0 {
                logger.warning(
                    "Results marked possibleDuplicate: this worker's liveness key may have expired while it held their claims, so another worker may have sent them too",
                    metadata: ["results": "\(marked)"]
                )
            }
        }
        state.withLock { $0.producing = true }
        let produced = await producer.produceAll(
            plan.messages,
            what: "result",
            control: control,
            logger: logger,
            attempted: attempted
        )
        state.withLock { $0.producing = false }
        guard produced else { return }
        // The token results of messages whose job asked for a summary, read outside the lock.
        let summaryRefs = ledger.read { $0.summaryRefs(among: batch.lazy.map(\.ref)) }
        let counted =
            summaryRefs.isEmpty
            ? []
            : batch.compactMap { item in
                item.summaryCount.flatMap { ref, value in
                    summaryRefs.contains(ref) ? (ref, value.flatMap(TokenResult.init(parsing:))) : nil
                }
            }
        localClaims.forget(plan.settled)
        state.withLock {
            $0.written(
                plan.records,
                compacted: compacted,
                generation: generation,
                limit: configuration.worker.maxInFlight
            )
        }
        carryOut(ledger.update { $0.written(batch, positions: positions, counted: counted) })
        control.count { $0.results += plan.results }
        control.metrics.produced(plan.metrics, transports: transports, now: UnixTime.nowMilliseconds())
        control.madeProgress()
    }

    private func record(
        _ records: [RecordedResult],
        unregistered: [(app: String, environment: String, token: String, since: Int64, reason: String)],
        environments: [TokenEnvironment],
        accepted: [AcceptedActivity],
        channels: [ChannelRecord],
        released: [(resultId: String, token: String)],
        positions: [TopicPartitionOffset],
        forgotten: [SettledRecord],
        generation: Int64,
        count: Int
    ) async -> Bool {
        var delay: Duration = .milliseconds(50)
        while true {
            do {
                try await store.write(
                    records: records,
                    unregistered: unregistered,
                    released: released,
                    positions: positions,
                    environments: environments,
                    accepted: accepted,
                    channels: channels,
                    forgotten: forgotten,
                    outcomeGeneration: generation,
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

    /// While a batch's results wait for Kafka (the worker cut off from it, or an outage) the
    /// outcomes queued behind that batch are recorded in Redis ahead of it, once each, every
    /// second: a notification's outcome is what another worker that takes over its partition
    /// waits for (its claim is this worker's) before it produces the result itself, so it does
    /// not wait for Kafka to come back to this worker. Their batch records them again when it is
    /// written (the same fields, idempotent). Runs until the task is cancelled.
    func recordAheadWhileProducing(after stuck: Duration = .seconds(2), max: Int = 2_000) async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: .seconds(1)) } catch { return }
            let (ahead, from, taken) = state.withLock { s -> ([ResultItem], Int, Int) in
                guard s.writing, ContinuousClock.now - s.writeStarted >= stuck, s.recordedAhead < s.waiting.count
                else { return ([], 0, 0) }
                let end = min(s.waiting.count, s.recordedAhead + max)
                return (Array(s.waiting[s.recordedAhead..<end]), s.recordedAhead, s.takenFromWaiting)
            }
            let records = Self.plan(ahead, topic: configuration.kafka.resultsTopic).records
            guard !ahead.isEmpty else { continue }
            do {
                if !records.isEmpty {
                    try await store.write(
                        records: records,
                        unregistered: [],
                        released: [],
                        positions: [],
                        environments: [],
                        accepted: [],
                        channels: [],
                        forgotten: [],
                        outcomeGeneration: store.outcomeGeneration(ttlSeconds: configuration.worker.dedupeTTLSeconds),
                        ttlSeconds: configuration.worker.dedupeTTLSeconds
                    )
                }
                // The writer may have taken some from the front meanwhile.
                state.withLock { s in
                    let end = from + ahead.count - (s.takenFromWaiting - taken)
                    s.recordedAhead = Swift.max(0, Swift.min(s.waiting.count, end))
                }
                logger.debug("Recorded outcomes ahead of their results", metadata: ["outcomes": "\(records.count)"])
            } catch {
                logger.debug("Cannot record outcomes ahead of their results", metadata: ["error": "\(error.message)"])
            }
        }
    }

    /// Hands the offsets of fully written messages to librdkafka, which commits them on its
    /// auto-commit timer and on close. (A revocation commits its partitions itself.)
    func commit() {
        let offsets = ledger.read { $0.committable() }
        guard !offsets.isEmpty else { return }
        do {
            let skipped = Set(try consumer.store(offsets))
            ledger.update { $0.markCommitted(offsets.filter { !skipped.contains($0) }) }
        } catch {
            logger.warning(
                "Cannot store offsets for commit; will retry",
                metadata: ["error": "\(error)", "offsets": "\(offsets)"]
            )
            ring { $0.commitNeeded = true }
        }
    }

    // MARK: Revocation and shutdown

    /// Stores the written positions that moved, directly (shutdown, once the writer is idle).
    func storePositions() async {
        let (positions, stored) = ledger.read { ($0.pendingPositions(), $0.storedPositions) }
        guard !positions.isEmpty else { return }
        let (compacted, forgotten) = state.withLock {
            ($0.compactable(stored: stored, storing: positions), $0.forgettable)
        }
        do {
            try await store.write(
                records: [],
                unregistered: [],
                released: [],
                positions: positions,
                forgotten: forgotten,
                ttlSeconds: configuration.worker.dedupeTTLSeconds
            )
            state.withLock {
                $0.written(
                    [],
                    compacted: compacted,
                    generation: 0,
                    limit: configuration.worker.maxInFlight
                )
            }
            ledger.update { $0.positionsStored(positions) }
            // The outcomes of what this call's positions passed, now that they are stored.
            let forgettable = state.withLock { $0.forgettable }
            if !forgettable.isEmpty {
                try await store.write(
                    records: [],
                    unregistered: [],
                    released: [],
                    forgotten: forgettable,
                    ttlSeconds: configuration.worker.dedupeTTLSeconds
                )
                state.withLock { $0.forgettable = [] }
            }
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
                at: UnixTime.nowMilliseconds(),
                ttlSeconds: configuration.worker.dedupeTTLSeconds
            )
        } catch {
            logger.warning(
                "Cannot leave hand-off marks; the next owners write the results of bad input again",
                metadata: ["error": "\(error.message)", "offsets": "\(positions)"]
            )
        }
    }

    func markCommitted(_ offsets: [TopicPartitionOffset]) {
        ledger.update { $0.markCommitted(offsets) }
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
