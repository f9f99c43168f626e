import Logging
import PushKafka

extension IntakeStage {
    /// Intake's side of the ``StopGuard``: reads the stop records of partitions newly assigned,
    /// leaves this worker's record before it processes messages, carries out careful steps and
    /// answers the messages the guard skips.
    struct Stops: Sendable {
        private(set) var state: StopGuard
        /// How long stop records are kept after their last write, in seconds.
        let ttlSeconds: Int
        /// Dead owners whose records are passed, by partition: removed with the next write.
        private var passedOwners: [TopicPartition: Set<String>] = [:]
        /// Whether the last write of records failed (its warning is logged once per outage).
        private var writeFailing = false
        /// The record last written for each partition: a batch within it needs no new one.
        private var covered: [TopicPartition: StopGuard.Record] = [:]

        /// How far past a batch's last offset its record reaches (``leaveRecords(for:ahead:ledger:control:store:logger:)``),
        /// when no message of the batch has been charged a stop: the batches after it need no
        /// record of their own until they pass it, so a partition costs a Redis round trip every
        /// 10,000 messages instead of one per batch. What it reaches past is charged a stop it was
        /// not in flight at if the worker dies, and one stop costs nothing (``StopGuard``); the
        /// records of messages already charged are exact, so that the careful steps a second
        /// stop brings are as few as the messages in flight.
        static let lookahead: Int64 = 10_000

        /// How long a careful step may take before the next one starts anyway: its notifications
        /// still working then are covered by the next step's record.
        static let stepTimeout: Duration = .seconds(5)
        /// How long a record of an owner that still looks alive is watched: a worker that just
        /// died keeps its liveness key for up to ``Worker/livenessTTL``.
        static let livenessWait: Duration = Worker.livenessTTL + .seconds(1)

        init(limit: Int, ttlSeconds: Int) {
            state = StopGuard(limit: limit)
            self.ttlSeconds = ttlSeconds
        }

        /// Forgets partitions revoked: their records stay for their next owner.
        mutating func forget(_ revoked: Set<TopicPartition>) {
            for partition in revoked {
                state.forget(partition)
                passedOwners[partition] = nil
                covered[partition] = nil
            }
        }

