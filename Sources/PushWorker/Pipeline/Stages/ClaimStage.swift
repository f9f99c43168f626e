import APNSCore
import AsyncAlgorithms
import Logging
import PushConfiguration
import PushKafka
import PushRedis
import Synchronization

/// The second stage: parsed notifications are claimed in Redis, one round trip per chunk
/// (`NotificationStore.claim`), and each decision is acted on: send (to the delivery
/// stage), a result now (to the result stage), nothing (a duplicate), or a retry later.
///
/// It decides which notifications wait: *held* ones retry after a delay (held by another live
/// worker, over the app's rate, Redis down), *parked* ones wait unclaimed for their pool to take
/// notifications again; both wait in the ledger (``WaitingNotifications``), beside the pools
/// that cannot take notifications. Its loop wakes on signals: intake handed over notifications, a retry
/// is due, a gateway came back or went away, the stale sweep. What intake hands over waits in
/// one list, and each round trip claims all of it (up to 5,000), so that chunks parsed while a
/// round trip was under way share the next one.
final class ClaimStage: Sendable {
    /// What wakes the claim loop.
    enum Signal: Sendable {
        /// Intake handed over notifications.
        case parsed
        /// Held notifications may be due.
        case retryDue
        /// A pool cannot reach its gateway: park its new notifications.
        case unavailable(PoolKey)
        /// A pool reaches its gateway again: claim what is parked for it.
        case available(PoolKey)
        /// Fail parked notifications whose job went stale.
        case sweepStale
    }

    struct State {
        /// Handed over by intake, not yet taken by a round trip.
        var unclaimed: [Candidate] = []
        /// The first of `unclaimed` that are urgent (the highest priority lane's): they are
        /// claimed before the others.
        var urgentUnclaimed = 0
    }

    /// Where notifications move aside (`kafka.parkedTopic`), and when (`worker.moveAsideAfter`).
    struct Parking: Sendable {
        var producer: KafkaProducer
        var topic: String
        /// Parked notifications of one pool that make them move aside.
        var after: Int
    }

    let state = Mutex(State())
    let store: NotificationStore
    let results: ResultStage
    let delivery: DeliveryStage
    let localClaims: LocalClaims
    let control: PipelineControl
    let ledger: SharedLedger
    let factory: ResultFactory
    let logger: Logger
    private let dedupeTTLSeconds: Int
    /// The worker reads priority lanes: the highest lane's notifications are claimed first.
    private let hasLanes: Bool
    private let maxChunk: Int
    let parking: Parking?
    /// Held notifications' wake-ups, one timer at a time (see ``runTimers()``).
    private let wakeUps: AsyncStream<ContinuousClock.Instant>
    private let wakeUpsIn: AsyncStream<ContinuousClock.Instant>.Continuation
    let signals: AsyncStream<Signal>
    let signalsIn: AsyncStream<Signal>.Continuation

    init(
        store: NotificationStore,
        results: ResultStage,
        delivery: DeliveryStage,
        localClaims: LocalClaims,
        control: PipelineControl,
        ledger: SharedLedger,
        factory: ResultFactory,
        configuration: WorkerConfiguration,
        signals: (AsyncStream<Signal>, AsyncStream<Signal>.Continuation),
        parking: Parking? = nil,
        logger: Logger
    ) {
        self.parking = parking
        self.store = store
        self.results = results
        self.delivery = delivery
        self.localClaims = localClaims
        self.control = control
        self.ledger = ledger
        self.factory = factory
        self.logger = logger
        self.dedupeTTLSeconds = configuration.worker.dedupeTTLSeconds
        self.hasLanes = configuration.kafka.highestLane != nil
        self.maxChunk = max(configuration.worker.batchSize, 5000)
        (wakeUps, wakeUpsIn) = AsyncStream.makeStream()
        (self.signals, self.signalsIn) = signals
    }

    // MARK: Loops

