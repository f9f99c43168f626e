import PushKafka
import Testing

@testable import PushWorker

/// The pipeline's accounting, event by event, without sockets: what each event does to the
/// in-flight bound, the partitions' working counts, the committable offsets, the written
/// positions and the job summaries.
@Suite(.timeLimit(.minutes(1))) struct PipelineLedgerTests {
    let p0 = TopicPartition(topic: "t", partition: 0)
    let p1 = TopicPartition(topic: "t", partition: 1)
    let factory = ResultFactory(worker: "w1", now: { 1_700_000_000_123 })
    static let tokens = [String(repeating: "ab", count: 32), String(repeating: "cd", count: 32)]

    /// Parks `count` notifications of app `a`, whose pool is made unreachable.
    static func park(_ count: Int, in ledger: inout PipelineLedger) async throws {
        var ready = try await StageTests().candidates(count)
        _ = ledger.poolUnreachable(ready[0].poolKey, true)
        #expect(ledger.park(from: &ready, freshAt: 0) == count && ready.isEmpty)
    }

    /// Takes `count` notifications parked by ``park(_:in:)`` out, their pool reachable again.
    static func unpark(_ count: Int, in ledger: inout PipelineLedger) {
        let key = ledger.waiting.parked.keys.first!
        _ = ledger.poolUnreachable(key, false)
        #expect(ledger.unpark(key, room: count).count == count)
    }

    func ref(_ partition: TopicPartition, _ offset: Int64, epoch: UInt64 = 0) -> MessageRef {
        MessageRef(partition: partition, offset: offset, epoch: epoch)
    }

    /// A rejected token's result, as intake makes it (not from a pool).
    func rejected(_ ref: MessageRef, token: String = tokens[0], jobId: String = "j") -> ResultItem {
        factory.rejected(
            ref,
            jobId: jobId,
            app: "a",
            environment: nil,
            token: token,
            status: .invalidJob,
            reason: "bad",
            at: 1
        )
    }

    /// A pool's hand-back of a notification never written: its message is consumed again.
    func released(_ ref: MessageRef) -> ResultItem {
        .released(ref, resultId: "r-\(ref.offset)", token: Self.tokens[0])
    }

    /// A job of both tokens that asks for a summary, pending for `ref`'s message.
    func summary(for ref: MessageRef) throws -> PendingSummary {
        let tokens = Self.tokens.map { "\"\($0)\"" }.joined(separator: ",")
        let outcome = JobParser().parse(
            Array(#"{"id":"j","app":"a","tokens":[\#(tokens)],"alert":"x","summary":true}"#.utf8)
        )
        guard case .job(let job) = outcome else {
            Issue.record("the job did not parse: \(outcome)")
            throw CancellationError()
        }
        var pending = PendingSummary(job: job, environment: nil, ref: ref)
        pending.remaining = 2
        return pending
    }

    func counted(_ items: [ResultItem]) -> [(MessageRef, TokenResult?)] {
        items.compactMap { item in item.summaryCount.map { ($0.0, $0.1.flatMap(TokenResult.init(parsing:))) } }
    }

    // MARK: The bound

    @Test func registeredResultsFillTheBoundAndWrittenOnesFreeIt() {
        var ledger = PipelineLedger(maximum: 3)
        let (a, b) = (ref(p0, 10), ref(p0, 11))
        let actions = ledger.registered([(a, 2), (b, 1)])
        #expect(!actions.commit, "nothing is committable until a result is written")
        #expect(ledger.inFlight == 3)
        #expect(!ledger.hasRoom)
        let first = [rejected(a)]
        ledger.submitted(first)
        _ = ledger.written(first, positions: [], counted: [])
        #expect(ledger.inFlight == 2)
        #expect(ledger.hasRoom)
        #expect(ledger.committable() == [TopicPartitionOffset(p0, offset: 10)], "offset 10 waits for its second result")
    }

    @Test func parkedNotificationsHaveABoundOfTheirOwn() async throws {
        var ledger = PipelineLedger(maximum: 3)
        _ = ledger.registered([(ref(p0, 0), 4)])
        #expect(!ledger.hasRoom)
        try await Self.park(2, in: &ledger)
        #expect(ledger.hasRoom, "parked notifications leave room for other apps' work")
        try await Self.park(1, in: &ledger)
        #expect(!ledger.hasRoom, "no more than the maximum may be parked either")
        Self.unpark(3, in: &ledger)
        #expect(ledger.parked == 0)
        #expect(!ledger.hasRoom)
        ledger.close()
        #expect(ledger.hasRoom, "a closed ledger lets intake through to see the stop")
    }

    @Test func notificationsHeldByBlockedPoolsLeaveRoomForTheOthers() async throws {
        var ledger = PipelineLedger(maximum: 3)
        _ = ledger.registered([(ref(p0, 0), 4)])
        try await Self.park(1, in: &ledger)
        #expect(!ledger.hasRoom)
        ledger.setStuck(2)
        #expect(ledger.stuck == 2)
        #expect(ledger.hasRoom, "what a stalled or unreachable pool holds does not count")
        #expect(ledger.room == 2, "4 in flight, 1 parked, 2 held by a blocked pool: 1 counts of 3")
        ledger.setStuck(10)
        #expect(ledger.stuck == 3, "no more than those in flight and not parked")
        ledger.setStuck(0)
        #expect(!ledger.hasRoom, "the pool delivers again: what it holds counts again")
    }

    @Test func theHighestLaneKeepsItsReserveWhateverTheLowerLanesTook() {
        let urgent = TopicPartition(topic: "urgent", partition: 0)
        var ledger = PipelineLedger(maximum: 10, highestLane: "urgent", laneReserve: 2)
        // One batch of a lower lane's many-token jobs goes past the bound at once.
        _ = ledger.registered([(ref(p0, 0), 30)])
        ledger.claiming(Array(repeating: p0, count: 30))
        #expect(!ledger.hasRoom(reserving: 2), "the lower lanes wait")
        #expect(ledger.hasRoom, "the highest lane has its reserve")
        _ = ledger.registered([(ref(urgent, 0), 2)])
        ledger.claiming([urgent, urgent])
        #expect(!ledger.hasRoom, "the highest lane has used its reserve")
        var plain = PipelineLedger(maximum: 10)
        _ = plain.registered([(ref(p0, 0), 30)])
        plain.claiming(Array(repeating: p0, count: 30))
        #expect(!plain.hasRoom, "without lanes there is no reserve")
    }

    @Test func aMessageWithNothingToSendIsCommittableAtOnce() {
        var ledger = PipelineLedger(maximum: 10)
        let actions = ledger.registered([(ref(p0, 4), 0)])
        #expect(actions.commit)
        #expect(ledger.isEmpty)
        #expect(ledger.committable() == [TopicPartitionOffset(p0, offset: 5)])
        ledger.markCommitted(ledger.committable())
        #expect(ledger.committable().isEmpty, "an offset is handed to librdkafka once")
    }

    // MARK: Working partitions

    @Test func aPartitionWorksFromItsClaimUntilItsResultsAreWritten() {
        var ledger = PipelineLedger(maximum: 10)
        let (a, b) = (ref(p0, 0), ref(p0, 1))
        _ = ledger.registered([(a, 1), (b, 1)])
        ledger.claiming([p0, p0])
        #expect(ledger.working(in: [p0]) == 2)
        // The round trip sends one and decides the other without Apple.
        ledger.sending([p0])
        let decided = [rejected(b)]
        ledger.submitted(decided)
        ledger.claimed([p0, p0])
        #expect(ledger.working(in: [p0]) == 2, "both go on: one in a pool, one waiting for the writer")
        #expect(ledger.working(in: [p1]) == 0)
        _ = ledger.written(decided + [released(a)], positions: [], counted: [])
        #expect(ledger.working(in: [p0]) == 0)
        #expect(ledger.isEmpty)
        #expect(
            ledger.committable() == [TopicPartitionOffset(p0, offset: 0)],
            "a released notification's message is consumed again: no commit past it"
        )
    }

    @Test func heldAndParkedNotificationsStopWorkingButStayInFlight() async throws {
        var ledger = PipelineLedger(maximum: 10)
        let refs = [ref(p0, 0), ref(p1, 0)]
        _ = ledger.registered(refs.map { ($0, 1) })
        ledger.claiming(refs.map(\.partition))
        // One is held (another worker holds it), one parked (its gateway is unreachable).
        try await Self.park(1, in: &ledger)
        ledger.claimed(refs.map(\.partition))
        #expect(ledger.working(in: [p0, p1]) == 0, "a revocation does not wait for them")
        #expect(ledger.inFlight == 2)
        // A revocation hands both back: the bound is freed, the offsets are not.
        Self.unpark(1, in: &ledger)
        ledger.handedBack(refs)
        #expect(ledger.isEmpty)
        #expect(
            Set(ledger.committable()) == [TopicPartitionOffset(p0, offset: 0), TopicPartitionOffset(p1, offset: 0)]
        )
    }

    @Test func duplicatesCompleteTheirMessagesWithoutAResult() {
        var ledger = PipelineLedger(maximum: 10)
        let a = ref(p0, 7)
        _ = ledger.registered([(a, 2)])
        let actions = ledger.completed([a, a])
        #expect(actions.commit)
        #expect(ledger.isEmpty)
        #expect(ledger.committable() == [TopicPartitionOffset(p0, offset: 8)])
    }

    // MARK: Ownership

    @Test func aLateResultOfAnEarlierOwnershipDoesNotCompleteTheNewOne() {
        var ledger = PipelineLedger(maximum: 10)
        let first = ref(p0, 3, epoch: 1)
        _ = ledger.registered([(first, 1)])
        ledger.sending([p0])
        ledger.removed([p0])
        // The partition comes back; its message is consumed again at generation 3.
        let again = ref(p0, 3, epoch: 3)
        _ = ledger.registered([(again, 1)])
        _ = ledger.written([rejected(first)], positions: [], counted: [])
        #expect(
            ledger.committable() == [TopicPartitionOffset(p0, offset: 3)],
            "the new ownership's result is still due"
        )
        _ = ledger.written([rejected(again)], positions: [], counted: [])
        #expect(ledger.committable() == [TopicPartitionOffset(p0, offset: 4)])
    }

    @Test func aRevocationForgetsThePartitionsOffsetsPositionsAndSummaries() throws {
        var ledger = PipelineLedger(maximum: 10)
        let a = ref(p0, 0)
        _ = ledger.registered([(a, 3), (ref(p1, 0), 0)], summaries: [(a, try summary(for: a))])
        #expect(ledger.inFlight == 3)
        ledger.positionsStored([TopicPartitionOffset(p0, offset: 0)])
        ledger.removed([p0])
        #expect(ledger.inFlight == 2, "the summary's place is given up with its partition")
        #expect(!ledger.expectsSummaries)
        #expect(ledger.positions(in: [p0, p1]) == [TopicPartitionOffset(p1, offset: 1)])
        #expect(ledger.pendingPositions() == [TopicPartitionOffset(p1, offset: 1)])
    }

    // MARK: Written positions

    @Test func writtenPositionsAreStoredOnceAndRevocationsWaitForThem() {
        var ledger = PipelineLedger(maximum: 10)
        let a = ref(p0, 5)
        _ = ledger.registered([(a, 1)])
        ledger.submitted([rejected(a)])
        let marks = ledger.pendingPositions()
        #expect(marks == [TopicPartitionOffset(p0, offset: 5)])
        _ = ledger.written([rejected(a)], positions: marks, counted: [])
        #expect(!ledger.positionsStored(for: [p0]), "offset 6 is written but not yet stored")
        #expect(ledger.pendingPositions() == [TopicPartitionOffset(p0, offset: 6)])
        ledger.positionsStored(ledger.pendingPositions())
        #expect(ledger.positionsStored(for: [p0]))
        #expect(ledger.pendingPositions().isEmpty)
        _ = ledger.registered([(ref(p0, 6), 1)])
        ledger.writerEnded()
        #expect(ledger.positionsStored(for: [p0]), "without a writer nothing more can be stored")
    }

    // MARK: Job summaries

    @Test func aSummaryGoesOutWhenItsTokensAreWrittenAndItsPlaceIsCompleteWhenSettled() throws {
        var ledger = PipelineLedger(maximum: 10)
        let a = ref(p0, 0)
        _ = ledger.registered([(a, 3)], summaries: [(a, try summary(for: a))])
        #expect(ledger.inFlight == 3)
        let first = [rejected(a, token: Self.tokens[0])]
        let second = [rejected(a, token: Self.tokens[1])]
        ledger.submitted(first + second)
        #expect(ledger.summaryRefs(among: [a, ref(p1, 0)]) == [a])
        #expect(ledger.written(first, positions: [], counted: counted(first)).summaries.isEmpty)
        let ready = ledger.written(second, positions: [], counted: counted(second)).summaries
        #expect(ready.map(\.0) == [a])
        #expect(ready.first?.1.check.outcomes.count == 2)
        #expect(ledger.inFlight == 1, "the summary's place")
        #expect(ledger.working(in: [p0]) == 1, "a revocation waits for the summary")
        #expect(ledger.committable() == [TopicPartitionOffset(p0, offset: 0)])
        let settled = ledger.summariesSettled([a])
        #expect(settled.commit)
        #expect(ledger.isEmpty)
        #expect(ledger.working(in: [p0]) == 0)
        #expect(ledger.committable() == [TopicPartitionOffset(p0, offset: 1)])
    }

    @Test func aMessageConsumedAgainHoldsOneSummaryPlace() throws {
        var ledger = PipelineLedger(maximum: 10)
        let a = ref(p0, 0)
        _ = ledger.registered([(a, 3)], summaries: [(a, try summary(for: a))])
        _ = ledger.registered([(a, 3)], summaries: [(a, try summary(for: a))])
        #expect(ledger.inFlight == 5, "six registered results, one summary place given up")
    }

    @Test func aHandedBackNotificationDropsItsMessagesSummary() throws {
        var ledger = PipelineLedger(maximum: 10)
        let (a, b) = (ref(p0, 0), ref(p0, 1))
        _ = ledger.registered([(a, 3), (b, 3)], summaries: [(a, try summary(for: a)), (b, try summary(for: b))])
        ledger.handedBack([a, a])
        #expect(ledger.inFlight == 3, "two notifications and the summary's place")
        ledger.sending([p0])
        _ = ledger.written([released(b)], positions: [], counted: [])
        #expect(ledger.inFlight == 1, "a notification given back by its pool drops its summary too")
        #expect(!ledger.expectsSummaries)
    }

    @Test func duplicatesCountAsSettledTokensOfTheirSummary() throws {
        var ledger = PipelineLedger(maximum: 10)
        let a = ref(p0, 0)
        _ = ledger.registered([(a, 3)], summaries: [(a, try summary(for: a))])
        let ready = ledger.completed([a, a]).summaries
        #expect(ready.map(\.0) == [a])
        #expect(ready.first?.1.check.outcomes.isEmpty == true, "no result of this message to count")
    }

    // MARK: The shared ledger's waiters

    @Test func intakeWaitsUntilThereIsRoom() async {
        let shared = SharedLedger(maximum: 2)
        _ = shared.update { $0.registered([(ref(p0, 0), 2)]) }
        let waiter = Task {
            await shared.waitForRoom()
            return shared.inFlight
        }
        shared.update { $0.handedBack([ref(p0, 0)]) }
        #expect(await waiter.value == 1)
    }

    @Test func aDrainLearnsWhenThePipelineIsEmptyOrTheDeadlinePassed() async {
        let shared = SharedLedger(maximum: 10)
        _ = shared.update { $0.registered([(ref(p0, 0), 2)]) }
        #expect(await shared.waitUntilEmpty(deadline: .now + .milliseconds(20)) == false)
        let empty = Task { await shared.waitUntilEmpty(deadline: .now + .seconds(60)) }
        _ = shared.update { $0.completed([ref(p0, 0), ref(p0, 0)]) }
        #expect(await empty.value == true)
    }

    @Test func closingTheLedgerLetsWaitersThrough() async {
        let shared = SharedLedger(maximum: 1)
        _ = shared.update { $0.registered([(ref(p0, 0), 5)]) }
        let waiter = Task { await shared.waitForRoom() }
        shared.update { $0.close() }
        await waiter.value
    }
}
