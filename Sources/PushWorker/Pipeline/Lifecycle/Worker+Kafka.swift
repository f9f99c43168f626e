import Foundation
import Logging
import PushConfiguration
import PushKafka

/// The worker's Kafka clients and what happens when partitions are taken away
/// (`docs/architecture.md`, "Healing").
extension Worker {
    func makeKafkaClients() throws -> (KafkaProducer, KafkaConsumer) {
        // The worker's defaults (``WorkerConfiguration/KafkaClientDefaults``), each overridden
        // by the same property in kafka.properties, but for those the delivery guarantee rests on.
        let defaults = configuration.kafka.clientDefaults
        var kafka = KafkaConfiguration(configuration.kafka.properties)
        kafka.properties["bootstrap.servers"] = configuration.kafka.bootstrapServers
        kafka.properties["client.id"] = kafka.properties["client.id"] ?? "apn-worker-\(configuration.worker.id)"
        kafka.logger = Logger(label: KafkaConfiguration.loggerLabel)
        kafka.properties.merge(defaults.clientProperties) { given, _ in given }
        var producerConfig = kafka
        producerConfig.properties.merge(defaults.producerProperties) { given, _ in given }
        var consumerConfig = kafka
        consumerConfig.properties["group.id"] = configuration.kafka.groupId
        consumerConfig.properties.merge(defaults.consumerProperties) { given, _ in given }
        if let instance = configuration.kafka.groupInstanceId {
            // Static membership: a restarted worker with the same id takes its partitions back
            // within the session timeout, without a rebalance.
            consumerConfig.properties["group.instance.id"] = instance
        }
        // Offsets are stored once their results are written; librdkafka commits them.
        consumerConfig.properties.merge(defaults.consumerForcedProperties) { _, forced in forced }
        do {
            let producer = try KafkaProducer(configuration: producerConfig)
            // Revocations are reported, not applied: the worker finishes the partitions' work
            // and commits it in its own tasks, then completes them (``revoke(_:generation:lost:_:)``).
            let consumer = try KafkaConsumer(configuration: consumerConfig, revocation: .deferred)
            try consumer.subscribe(lanes: configuration.kafka.consumedTopics)
            return (producer, consumer)
        } catch {
            throw WorkerError("cannot set up Kafka at \(configuration.kafka.bootstrapServers): \(error)")
        }
    }

    /// Hands on partitions the group takes away, in the worker's rebalance task while intake
    /// goes on with the others (the consumer has paused them; they stay this member's until
    /// the end). Held and parked notifications of those partitions are handed back unclaimed;
    /// those about to be claimed and those in flight are finished and their results written
    /// (up to ``Worker/revokeTimeout``); the partitions' written positions go to Redis, so that
    /// the next owner writes no result twice even when the commit fails; then their offsets
    /// are committed while the partitions are still this member's. The caller then completes
    /// the revocation (``KafkaConsumer/completeRevocation(_:)``).
    ///
    /// A `lost` assignment (the session timed out: this worker was cut off from the group
    /// coordinator, and the partitions are already another member's) is not waited for: nothing
    /// of it could be committed, and its next owner does not wait for this worker's results but
    /// for its claims in Redis, which each outcome settles as the gateway answers. So everything
    /// not yet sent is handed back at once, the written positions and hand-off marks go to
    /// Redis, and the worker can rejoin the group as soon as its path to Kafka is back.
    func revoke(_ partitions: [TopicPartition], generation: UInt64, lost: Bool, _ stages: Stages) async {
        let selection = Set(partitions)
        let inSelection: (TopicPartition) -> Bool = { selection.contains($0) }
        stages.claims.handBack(where: inSelection)
        func outstanding() -> Int {
            // Notifications queued in a pool that cannot reach its gateway cannot finish now: the
            // partition is handed on without them (their outcome is recorded when the gateway
            // answers; the next owner waits for that claim and produces its result).
            ledger.read { $0.working(in: selection) } - stages.delivery.stuck(in: selection)
        }
        let before = outstanding()
        if lost {
            logger.warning(
                "Partitions lost: the group gave them to another member while this worker could not reach it; handing back what was not sent",
                metadata: ["partitions": "\(partitions)", "inFlight": "\(before)"]
            )
        } else {
            logger.info("Partitions revoked", metadata: ["partitions": "\(partitions)", "inFlight": "\(before)"])
        }
        // A stopping worker's drain waits for its work, up to the shutdown timeout: what is left
        // then is consumed again by the next owner.
        let deadline = ContinuousClock.now + Worker.revokeTimeout
        while !lost && outstanding() > 0 && !control.isStopping {
            if !(await control.waitForProgress(until: deadline)) {
                logger.warning(
                    "Revoked partitions still had notifications in flight; handing them back",
                    metadata: ["partitions": "\(partitions)"]
                )
                break
            }
        }
        // What is still unclaimed (after a timeout) and what the claims put back to wait
        // meanwhile is handed back; a round trip still under way hands its notifications back
        // when it ends, by the generation they were fetched at.
        control.markRevoked(selection, generation: generation)
        stages.claims.handBack(unclaimedToo: true, where: inSelection)
        let marksDeadline = ContinuousClock.now + .seconds(2)
        while !ledger.read({ $0.positionsStored(for: selection) }) {
            stages.results.requestPositions()
            if !(await control.waitForProgress(until: marksDeadline)) {
                logger.warning(
                    "Cannot store the written positions of revoked partitions in time",
                    metadata: ["partitions": "\(partitions)"]
                )
                break
            }
        }
        let positions = ledger.read { $0.positions(in: selection) }
        if lost {
            // Not this member's to commit any more (the generation has moved on).
            if !positions.isEmpty { await stages.results.leaveHandoffs(positions) }
        } else {
            await commitForHandover(stages.consumer, stages.results, positions)
        }
        ledger.update { $0.removed(selection) }
        // Handed on by choice: its next owner charges no stop to what was in flight.
        await removeStopRecords(partitions, stages.store)
    }

