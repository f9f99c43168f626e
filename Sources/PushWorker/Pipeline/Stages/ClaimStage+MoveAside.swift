import PushKafka

// Moving aside (`docs/delivery.md`, "Moving an app aside"): the parked notifications of a pool
// whose gateway cannot be reached go to the parked topic once `worker.moveAsideAfter` of them
// wait, and intake leaves that topic's records in Kafka while their pool is still unreachable.
extension ClaimStage {
    /// Whether the pool of `key` cannot take notifications: it cannot reach its gateway, or it
    /// is stalled (what it gets is parked).
    func isUnavailable(_ key: PoolKey) -> Bool {
        ledger.read { $0.waiting.isBlocked(key) }
    }

    /// For `/status`: the notifications parked for each pool, and those moved aside since the
    /// worker started.
    func waiting() -> (parked: [PoolKey: Int], movedAside: [PoolKey: Int]) {
        ledger.read { ledger in (ledger.waiting.parked.mapValues(\.count), ledger.waiting.movedAside) }
    }

    /// Tells the ledger how many notifications pools that cannot deliver them hold.
    func updateStuck() {
        let held = delivery.heldByBlockedPools()
        ledger.update { $0.setStuck(held) }
    }

    /// Claims, in order, the notifications parked for the pool of `key` (with `all`), or as many
    /// as it has room for, so that the claim loop does not wait for its room; the rest wait for
    /// the next sweep. Returns how many.
    @discardableResult
    func unparkIntoRoom(of key: PoolKey, all: Bool = false) async -> Int {
        let room = all ? Int.max : delivery.room(for: key)
        let back = ledger.update { $0.unpark(key, room: room) }
        guard !back.isEmpty else { return 0 }
        await claimCounted(back)
        return back.count
    }

    /// Moves aside the parked notifications of each pool that has `parking.after` or more of
    /// them: written to the parked topic, one record per job, then completed, so that their
    /// messages' offsets are committed and the pool's backlog no longer holds memory or the
    /// in-flight budget. Jobs that asked for a summary, channel jobs and jobs read without their
    /// message stay parked here.
    func moveAsideIfDue() async {
        guard let parking else { return }
        let taken = ledger.update { $0.takeForMovingAside(after: parking.after) }
        for (key, list) in taken {
            let summaryRefs = ledger.read { $0.summaryRefs(among: list.lazy.map(\.ref)) }
            var moving: [Candidate] = []
            var staying: [Candidate] = []
            for c in list {
                if c.job.source == nil || c.job.channelAction != nil || summaryRefs.contains(c.ref) {
                    staying.append(c)
                } else {
                    moving.append(c)
                }
            }
            if !staying.isEmpty { ledger.update { $0.parkAgain(staying, for: key) } }
            guard !moving.isEmpty else { continue }
            await moveAside(moving, of: key, parking: parking)
        }
    }

    private func moveAside(_ moving: [Candidate], of key: PoolKey, parking: Parking) async {
        // A revocation of their partitions waits for the records to be written.
        ledger.update { $0.movingAside(moving) }
        let now = factory.now()
        var messages: [KafkaOutgoingMessage] = []
        var start = 0
        while start < moving.count {
            let first = moving[start]
            var end = start + 1
            while end < moving.count, moving[end].ref == first.ref, moving[end].job === first.job { end += 1 }
            let record = ParkedRecord(
                origin: TopicPartitionOffset(first.ref.partition, offset: first.ref.offset),
                movedAt: now,
                staleAt: first.job.content.staleAt,
                tokens: moving[start..<end].map(\.tokenHex),
                job: first.job.source ?? []
            )
            messages.append(
                KafkaOutgoingMessage(
                    topic: parking.topic,
                    key: ParkedRecord.key(key, partition: first.ref.partition.partition),
                    value: record.encoded(),
                    timestamp: first.job.producedAt
                )
            )
            start = end
        }
        let written = await parking.producer.produceAll(
            messages,
            what: "moved-aside job",
            control: control,
            logger: logger
        )
        guard written else {
            // Stopping: they wait here again, and are handed back with the rest.
            ledger.update { $0.parkAgain(moving, for: key, wereMoving: true) }
            return
        }
        ledger.update { $0.movedAside(moving, of: key) }
        results.complete(moving.map(\.ref))
        control.metrics.increment(MetricCatalogue.movedAside, [key.app, key.environment.rawValue], by: moving.count)
        logger.notice(
            "Notifications moved aside while their gateway cannot be reached",
            metadata: [
                "app": "\(key.app)", "env": "\(key.environmentName)", "notifications": "\(moving.count)",
                "jobs": "\(messages.count)", "topic": "\(parking.topic)",
            ]
        )
    }
}
