import Foundation
import PushKafka
import PushLocalStack

/// One run of a fleet under load while a scenario disturbs it (`apn-bench failover` and
/// `partitions`): the workers started, a warm-up job, jobs produced at a steady rate, and the
/// results read back until the run has drained.
struct FleetRun {
    let producer: KafkaProducer
    let reader: KafkaConsumer
    /// The workers started, in the order of `ids`.
    let workers: [LocalWorker]
    /// Jobs produced, `0..<total`.
    let total: Int
    let sentAt: SentTimes
    /// When production began.
    let start: ContinuousClock.Instant
    /// The reader's next offsets after the warm-up.
    private let read: [Int32: Int64]
    private let producing: Task<Void, any Error>

    /// Starts the workers `ids`, waits for them to deliver a warm-up job, then produces `rate`
    /// jobs per second for `seconds`.
    init(
        _ stack: LocalStack,
        readerGroup: String,
        workers ids: [String],
        rate: Int,
        seconds: Int,
        job: @escaping @Sendable (Int) -> KafkaOutgoingMessage
    ) async throws {
        producer = try stack.loadProducer()
        reader = try stack.resultReader(group: readerGroup)
        var started: [LocalWorker] = []
        for id in ids { started.append(try await stack.startWorker(id: id)) }
        workers = started
        read = try await FleetLoad.warmUp(producer, reader)
        total = rate * seconds
        sentAt = SentTimes(count: total)
        start = ContinuousClock.now
        producing = FleetLoad.produce(total, rate: rate, from: start, with: producer, sentAt: sentAt, job: job)
    }

    /// What a finished run found.
    struct Outcome<Scenario> {
        var tally: ResultTally
        /// What the scenario's task returned.
        var scenario: Scenario
        var accepted: FleetLoad.Accepted
        /// Jobs the broker lost after acknowledging them, before any worker could read them.
        var lostBeforeTheWorkers: Int
    }

    /// Reads results until `deadline`, waits for production and `scenario` to end, reads 3 s
    /// more for results written twice, stops the workers still running (SIGTERM), closes the
    /// clients, and counts what Apple accepted and what the broker lost.
    func finish<Scenario: Sendable>(
        _ stack: LocalStack,
        readingUntil deadline: ContinuousClock.Instant,
        scenario: Task<Scenario, any Error>
    ) async throws -> Outcome<Scenario> {
        var tally = ResultTally(total: total, read: read)
        try await tally.read(reader, until: deadline, start: start, sentAt: sentAt)
        try await producing.value
        let ended = try await scenario.value
        try await tally.read(reader, until: .now + .seconds(3), start: start, sentAt: sentAt, settling: true)
        for worker in workers where worker.isRunning { worker.signal(SIGTERM) }
        try? await reader.close()
        await producer.close()
        let accepted = FleetLoad.Accepted(stack, tally)
        let (lost, _) = try await FleetLoad.jobsMissingFromKafka(tally.lost, stack: stack)
        return Outcome(tally: tally, scenario: ended, accepted: accepted, lostBeforeTheWorkers: lost)
    }
}
