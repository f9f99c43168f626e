import PushKafka

/// The pipeline's accounting, in one value: how many notifications are in flight (the
/// `maxInFlight` bound), the notifications that wait without a claim (held and parked) and the
/// pools they wait for (``WaitingNotifications``), which partitions' notifications are being
/// worked on (what a revocation waits for), which offsets may be committed
/// (``OffsetTracker``), the written positions stored in Redis, and the job summaries waiting
/// for their tokens' results.
///
/// It does no I/O and keeps no clock: the stages report what happened through its event
/// methods, each of which returns the ``Actions`` to take, and carry those out. A count that
/// one stage raises and another lowers lives here alone, changed by a pair of events, so a
/// stage cannot forget its half. ``SharedLedger`` holds it under one lock for the stages and
/// wakes intake when there is room again.
///
/// A notification's way through it (`docs/architecture.md`, "Pipeline"):
///
/// 1. ``registered(_:summaries:)``: intake parsed its message. It is in flight from now on.
/// 2. ``claiming(_:)``: handed to the claim stage, or due again after a hold, or unparked. Its
///    partition is *working* until ``claimed(_:)`` reports the round trip over.
/// 3. ``sending(_:)`` (into a pool) or ``submitted(_:)`` (a result decided without Apple): it
///    stays working until the writer reports it in ``written(_:positions:counted:)``.
/// 4. A notification taken out of the way instead: ``hold(_:until:)``, ``park(from:freshAt:)``,
///    ``handedBack(_:)`` unclaimed (its message is consumed again), or ``completed(_:)`` (its
///    message consumed again needs nothing written).
/// 5. A message whose job asked for a summary holds one more place in flight; when its token
///    results are all written its summary goes to the summary stage (returned in
///    ``Actions/summaries``) and works there until ``summariesSettled(_:)``.
struct PipelineLedger: Sendable {
    /// What the caller does after an event.
    struct Actions: Sendable {
        /// Offsets may have moved: hand the committable ones to librdkafka.
        var commit = false
        /// Messages whose token results are all settled: their summaries go to the summary
        /// stage (they are counted working from now until ``PipelineLedger/summariesSettled(_:)``).
        var summaries: [(MessageRef, PendingSummary)] = []
    }

    /// `maxInFlight`: the bound on in-flight notifications not parked, and on parked ones.
    let maximum: Int
    /// Notifications (and summary places) registered and not yet written, handed back or
    /// completed.
    private(set) var inFlight = 0
    /// Held and parked notifications, and the pools that cannot take notifications now.
    private(set) var waiting = WaitingNotifications()
    /// Of those in flight, the ones waiting, unclaimed, for a blocked pool.
    var parked: Int { waiting.parkedCount }
    /// Of those, about how many are held by pools that cannot deliver them now (unreachable or
    /// stalled): they do not count against the bound, so that one app's pool does not stop the
    /// others (each pool holds at most `maximum`).
    private(set) var stuck = 0
    /// Shutdown: intake is let through whatever is in flight (it stops on its own).
    private(set) var closed = false
    /// The writer ended: written positions can no longer be stored.
    private(set) var writerExited = false
    /// Notifications being worked on, by partition: about to be claimed, in a pool, waiting to
    /// be written, or a summary being settled. A revocation waits for them.
    private var working: [TopicPartition: Int] = [:]
    private var tracker = OffsetTracker()
    /// The written positions stored in Redis (`pw:`), by partition.
    private(set) var storedPositions: [TopicPartition: Int64] = [:]
    /// Messages of jobs that asked for a summary, until their token results are all written.
    private var summaries: [MessageRef: PendingSummary] = [:]

    /// Priority lanes: the highest lane's topic, and the part of ``maximum`` it may always
    /// take, whatever the lower lanes took (a lower lane's batch of many-token jobs can go past
    /// ``maximum`` at once).
    let highestLane: String?
    let laneReserve: Int

    init(maximum: Int, highestLane: String? = nil, laneReserve: Int = 0) {
        self.maximum = maximum
        self.highestLane = highestLane
        self.laneReserve = laneReserve
    }

    // MARK: Queries

    /// Whether intake may poll more: fewer than `maximum` in flight besides the parked ones,
    /// and fewer than `maximum` parked (or the ledger is closed).
    var hasRoom: Bool { hasRoom(reserving: 0) || highestLaneHasRoom }