    /// Claims what intake hands over and what the signals release, until the signals end.
    func run() async {
        for await signal in signals {
            switch signal {
            case .parsed:
                while let batch = takeUnclaimed() { await claimCounted(batch) }
            case .retryDue:
                await claimCounted(takeDue())
            case .unavailable:
                updateStuck()
            case .available(let key):
                updateStuck()
                // All of them: the pool delivers again, and a send waits only while it drains
                // what it held, sooner than the sweeps would let them in by its room.
                let back = await unparkIntoRoom(of: key, all: true)
                logger.notice(
                    "Gateway takes notifications again: parked notifications go out",
                    metadata: ["app": "\(key.app)", "env": "\(key.environmentName)", "parked": "\(back)"]
                )
            case .sweepStale:
                expireStaleParked()
                updateStuck()
                // Pools that took part of what was parked for them take more as they have room.
                let waiting = ledger.read { $0.waiting.unblockedWithParked }
                for key in waiting { await unparkIntoRoom(of: key) }
            }
        }
    }

    /// Turns hold requests into `retryDue` signals at their time. Holds are short (at most a
    /// second) and requested in nearly increasing order, so one timer at a time is enough.
    func runTimers() async {
        for await due in wakeUps {
            try? await Task.sleep(until: due)
            signalsIn.yield(.retryDue)
        }
    }

    /// Judges which pools are stalled, and asks for a sweep of stale parked notifications, every
    /// second, until cancelled.
    func runSweeps() async {
        var seconds = 0
        for await _ in AsyncTimerSequence(interval: .seconds(1), clock: .continuous) {
            // Here rather than in the claim loop, so that a stall is seen while the loop works.
            delivery.judgeStalls()
            signalsIn.yield(.sweepStale)
            // Not while Redis is away: the sweeps must not wait for its timeout.
            if seconds % 60 == 0 && !control.isRedisDown { await countChannels() }
            seconds += 1
        }
    }

    /// Ends the loops (shutdown).
    func finish() {
        wakeUpsIn.finish()
        signalsIn.finish()
    }

    // MARK: Intake's side

    /// Takes notifications from intake (it waited for room under `maxInFlight` before it polled
    /// them); a revocation waits for them until they are acted on.
    func handOver(_ candidates: [Candidate]) {
        guard !candidates.isEmpty else { return }
        ledger.update { $0.claiming(candidates.lazy.map(\.ref.partition)) }
        let wake = state.withLock { s -> Bool in
            defer {
                if hasLanes && candidates.contains(where: \.job.content.urgent) {
                    let urgent = candidates.filter(\.job.content.urgent)
                    s.unclaimed.insert(contentsOf: urgent, at: s.urgentUnclaimed)
                    s.urgentUnclaimed += urgent.count
                    s.unclaimed += candidates.filter { !$0.job.content.urgent }
                } else {
                    s.unclaimed += candidates
                }
            }
            return s.unclaimed.isEmpty
        }
        if wake { signalsIn.yield(.parsed) }
    }

    /// Up to 5,000 (or `batchSize`) of the notifications intake handed over, urgent ones first,
    /// then the oldest.
    private func takeUnclaimed() -> [Candidate]? {
        state.withLock { s in
            guard !s.unclaimed.isEmpty else { return nil }
            s.urgentUnclaimed = max(0, s.urgentUnclaimed - maxChunk)
            if s.unclaimed.count <= maxChunk {
                defer { s.unclaimed = [] }
                return s.unclaimed
            }
            defer { s.unclaimed.removeFirst(maxChunk) }
            return Array(s.unclaimed.prefix(maxChunk))
        }
    }

    /// Claims candidates reported ``PipelineLedger/claiming(_:)`` (handed over by intake, due
    /// again after a hold, or unparked), and reports the round trip over, so that a revocation
    /// waits for it instead of handing their partition on while it is under way.
    func claimCounted(_ candidates: [Candidate]) async {
        await claim(candidates)
        ledger.update { $0.claimed(candidates.lazy.map(\.ref.partition)) }
        control.madeProgress()
    }

