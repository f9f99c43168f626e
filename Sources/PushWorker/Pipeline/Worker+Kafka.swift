import Dispatch
import Foundation
import Logging
import PushConfiguration
import PushKafka

/// The worker's Kafka clients and what happens when partitions are taken away
/// (`docs/architecture.md`, "Healing").
extension Worker {
    func makeKafkaClients() throws -> (KafkaProducer, KafkaConsumer) {
        var kafka = KafkaConfiguration(configuration.kafka.properties)
        kafka.properties["bootstrap.servers"] = configuration.kafka.bootstrapServers
        kafka.properties["client.id"] = kafka.properties["client.id"] ?? "apn-worker-\(configuration.worker.id)"
        kafka.logger = Logger(label: KafkaConfiguration.loggerLabel)
        // Requests go out at once instead of waiting for the previous segment's ACK (Nagle):
        // a result's latency includes an acknowledged produce.
        kafka.properties["socket.nagle.disable"] = kafka.properties["socket.nagle.disable"] ?? "true"
        var producerConfig = kafka
        producerConfig.properties["linger.ms"] = producerConfig.properties["linger.ms"] ?? "2"
        var consumerConfig = kafka
        consumerConfig.properties["group.id"] = configuration.kafka.groupId
        // A member that dies is noticed within 10 s (librdkafka's own default is 45 s), and a
        // rebalance reaches the members within a second.
        consumerConfig.properties["session.timeout.ms"] = consumerConfig.properties["session.timeout.ms"] ?? "10000"
        consumerConfig.properties["heartbeat.interval.ms"] = consumerConfig.properties["heartbeat.interval.ms"] ?? "1000"
        if let instance = configuration.kafka.groupInstanceId {
            // Static membership: a restarted worker with the same id takes its partitions back
            // within the session timeout, without a rebalance.
            consumerConfig.properties["group.instance.id"] = instance
        }
        consumerConfig.properties["auto.offset.reset"] = consumerConfig.properties["auto.offset.reset"] ?? "earliest"
        // Offsets are stored once their results are written; librdkafka commits them.
        consumerConfig.properties["enable.auto.commit"] = "true"
        consumerConfig.properties["enable.auto.offset.store"] = "false"
        consumerConfig.properties["auto.commit.interval.ms"] = consumerConfig.properties["auto.commit.interval.ms"] ?? "200"
        do {
            let producer = try KafkaProducer(configuration: producerConfig)
            let consumer = try KafkaConsumer(configuration: consumerConfig) { [self] partitions in
                handleRevoke(partitions)
            }
            try consumer.subscribe(topics: [configuration.kafka.requestsTopic])
            return (producer, consumer)
        } catch {
            throw WorkerError("cannot set up Kafka at \(configuration.kafka.bootstrapServers): \(error)")
        }
    }

    /// Called by librdkafka (on the poll thread) before partitions are taken away. Held and
    /// parked notifications of those partitions are handed back unclaimed; those about to be
    /// claimed and those in flight are finished and their results written (up to
    /// `revokeTimeout`); the partitions' written positions go to Redis, so that the next owner
    /// writes no result twice even when the commit fails; then their offsets are committed,
    /// synchronously, while the partitions are still this member's.
    func handleRevoke(_ partitions: [TopicPartition]) {
        guard let stages = stages.withLock({ $0 }) else { return }
        let selection = Set(partitions)
        control.startRevocation()
        defer { control.endRevocation() }
        let inSelection: (TopicPartition) -> Bool = { selection.contains($0) }
        stages.claims.handBack(where: inSelection)
        func outstanding() -> Int {
            // Notifications queued in a pool that cannot reach its gateway cannot finish now: the
            // partition is handed on without them (their outcome is recorded when the gateway
            // answers; the next owner waits for that claim and produces its result).
            stages.results.active(in: selection) - stages.delivery.stuck(in: selection) + stages.claims.pending(in: selection)
                + stages.summaries.active(in: selection)
        }
        let before = outstanding()
        logger.info("Partitions revoked", metadata: ["partitions": "\(partitions)", "inFlight": "\(before)"])
        // A stopping worker's drain has already waited for its work, up to the shutdown timeout:
        // what is left by now (its writer may have ended) is consumed again by the next owner.
        if before > 0 && !control.isStopping {
            let deadline = DispatchTime.now() + .milliseconds(Int(Worker.revokeTimeout / .milliseconds(1)))
            while outstanding() > 0 {
                if control.progress.wait(timeout: deadline) == .timedOut {
                    logger.warning(
                        "Revoked partitions still had notifications in flight; handing them back",
                        metadata: ["partitions": "\(partitions)"])
                    break
                }
            }
        }
        // What is still unclaimed (after a timeout) and what the claims put back to wait
        // meanwhile is handed back; a round trip still under way hands its notifications back
        // when it ends, by their revocation epoch.
        control.markRevoked(selection, generation: stages.consumer.rebalanceGeneration)
        stages.claims.handBack(unclaimedToo: true, where: inSelection)
        let marksDeadline = DispatchTime.now() + .seconds(2)
        while !stages.results.positionsStored(for: selection) {
            stages.results.requestPositions()
            if control.progress.wait(timeout: marksDeadline) == .timedOut {
                logger.warning(
                    "Cannot store the written positions of revoked partitions in time", metadata: ["partitions": "\(partitions)"])
                break
            }
        }
        commitRevoked(stages, selection)
        stages.results.remove(selection)
    }