    /// Whether the highest priority lane has used less than its reserve.
    var highestLaneHasRoom: Bool {
        guard let highestLane else { return false }
        var used = 0
        for (partition, count) in working where partition.topic == highestLane { used += count }
        return used < laneReserve
    }

    /// Whether there is room with `reserve` of the bound kept for others: the lower priority
    /// lanes leave room for the highest.
    func hasRoom(reserving reserve: Int) -> Bool {
        closed || (inFlight - parked - stuck < maximum - reserve && parked < maximum)
    }

    /// How many more notifications (and results) intake may take in before it waits: `maximum`
    /// less those in flight besides the parked ones, and less the parked ones; unbounded once
    /// closed.
    var room: Int { closed ? .max : min(maximum - (inFlight - parked - stuck), maximum - parked) }

    /// Nothing in flight.
    var isEmpty: Bool { inFlight <= 0 }

    /// Notifications of `selection` being worked on.
    func working(in selection: Set<TopicPartition>) -> Int {
        selection.reduce(0) { $0 + (working[$1] ?? 0) }
    }

    /// Whether any message waits for its job's summary.
    var expectsSummaries: Bool { !summaries.isEmpty }

    /// The messages among `refs` that wait for their job's summary.
    func summaryRefs(among refs: some Sequence<MessageRef>) -> Set<MessageRef> {
        summaries.isEmpty ? [] : Set(refs.lazy.filter { self.summaries[$0] != nil })
    }

    /// The offsets to hand to librdkafka now: those that moved since ``markCommitted(_:)``.
    func committable() -> [TopicPartitionOffset] { tracker.committable() }

    /// The committable offset of each partition in `selection` that has one.
    func positions(in selection: Set<TopicPartition>) -> [TopicPartitionOffset] { tracker.positions(in: selection) }

    /// Written positions that moved since they were last stored in Redis.
    func pendingPositions() -> [TopicPartitionOffset] {
        tracker.allPositions().filter { $0.offset > (storedPositions[$0.topicPartition] ?? -1) }
    }

    /// Whether the written positions of `selection` are stored (or can no longer be).
    func positionsStored(for selection: Set<TopicPartition>) -> Bool {
        writerExited
            || tracker.positions(in: selection).allSatisfy { $0.offset <= (storedPositions[$0.topicPartition] ?? -1) }
    }

    // MARK: Intake

    /// Intake parsed messages: each waits for its count of results (0: none; its offset may be
    /// committed as soon as those before it are). Messages whose job asked for a summary come
    /// in `summaries` too, registered with one result more than their tokens: the summary's
    /// place.
    mutating func registered(
        _ registrations: [(MessageRef, Int)],
        summaries newSummaries: [(MessageRef, PendingSummary)] = []
    ) -> Actions {
        var actions = Actions()
        for (ref, count) in registrations {
            tracker.register(ref.partition, offset: ref.offset, results: count, epoch: ref.epoch)
            inFlight += count
            if count == 0 { actions.commit = true }
        }
        for (ref, pending) in newSummaries where summaries.updateValue(pending, forKey: ref) != nil {
            // The same message registered again: its earlier place is given up.
            inFlight -= 1
        }
        return actions
    }

    // MARK: Claims

    /// Notifications of these partitions go to be claimed: handed over by intake, due again
    /// after a hold, or unparked.
    mutating func claiming(_ partitions: some Sequence<TopicPartition>) {
        count(partitions, by: 1)
    }

    /// A claim round trip for these ended, whatever became of them (each that goes on was
    /// counted by ``sending(_:)`` or ``submitted(_:)`` before).
    mutating func claimed(_ partitions: some Sequence<TopicPartition>) {
        count(partitions, by: -1)
    }

    /// About `count` notifications are held by pools that cannot deliver them now (``stuck``).
    mutating func setStuck(_ count: Int) {
        stuck = max(0, min(count, inFlight - parked))
    }

    /// Notifications given back unclaimed (held or parked at a revocation, revoked before
    /// their claim, or the worker stopping): their messages are consumed again, and so are
    /// their summaries counted then.
    mutating func handedBack(_ refs: [MessageRef]) {
        inFlight -= refs.count
        guard !summaries.isEmpty else { return }
        for ref in Set(refs) where summaries.removeValue(forKey: ref) != nil { inFlight -= 1 }
    }