    // MARK: Claiming

    private func claim(_ candidates: [Candidate]) async {
        guard !candidates.isEmpty else { return }
        defer { control.madeProgress() }
        // Stopping: nothing more is claimed; their messages are consumed again.
        if control.isStopping {
            ledger.update { $0.handedBack(candidates.map(\.ref)) }
            return
        }
        // Parsed before their partition was revoked: handed back (the next owner consumes them).
        var candidates = candidates
        let revokedAt = control.revocations()
        if !revokedAt.isEmpty {
            var stale: [MessageRef] = []
            candidates.removeAll { c in
                guard revokedAt[c.ref.partition].map({ c.epoch < $0 }) ?? false else { return false }
                stale.append(c.ref)
                return true
            }
            if !stale.isEmpty { ledger.update { $0.handedBack(stale) } }
        }
        // A notification this process still has in flight for the same message waits for it.
        var ready: [Candidate] = []
        var waiting: [Candidate] = []
        for c in candidates {
            if localClaims.holds(c.resultId, for: c.ref) { waiting.append(c) } else { ready.append(c) }
        }
        if !waiting.isEmpty { hold(waiting, for: .seconds(1)) }
        // A pool that cannot take notifications gets no more: its notifications wait, unclaimed.
        // Under the ledger's lock, as its pool's coming back is: none is parked after it.
        let stillFresh = factory.now()
        if ledger.update({ $0.park(from: &ready, freshAt: stillFresh) }) > 0 { await moveAsideIfDue() }
        guard !ready.isEmpty else { return }

        let now = factory.now()
        let mark = control.liveness.mark()
        let decisions: [NotificationStore.ClaimDecision]
        do {
            decisions = try await claimByTopic(ready, now: now)
            if control.setRedisDown(false) { logger.notice("Redis answers again") }
        } catch {
            if !control.setRedisDown(true) {
                logger.error(
                    "Cannot claim notifications in Redis; holding them until it answers",
                    metadata: ["error": "\(error.message)", "notifications": "\(ready.count)"]
                )
            }
            await store.reconnect(logger: logger)
            hold(ready, for: .milliseconds(500))
            return
        }
        let newer = await acceptedNewer(ready, decisions)
        await act(on: Self.plan(ready, decisions, factory: factory, now: now, mark: mark, newerAccepted: newer))
    }

    /// Claims `ready`: one claim per topic their messages came from (one, unless the worker
    /// reads priority lanes), each naming its topic in the claims it makes.
    private func claimByTopic(
        _ ready: [Candidate],
        now: Int64
    ) async throws(RedisError) -> [NotificationStore.ClaimDecision] {
        let topic = ready[0].ref.partition.topic
        guard ready.contains(where: { $0.ref.partition.topic != topic }) else {
            return try await store.claim(topic: topic, ready, ttlSeconds: dedupeTTLSeconds, nowMilliseconds: now)
        }
        var byTopic: [String: [Int]] = [:]
        for (index, candidate) in ready.enumerated() {
            byTopic[candidate.ref.partition.topic, default: []].append(index)
        }
        var decisions = [NotificationStore.ClaimDecision?](repeating: nil, count: ready.count)
        for (topic, indices) in byTopic {
            let claimed = try await store.claim(
                topic: topic,
                indices.map { ready[$0] },
                ttlSeconds: dedupeTTLSeconds,
                nowMilliseconds: now
            )
            for (index, decision) in zip(indices, claimed) { decisions[index] = decision }
        }
        return decisions.map { $0! }
    }

    /// What to do with one round trip's decisions; no I/O.
    struct Plan {
        /// Runs of notifications to send, one per pool, in the order they came.
        var sends: [(key: PoolKey, notifications: [SentContext])] = []
        var results: [ResultItem] = []
        /// Messages consumed again with nothing to write for these notifications.
        var completed: [MessageRef] = []
        var busy: [Candidate] = []
        var throttled: [Candidate] = []
        var statistics = WorkerStatistics()
        var decisions = Decisions()
    }