        /// Reads the stop records of partitions newly assigned: those of owners no longer alive
        /// charge their messages one stop more (a record whose owner still looks alive is
        /// watched for ``livenessWait``: a worker that died a moment ago looks alive until its
        /// liveness key expires). If Redis cannot answer, the partitions are consumed as usual.
        mutating func lookUp(
            _ fresh: [TopicPartition],
            store: NotificationStore,
            metrics: WorkerMetrics,
            logger: Logger
        ) async {
            guard state.isEnabled, !fresh.isEmpty else { return }
            do {
                let found = try await store.stopRecords(fresh)
                guard !found.isEmpty else { return }
                let me = store.stopRecordOwner
                let owners = Set(found.values.flatMap { $0.records.keys }).subtracting([me])
                var dead = try await store.deadStopRecordOwners(owners)
                // Only a record that is not passed (its messages are not all written) is worth the wait.
                var alive = Set(
                    found.values.flatMap { entry in
                        entry.records.filter { $0.value.to >= (entry.written ?? -1) }.keys
                    }
                ).subtracting(dead).subtracting([me])
                let deadline = ContinuousClock.now + Self.livenessWait
                while !alive.isEmpty, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(250))
                    let gone = try await store.deadStopRecordOwners(alive)
                    dead.formUnion(gone)
                    alive.subtract(gone)
                }
                for partition in fresh {
                    guard let entry = found[partition] else { continue }
                    let records = entry.records.filter { dead.contains($0.key) }
                    if !entry.unreadable.isEmpty { passedOwners[partition, default: []].formUnion(entry.unreadable) }
                    for suspects in state.learn(partition, dead: records, written: entry.written) {
                        metrics.increment(MetricCatalogue.stopsDetected, [partition.topic])
                        logger.warning(
                            "A worker stopped while it had messages \(partition.topic)[\(partition.partition)]@\(suspects.from)...\(suspects.to) in flight, without handing them on; they have now been in flight at \(suspects.stops) stops\(suspects.stops >= 2 ? " and are processed in careful steps" : "")",
                            metadata: [
                                "partition": "\(partition)", "from": "\(suspects.from)", "to": "\(suspects.to)",
                                "stops": "\(suspects.stops)",
                            ]
                        )
                    }
                }
            } catch is CancellationError {
                return
            } catch {
                logger.warning(
                    "Cannot read the stop records of newly assigned partitions; stops of earlier workers are not counted for them",
                    metadata: ["partitions": "\(fresh)", "error": "\(error)"]
                )
            }
        }

        /// Leaves this worker's record for each partition of `messages` before they are
        /// processed (``StopGuard/record(_:first:last:committable:)``), and removes the records
        /// of dead owners whose messages are passed. With `ahead` (messages processed together),
        /// each record of messages charged no stop reaches ``lookahead`` offsets past them, and
        /// nothing is written while the records written cover the messages. A failure is logged (once per outage): a stop
        /// while these messages are in flight is then not charged to them.
        mutating func leaveRecords(
            for messages: some Collection<KafkaMessage>,
            ahead: Bool = false,
            ledger: SharedLedger,
            control: PipelineControl,
            store: NotificationStore,
            logger: Logger
        ) async {
            guard state.isEnabled, !messages.isEmpty else { return }
            var ranges: [TopicPartition: (first: Int64, last: Int64)] = [:]
            var order: [TopicPartition] = []
            // A partition revoked since its messages were fetched is another member's: its
            // messages are handed back unclaimed, and its record was removed at the revocation.
            let revokedAt = control.lastRevocation == 0 ? [:] : control.revocations()
            for message in messages {
                let partition = TopicPartition(topic: message.topic, partition: message.partition)
                if let revoked = revokedAt[partition], revoked > message.rebalanceGeneration { continue }
                if let range = ranges[partition] {
                    ranges[partition] = (min(range.first, message.offset), max(range.last, message.offset))
                } else {
                    ranges[partition] = (message.offset, message.offset)
                    order.append(partition)
                }
            }
            guard !order.isEmpty || !passedOwners.isEmpty else { return }
            let positions = ledger.read { $0.positions(in: Set(order)) }
            let committable = Dictionary(positions.map { ($0.topicPartition, $0.offset) }) { a, _ in a }
            let records = order.map { partition in
                let range = ranges[partition]!
                var record = state.record(
                    partition,
                    first: range.first,
                    last: range.last,
                    committable: committable[partition]
                )
                if ahead && record.stops == 0 { record.to = max(record.to, record.to &+ Self.lookahead) }
                return (
                    partition, record,
                    covers: covered[partition]?.covers(record.from, range.last, record.stops) ?? false
                )
            }
            if passedOwners.isEmpty && records.allSatisfy(\.covers) { return }
            for (partition, record, _) in records { covered[partition] = record }
            let passed = passedOwners.map { ($0.key, $0.value) }
            do {
                try await store.writeStopRecords(records.map { ($0.0, $0.1) }, ttlSeconds: ttlSeconds, removing: passed)
                passedOwners = [:]
                if writeFailing { logger.notice("Stop records are written again") }
                writeFailing = false
            } catch {
                // Not written: the next batch tries again.
                for (partition, _, _) in records { covered[partition] = nil }
                if !writeFailing {
                    logger.warning(
                        "Cannot leave stop records in Redis: a crash while these messages are in flight will not be charged to them",
                        metadata: ["error": "\(error.message)"]
                    )
                }
                writeFailing = true
            }
        }

        /// Drops the suspects that intake's messages have passed (their results written).
        mutating func notePassed(ledger: SharedLedger) {
            guard !state.suspects.isEmpty || !state.deadOwners.isEmpty else { return }
            let partitions = Set(state.suspects.keys).union(state.deadOwners.keys)
            for position in ledger.read({ $0.positions(in: partitions) }) {
                let owners = state.passed(position.topicPartition, committable: position.offset)
                if !owners.isEmpty { passedOwners[position.topicPartition, default: []].formUnion(owners) }
            }
        }
    }

    /// Waits until `partition` has nothing in flight but what waits for an unreachable
    /// gateway (`stuck`), or its messages up to `offset` have their results written, or
    /// `timeout` passes, or the worker stops.
    func waitUntilDone(
        _ partition: TopicPartition,
        through offset: Int64,
        timeout: Duration,
        ledger: SharedLedger,
        control: PipelineControl,
        stuck: @Sendable (Set<TopicPartition>) -> Int
    ) async {
        let selection: Set<TopicPartition> = [partition]
        let deadline = ContinuousClock.now + timeout
        @Sendable func written(_ ledger: borrowing PipelineLedger) -> Bool {
            (ledger.positions(in: selection).first?.offset ?? -1) > offset
        }
        while ContinuousClock.now < deadline, !control.isStopping, !Task.isCancelled {
            let (working, done) = ledger.read { ($0.working(in: selection), written($0)) }
            if done || working - stuck(selection) <= 0 { return }
            // Woken by the ledger's events; what waits for a gateway is looked at again each 100 ms.
            _ = await ledger.waitUntil(deadline: min(deadline, .now + .milliseconds(100))) {
                $0.working(in: selection) == 0 || written($0)
            }
        }
    }

    /// Answers a message the stop guard skips: one `invalidJob` result, nothing parsed (or
    /// nothing, when a hand-off mark says its results are written).
    func skipped(
        _ message: KafkaMessage,
        stops: Int,
        handoffs: inout Handoffs,
        metrics: WorkerMetrics
    ) -> Chunk {
        let ref = MessageRef(
            partition: TopicPartition(topic: message.topic, partition: message.partition),
            offset: message.offset,
            epoch: message.rebalanceGeneration
        )
        var chunk = Chunk()
        chunk.messages = 1
        if handoffs.covers(ref, timestamp: MessageTimestamp(message).known) {
            chunk.registrations = [(ref, 0)]
            chunk.skipped = 1
            return chunk
        }
        logger.error(
            "Skipping message \(message.topic)[\(message.partition)]@\(message.offset): workers stopped \(stops) times while processing it (worker.maxStopsPerMessage). It is answered with an invalidJob result; the logs of the workers that stopped tell the cause (docs/operations.md, \"Messages that stop workers\")",
            metadata: [
                "topic": "\(message.topic)", "partition": "\(message.partition)", "offset": "\(message.offset)",
                "stops": "\(stops)",
            ]
        )
        metrics.increment(MetricCatalogue.poisonMessages, [message.topic])
        chunk.registrations = [(ref, 1)]
        chunk.results = [
            factory.invalidJob(
                ref,
                jobId: nil,
                app: nil,
                reason: "the worker stopped \(stops) times while processing this message; it is skipped "
                    + "(docs/operations.md, \"Messages that stop workers\")",
                at: factory.now()
            )
        ]
        return chunk
    }
}