    /// Messages consumed again whose notifications need nothing written (duplicates, results
    /// written before).
    mutating func completed(_ refs: [MessageRef]) -> Actions {
        guard !refs.isEmpty else { return Actions() }
        for ref in refs { tracker.complete(ref.partition, offset: ref.offset, epoch: ref.epoch) }
        inFlight -= refs.count
        var actions = Actions(commit: true)
        if !summaries.isEmpty { actions.summaries = countForSummaries(refs.map { ($0, nil) }) }
        return actions
    }

    // MARK: Delivery and results

    /// Claimed notifications of these partitions went into a pool.
    mutating func sending(_ partitions: some Sequence<TopicPartition>) {
        count(partitions, by: 1)
    }

    /// Items handed to the writer; those not from a pool (rejected jobs, duplicates answered
    /// again, decisions) start working now, those from a pool have since ``sending(_:)``.
    mutating func submitted(_ items: [ResultItem]) {
        count(items.lazy.filter { !$0.fromPool }.map(\.ref.partition), by: 1)
    }

    /// The writer recorded a batch in Redis and Kafka acknowledged its results, together with
    /// the written positions `positions`. `counted` holds, for the batch's messages that wait for a
    /// summary (``summaryRefs(among:)``), each token's result as written (`nil`: none).
    mutating func written(
        _ batch: [ResultItem],
        positions: [TopicPartitionOffset],
        counted: [(MessageRef, TokenResult?)]
    ) -> Actions {
        positionsStored(positions)
        inFlight -= batch.count
        for item in batch {
            let ref = item.ref
            // A notification given back is not complete: its message is consumed again.
            if !item.isGivenBack { tracker.complete(ref.partition, offset: ref.offset, epoch: ref.epoch) }
            let left = (working[ref.partition] ?? 1) - 1
            working[ref.partition] = left > 0 ? left : nil
        }
        // The writer hands the committable offsets on after each batch itself.
        var actions = Actions()
        guard !summaries.isEmpty else { return actions }
        // A notification given back: its message's summary is counted when it is consumed again.
        for item in batch where item.isGivenBack && summaries.removeValue(forKey: item.ref) != nil {
            inFlight -= 1
        }
        actions.summaries = countForSummaries(counted)
        return actions
    }

    /// Written positions stored in Redis.
    mutating func positionsStored(_ positions: [TopicPartitionOffset]) {
        for position in positions {
            storedPositions[position.topicPartition] = max(
                storedPositions[position.topicPartition] ?? -1,
                position.offset
            )
        }
    }

    /// Offsets handed to librdkafka (or committed).
    mutating func markCommitted(_ offsets: [TopicPartitionOffset]) {
        tracker.markCommitted(offsets)
    }

    /// The summary stage settled these messages' summaries (written, or not theirs to write):
    /// their places are complete.
    mutating func summariesSettled(_ refs: [MessageRef]) -> Actions {
        count(refs.lazy.map(\.partition), by: -1)
        return completed(refs)
    }

    /// The writer ended.
    mutating func writerEnded() {
        writerExited = true
    }

    // MARK: Revocation and shutdown

    /// Forgets revoked partitions: their offsets, stored positions and summaries. Their later
    /// completions are ignored.
    mutating func removed(_ selection: Set<TopicPartition>) {
        tracker.remove(selection)
        for partition in selection { storedPositions.removeValue(forKey: partition) }
        guard !summaries.isEmpty else { return }
        let before = summaries.count
        summaries = summaries.filter { !selection.contains($0.key.partition) }
        inFlight -= before - summaries.count
    }

    /// Lets intake through from now on (shutdown).
    mutating func close() {
        closed = true
    }

    // MARK: Helpers

    /// Adds `delta` per partition to its working count; consecutive notifications mostly share
    /// a partition, so runs are counted first.
    private mutating func count(_ partitions: some Sequence<TopicPartition>, by delta: Int) {
        var iterator = partitions.makeIterator()
        guard var current = iterator.next() else { return }
        var run = 1
        func flush(_ partition: TopicPartition, _ run: Int) {
            let value = (working[partition] ?? 0) + delta * run
            working[partition] = value > 0 ? value : nil
        }
        while let next = iterator.next() {
            if next == current {
                run += 1
            } else {
                flush(current, run)
                (current, run) = (next, 1)
            }
        }
        flush(current, run)
    }