    /// Per app, the notifications a claim round trip kept from being sent, for the metrics.
    struct Decisions: Sendable {
        /// Already claimed, sent or written elsewhere.
        var duplicates: [String: Int] = [:]
        /// Over the app's rate: held back for the next second.
        var throttled: [String: Int] = [:]
        /// Over the device's hourly limit: failed with status 516.
        var deviceLimited: [String: Int] = [:]
        /// Reported unregistered by Apple: failed with status 519.
        var unregistered: [String: Int] = [:]
        /// Past the job's `staleAfter` before they could be sent: failed with status 521.
        var stale: [String: Int] = [:]
        /// Live Activity updates a newer one replaced: failed with status 522.
        var superseded: [String: Int] = [:]
    }

    /// `mark`: the liveness mark taken before the claim's round trip (``LivenessWatch/mark()``).
    /// `newerAccepted`: by index, the job of a newer update of the candidate's Live Activity
    /// that Apple accepted (``acceptedNewer(_:_:)``).
    static func plan(
        _ candidates: [Candidate],
        _ decisions: [NotificationStore.ClaimDecision],
        factory: ResultFactory,
        now: Int64,
        mark: UInt32 = 0,
        newerAccepted: [Int: String] = [:]
    ) -> Plan {
        var plan = Plan()
        var runIndex: [PoolKey: Int] = [:]
        for (index, (c, decision)) in zip(candidates, decisions).enumerated() {
            if decision == .send, let activity = c.activity, !c.job.dryRun,
                let job = newerAccepted[index] ?? activity.replacement
            {
                // Latest wins: a newer update of its Live Activity is waiting here or was accepted.
                plan.decisions.superseded[c.job.app, default: 0] += 1
                plan.results.append(factory.superseded(c, by: job, at: now))
                continue
            }
            switch decision {
            case .send where c.job.dryRun, .resend where c.job.dryRun:
                // Claimed and counted like a real notification; answered instead of sent.
                plan.results.append(factory.dryRun(c, at: now))
            case .send where c.job.content.staleAt.map { $0 <= now } ?? false:
                // Consumed, or claimed again after a hold, too late: reported, never sent.
                plan.decisions.stale[c.job.app, default: 0] += 1
                plan.results.append(staleResult(c, factory: factory, now: now))
            case .send, .resend:
                let sent = SentContext(candidate: c, takeover: decision == .resend, claimMark: mark)
                if let index = runIndex[c.poolKey] {
                    plan.sends[index].notifications.append(sent)
                } else {
                    runIndex[c.poolKey] = plan.sends.count
                    plan.sends.append((c.poolKey, [sent]))
                }
                if decision == .resend { plan.statistics.takenOver += 1 }
            case .recorded(let value, let feedback):
                plan.decisions.duplicates[c.job.app, default: 0] += 1
                var messages = [ResultMessage(key: Array(c.tokenHex.utf8), value: value)]
                if let feedback { messages.append(ResultMessage(key: Array(c.tokenHex.utf8), value: feedback)) }
                plan.results.append(.reemitted(c.ref, resultId: c.resultId, messages))
                plan.statistics.reemitted += 1
            case .duplicate:
                plan.completed.append(c.ref)
                plan.statistics.duplicates += 1
                plan.decisions.duplicates[c.job.app, default: 0] += 1
            case .written:
                plan.completed.append(c.ref)
                plan.statistics.alreadyWritten += 1
                plan.decisions.duplicates[c.job.app, default: 0] += 1
            case .busy:
                plan.busy.append(c)
            case .throttled:
                plan.throttled.append(c)
                plan.decisions.throttled[c.job.app, default: 0] += 1
            case .unregistered(let verdict):
                plan.decisions.unregistered[c.job.app, default: 0] += 1
                plan.results.append(
                    factory.decided(c, status: .unregistered, reason: verdict.sentence, verdict: verdict, at: now)
                )
            case .rateLimited:
                plan.decisions.deviceLimited[c.job.app, default: 0] += 1
                plan.results.append(
                    factory.decided(c, status: .rateLimited, reason: Self.deviceLimitReason(c), at: now)
                )
            }
        }
        return plan
    }