    /// Commits the written position of revoked partitions before they are handed on, retrying
    /// briefly while the coordinator is busy; stores it for librdkafka's own commit as well.
    private func commitRevoked(_ stages: Stages, _ selection: Set<TopicPartition>) {
        let offsets = stages.results.positions(in: selection)
        guard !offsets.isEmpty else { return }
        _ = try? stages.consumer.store(offsets)
        let deadline = ContinuousClock.now + Worker.revokeCommitTimeout
        var delay: Duration = .milliseconds(50)
        while true {
            do {
                try stages.consumer.commitBlocking(offsets, timeout: max(deadline - .now, .milliseconds(500)))
                stages.results.markCommitted(offsets)
                logger.debug("Committed revoked partitions", metadata: ["offsets": "\(offsets)"])
                return
            } catch {
                if !error.isRetriable || ContinuousClock.now + delay > deadline {
                    logger.warning(
                        "Cannot commit the offsets of revoked partitions; leaving hand-off marks in Redis so that their next owner skips the messages whose results are written",
                        metadata: ["error": "\(error)", "offsets": "\(offsets)"])
                    leaveHandoffs(stages, offsets)
                    return
                }
                Thread.sleep(forTimeInterval: delay / .seconds(1))
                delay = min(delay * 2, .milliseconds(500))
            }
        }
    }

    /// Waits (on the poll thread, up to ``Worker/handoffTimeout``) while the hand-off marks of
    /// `offsets` are stored: the partitions' next owner reads them when it is assigned, which is
    /// only after this revocation returns.
    private func leaveHandoffs(_ stages: Stages, _ offsets: [TopicPartitionOffset]) {
        let done = DispatchSemaphore(value: 0)
        Task {
            await stages.results.leaveHandoffs(offsets)
            done.signal()
        }
        if done.wait(timeout: .now() + .milliseconds(Int(Worker.handoffTimeout / .milliseconds(1)))) == .timedOut {
            logger.warning("Cannot leave hand-off marks in time", metadata: ["offsets": "\(offsets)"])
        }
    }

    /// A member stopped while its first join is in progress cannot leave yet: it learns its
    /// member id only when the join answers, and closing at once would leave a member that the
    /// group assigns partitions to and waits for until its session times out. So it finishes
    /// the join (whatever it is assigned stays paused; nothing is processed) and then leaves.
    func finishJoining(_ consumer: KafkaConsumer) async {
        guard !consumer.hasJoined else { return }
        let deadline = ContinuousClock.now + Worker.joinWaitOnStop
        logger.info("Stopping before the first assignment: finishing the join so as to leave the group cleanly")
        while ContinuousClock.now < deadline, !consumer.hasJoined {
            // Drives the join. A message fetched meanwhile is not processed: no offset is stored
            // for it, so its partition's next owner consumes it.
            _ = try? await consumer.poll(maxMessages: 1, timeout: .milliseconds(100))
            if let assigned = try? consumer.assignment(), !assigned.isEmpty { try? consumer.pause(assigned) }
        }
    }
}