    /// Counts token results of messages with a summary; returns the messages whose token
    /// results are now all settled, which work in the summary stage from now on.
    private mutating func countForSummaries(_ counted: [(MessageRef, TokenResult?)]) -> [(MessageRef, PendingSummary)] {
        var ready: [(MessageRef, PendingSummary)] = []
        for (ref, result) in counted {
            guard var pending = summaries.removeValue(forKey: ref) else { continue }
            pending.count(result)
            if pending.remaining > 0 { summaries[ref] = pending } else { ready.append((ref, pending)) }
        }
        count(ready.lazy.map(\.0.partition), by: 1)
        return ready
    }
}

// MARK: Waiting notifications

// Each event changes the waiting lists and the working counts together (``WaitingNotifications``).
extension PipelineLedger {
    /// The claim stage holds `candidates` back until `due` (they stay in flight; nothing works
    /// on them).
    mutating func hold(_ candidates: [Candidate], until due: ContinuousClock.Instant) {
        waiting.hold(candidates, until: due)
    }

    /// Takes the held notifications due at `now`: they go to be claimed (``claiming(_:)``).
    mutating func takeDue(at now: ContinuousClock.Instant) -> [Candidate] {
        let due = waiting.takeDue(at: now)
        claiming(due.lazy.map(\.ref.partition))
        return due
    }

    /// Parks the notifications of `ready` whose pool is blocked (``WaitingNotifications/park(from:freshAt:)``);
    /// returns how many.
    mutating func park(from ready: inout [Candidate], freshAt now: Int64) -> Int {
        waiting.park(from: &ready, freshAt: now)
    }

    /// Takes up to `room` of the notifications parked for the pool of `key`, unless it is
    /// blocked: they go to be claimed.
    mutating func unpark(_ key: PoolKey, room: Int) -> [Candidate] {
        let back = waiting.unpark(key, room: room)
        claiming(back.lazy.map(\.ref.partition))
        return back
    }

    /// Takes the parked notifications whose job is stale at `now`, to be answered `expired`.
    mutating func unparkStale(at now: Int64) -> [Candidate] {
        waiting.unpark { c in c.job.content.staleAt.map { $0 <= now } ?? false }
    }

    /// Takes the parked lists of pools with `after` or more notifications to move them aside
    /// (``WaitingNotifications/takeForMovingAside(after:)``).
    mutating func takeForMovingAside(after: Int) -> [(PoolKey, [Candidate])] {
        waiting.takeForMovingAside(after: after)
    }

    /// Notifications taken to move aside wait here again: they stay, or their records could not be written
    /// (``movingAside(_:)`` reported them).
    mutating func parkAgain(_ candidates: [Candidate], for key: PoolKey, wereMoving: Bool = false) {
        waiting.parkAgain(candidates, for: key)
        if wereMoving { claimed(candidates.lazy.map(\.ref.partition)) }
    }

    /// Notifications are being written to the parked topic: a revocation of their partitions
    /// waits for that.
    mutating func movingAside(_ candidates: [Candidate]) {
        claiming(candidates.lazy.map(\.ref.partition))
    }

    /// The notifications ``movingAside(_:)`` reported are written to the parked topic.
    mutating func movedAside(_ candidates: [Candidate], of key: PoolKey) {
        waiting.movedAside(candidates.count, of: key)
        claimed(candidates.lazy.map(\.ref.partition))
    }

    /// Hands back, unclaimed, the held and parked notifications of the partitions that `match`,
    /// and `unclaimed` (handed over by intake, never taken by a round trip); returns them all.
    mutating func handBack(
        unclaimed: [Candidate],
        where match: (TopicPartition) -> Bool
    ) -> [Candidate] {
        let (held, parked) = waiting.take(where: match)
        let all = held + unclaimed + parked
        guard !all.isEmpty else { return [] }
        // Handed over but never taken by a round trip: no round trip reports them.
        claimed(unclaimed.lazy.map(\.ref.partition))
        handedBack(all.map(\.ref))
        return all
    }

    /// The pool of `key` reports whether it reaches its gateway; returns whether that blocked
    /// or unblocked it.
    mutating func poolUnreachable(_ key: PoolKey, _ isUnreachable: Bool) -> Bool {
        waiting.setUnreachable(key, isUnreachable)
    }

    /// The pool of `key` is judged stalled, or not; returns whether that blocked or unblocked it.
    mutating func poolStalled(_ key: PoolKey, _ isStalled: Bool) -> Bool {
        waiting.setStalled(key, isStalled)
    }

    /// The pool of `key` was replaced; returns whether the old one was blocked.
    mutating func poolReplaced(_ key: PoolKey) -> Bool {
        waiting.forgetConditions(of: key)
    }
}