    /// A notification consumed, or claimed again after a hold, past its job's `staleAfter`:
    /// failed with status 521, never sent.
    private static func staleResult(_ c: Candidate, factory: ResultFactory, now: Int64) -> ResultItem {
        let (age, overflow) = now.subtractingReportingOverflow(c.job.producedAt)
        let late = overflow ? Int64.max / 1000 : age / 1000
        return factory.decided(
            c,
            status: .expired,
            reason: "the job's staleAfter passed before it could be sent (\(late) s after it was produced); not sent",
            at: now
        )
    }

    private static func deviceLimitReason(_ c: Candidate) -> String {
        "the device reached its limit of \(c.job.devicePerHour) notifications per hour"
    }

    private func act(on plan: Plan) async {
        control.count { s in
            s.takenOver += plan.statistics.takenOver
            s.reemitted += plan.statistics.reemitted
            s.duplicates += plan.statistics.duplicates
            s.alreadyWritten += plan.statistics.alreadyWritten
        }
        control.metrics.claimed(plan.decisions)
        for run in plan.sends {
            localClaims.claim(run.notifications.map(\.candidate))
            ledger.update { $0.sending(run.notifications.lazy.map(\.candidate.ref.partition)) }
        }
        results.complete(plan.completed)
        results.submit(plan.results)
        if !plan.busy.isEmpty { hold(plan.busy, for: .seconds(1)) }
        if !plan.throttled.isEmpty {
            // Over the app's rate: retry in the next second.
            let millis = factory.now() % 1000
            hold(plan.throttled, for: .milliseconds(1000 - millis + 1))
        }
        for run in plan.sends {
            await choosePriorities(run.notifications)
            await chooseBroadcastExpirations(run.notifications, key: run.key)
            await delivery.submit(run.notifications, to: run.key)
        }
    }

    // MARK: Waiting notifications

    private func hold(_ candidates: [Candidate], for delay: Duration) {
        let due = ContinuousClock.now + delay
        ledger.update { $0.hold(candidates, until: due) }
        wakeUpsIn.yield(due)
    }

    private func takeDue() -> [Candidate] {
        guard !control.isStopping else { return [] }
        let now = ContinuousClock.now
        return ledger.update { $0.takeDue(at: now) }
    }

    /// Parked notifications whose job went stale get an `expired` result instead of waiting on.
    private func expireStaleParked() {
        let now = factory.now()
        let stale = ledger.update { $0.unparkStale(at: now) }
        guard !stale.isEmpty else { return }
        logger.warning(
            "Notifications went stale while their gateway was unreachable",
            metadata: ["count": "\(stale.count)"]
        )
        results.submit(
            stale.map {
                factory.decided(
                    $0,
                    status: .expired,
                    reason: "the job's staleAfter passed while the gateway was unreachable; not sent",
                    at: now
                )
            }
        )
    }

    // MARK: Revocation and shutdown

    /// Hands back (unclaimed) the held and parked notifications of the partitions that match,
    /// and with `unclaimedToo` those intake handed over that no round trip took yet; returns how
    /// many.
    @discardableResult
    func handBack(unclaimedToo: Bool = false, where match: (TopicPartition) -> Bool) -> Int {
        var unclaimed: [Candidate] = []
        if unclaimedToo {
            unclaimed = state.withLock { s in
                let taken = s.unclaimed.filter { match($0.ref.partition) }
                s.unclaimed.removeAll { match($0.ref.partition) }
                s.urgentUnclaimed = s.unclaimed.prefix(while: \.job.content.urgent).count
                return taken
            }
        }
        let all = ledger.update { $0.handBack(unclaimed: unclaimed, where: match) }
        return all.count
    }
}