    /// Removes this worker's stop records of partitions it hands on or stops with by choice
    /// (``StopGuard``). A failure is logged: the next owner then charges one stop to what was
    /// in flight, which only records it (a message is skipped only after more stops).
    func removeStopRecords(_ partitions: [TopicPartition], _ store: NotificationStore) async {
        guard configuration.worker.maxStopsPerMessage > 0, !partitions.isEmpty else { return }
        do {
            try await store.removeStopRecords(partitions)
        } catch {
            logger.warning(
                "Cannot remove this worker's stop records; the partitions' next owner will count one stop for the messages that were in flight",
                metadata: ["partitions": "\(partitions)", "error": "\(error.message)"]
            )
        }
    }

    /// Commits the written position of partitions about to be handed on, retrying briefly while
    /// the coordinator is busy (``Worker/revokeCommitTimeout``), and stores it for librdkafka's
    /// own commit as well. When the commit fails, hand-off marks in Redis let the next owner
    /// skip the messages whose results are written.
    func commitForHandover(_ consumer: KafkaConsumer, _ results: ResultStage, _ offsets: [TopicPartitionOffset]) async {
        guard !offsets.isEmpty else { return }
        do {
            try consumer.store(offsets)
        } catch {
            logger.warning("Cannot store the offsets of partitions handed on", metadata: ["error": "\(error)"])
        }
        let deadline = ContinuousClock.now + Worker.revokeCommitTimeout
        var delay: Duration = .milliseconds(50)
        while true {
            do {
                try await consumer.commit(offsets, timeout: max(deadline - .now, .milliseconds(500)))
                results.markCommitted(offsets)
                logger.debug("Committed partitions handed on", metadata: ["offsets": "\(offsets)"])
                return
            } catch {
                if !error.isRetriable || ContinuousClock.now + delay > deadline {
                    logger.warning(
                        "Cannot commit the offsets of partitions handed on; leaving hand-off marks in Redis so that their next owner skips the messages whose results are written",
                        metadata: ["error": "\(error)", "offsets": "\(offsets)"]
                    )
                    await results.leaveHandoffs(offsets)
                    return
                }
                do { try await Task.sleep(for: delay) } catch { return }
                delay = min(delay * 2, .milliseconds(500))
            }
        }
    }

    /// A member stopped while its first join is in progress cannot leave yet: it learns its
    /// member id only when the join answers, and closing at once would leave a member that the
    /// group assigns partitions to and waits for until its session times out. So it finishes
    /// the join (whatever it is assigned stays paused; nothing is processed) and then leaves.
    ///
    /// It waits at most ``Worker/joinWaitOnStop``, and not past `deadline` (the stop's own bound)
    /// or the task's cancellation: a group coordinator that is gone never answers the join.
    func finishJoining(_ consumer: KafkaConsumer, deadline: ContinuousClock.Instant) async {
        guard !consumer.hasJoined else { return }
        let deadline = min(deadline, ContinuousClock.now + Worker.joinWaitOnStop)
        logger.info("Stopping before the first assignment: finishing the join so as to leave the group cleanly")
        while ContinuousClock.now < deadline, !consumer.hasJoined, !Task.isCancelled {
            // Drives the join. A message fetched meanwhile is not processed: no offset is stored
            // for it, so its partition's next owner consumes it.
            do {
                _ = try await consumer.poll(maxMessages: 1, timeout: .milliseconds(100))
                let assigned = try consumer.assignment()
                if !assigned.isEmpty { try consumer.pause(assigned) }
            } catch {
                if error.isClosed || error.isCancellation || error.isFatal { break }
                logger.debug("Kafka error while finishing the join", metadata: ["error": "\(error)"])
            }
        }
        if !consumer.hasJoined { logger.warning("The join did not finish; leaving the group without it") }
    }
}