extension IntakeStage {
    /// What carrying out a step needs besides intake's own state.
    struct StepContext {
        var ledger: SharedLedger
        var control: PipelineControl
        var store: NotificationStore
        var stuck: @Sendable (Set<TopicPartition>) -> Int
        /// How parsing keeps within the in-flight budget.
        var admission: Admission
    }

    /// Carries out one step of a batch (``StopGuard/plan(_:)``): leaves the stop records of its
    /// messages, then processes them; a careful step waits, before and after, until its
    /// partition has nothing else in flight.
    func process(
        _ step: StopGuard.Step,
        stops: inout Stops,
        handoffs: inout Handoffs,
        context: StepContext,
        handOver: (Chunk) async -> Void
    ) async {
        let (ledger, control, store) = (context.ledger, context.control, context.store)
        switch step {
        case .together(let messages):
            await stops.leaveRecords(
                for: messages,
                ahead: true,
                ledger: ledger,
                control: control,
                store: store,
                logger: logger
            )
            await parse(messages, handoffs: &handoffs, admission: context.admission, handOver: handOver)
        case .careful(let partition, let messages, let count):
            guard let first = messages.first, let last = messages.last else { return }
            // Alone in flight: what of the partition is still working finishes first.
            await waitUntilDone(
                partition,
                through: first.offset - 1,
                timeout: Stops.stepTimeout,
                ledger: ledger,
                control: control,
                stuck: context.stuck
            )
            await stops.leaveRecords(for: messages, ledger: ledger, control: control, store: store, logger: logger)
            logger.notice(
                "Processing \(partition.topic)[\(partition.partition)]@\(first.offset)...\(last.offset) alone: workers stopped \(count) times while these messages were in flight",
                metadata: ["partition": "\(partition)", "stops": "\(count)", "messages": "\(messages.count)"]
            )
            await parse(messages, handoffs: &handoffs, admission: context.admission, handOver: handOver)
            await waitUntilDone(
                partition,
                through: last.offset,
                timeout: Stops.stepTimeout,
                ledger: ledger,
                control: control,
                stuck: context.stuck
            )
        case .skip(let message, let count):
            await stops.leaveRecords(for: [message], ledger: ledger, control: control, store: store, logger: logger)
            await handOver(skipped(message, stops: count, handoffs: &handoffs, metrics: control.metrics))
        }
        stops.notePassed(ledger: ledger)
    }
}
