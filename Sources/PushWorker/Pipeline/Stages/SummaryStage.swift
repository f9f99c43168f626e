import APNSCore
import Crypto
import Logging
import PushConfiguration
import PushKafka
import PushRedis
import Synchronization

/// What a message of a job that asked for a summary (`"summary": true`) waits for: the results
/// of its tokens. Intake makes one per such message; the result stage counts the message's token
/// results into it and, once the last is written, hands it to the ``SummaryStage``.
///
/// Such a message is registered with one result more than it has tokens: the summary's place.
/// Its offset is committed only after the summary stage has settled that place (written the
/// summary, or found that it is not this message's to write), so a crash anywhere before that
/// has the message consumed again.
struct PendingSummary: Sendable {
    var check: NotificationStore.SummaryCheck
    var app: String?
    var environment: String?
    /// Token results of this message not yet written or settled.
    var remaining: Int
    /// Each token's place in the job, by the resultId of its result.
    var places: [String: Int]
    /// A dry run's summary (its own id, and `dryRun` in the result).
    var dryRun: Bool
    var metadata: [UInt8]?

    /// For a job parsed from `ref`'s message; `remaining` is set once its results are counted.
    init(job: Job, environment: String?, ref: MessageRef, dryRun: Bool = false) {
        var places: [String: Int] = [:]
        places.reserveCapacity(job.tokens.count)
        var tokens = SHA256()
        for (place, token) in job.tokens.enumerated() {
            places[WorkerResult.notificationId(jobId: job.id, token: token.text)] = place
            // A dry run's claimed notifications have their own ids; its rejected tokens do not.
            if dryRun { places[WorkerResult.dryRunId(jobId: job.id, token: token.text)] = place }
            tokens.update(data: Array(token.text.utf8) + [0x0A])
        }
        let fingerprint = tokens.finalize().withUnsafeBytes {
            DeviceToken.lowercaseHex(UnsafeBufferPointer(rebasing: $0.bindMemory(to: UInt8.self)[..<16]))
        }
        check = NotificationStore.SummaryCheck(
            jobId: job.id,
            summaryId: WorkerResult.summaryId(jobId: job.id, dryRun: dryRun),
            fingerprint: fingerprint,
            tokens: job.tokens.count,
            topic: ref.partition.topic,
            partition: ref.partition.partition,
            offset: ref.offset,
            outcomes: []
        )
        app = job.app
        self.environment = environment
        remaining = 0
        self.places = places
        self.dryRun = dryRun
        metadata = job.metadata
    }

    /// Counts one token of this message as settled: with its written result, or without one
    /// (another message of the same job has it, or its result was written before).
    mutating func count(_ result: TokenResult?) {
        remaining -= 1
        guard let result, let place = places[result.resultId] else { return }
        check.outcomes.append(
            .init(index: place, status: result.status, otherType: result.otherType, token: result.token, at: result.at)
        )
    }
}

/// What a job summary needs of one token's result, read from the result as written.
struct TokenResult: Sendable {
    var resultId: String
    /// The status of a `transmissionError`; `nil` for any other type.
    var status: APNSStatus?
    /// The type when it is neither `transmitted` nor `transmissionError`.
    var otherType: String?
    var token: String
    var at: Int64

    /// A serialized result of a token; `nil` for results of other things (`feedback`,
    /// `invalidJob`, `jobSummary`) and for what cannot be read.
    init?(parsing value: [UInt8]) {
        guard let json = try? JSONValue.parse(value), let resultId = json["resultId"]?.stringValue,
            let at = json["at"]?.intValue,
            let type = json["type"]?.stringValue
        else { return nil }
        switch type {
        case "transmitted":
            (status, otherType) = (nil, nil)
        case "transmissionError":
            guard let code = json["status"]?.intValue else { return nil }
            (status, otherType) = (APNSStatus(rawValue: Int(code)), nil)
        case "feedback", "invalidJob", "jobSummary":
            return nil
        default:
            (status, otherType) = (nil, type)
        }
        self.resultId = resultId
        self.token = status == nil ? "" : (json["token"] ?? json["channel"])?.stringValue ?? ""
        self.at = at
    }
}

/// Writes job summaries (`docs/results.md`, "jobSummary"): for each message whose token results
/// are all written, counts them into the job's summary in Redis
/// (``NotificationStore/checkSummaries(_:ttlSeconds:)``, one round trip for all that are ready);
/// when that makes the job complete and no other worker is writing it, produces the summary,
/// marks it written, and then lets the message's offset go (``ResultStage/settleSummaries(_:)``).
///
/// What waits here is bounded by `maxInFlight`: each message's summary place was counted in
/// the ``PipelineLedger`` when it was registered. A summary that a live worker is writing for the same
/// message (consumed again after a hand-over) is asked about again a second later, on a timer.
final class SummaryStage: Sendable {
    private struct Waiting {
        var ref: MessageRef
        var pending: PendingSummary
        var due: ContinuousClock.Instant
    }

    private struct State {
        /// Waiting or held back (the ledger counts them working until they are settled).
        var waiting: [Waiting] = []
    }

    private let state = Mutex(State())
    private let doorbell: AsyncStream<Void>
    private let doorbellIn: AsyncStream<Void>.Continuation
    private let wakeUps: AsyncStream<ContinuousClock.Instant>
    private let wakeUpsIn: AsyncStream<ContinuousClock.Instant>.Continuation
    private let store: NotificationStore
    private let producer: KafkaProducer
    private let control: PipelineControl
    private let factory: ResultFactory
    private let configuration: WorkerConfiguration
    private let logger: Logger

    /// How long a summary that a live worker is writing for the same message waits before it is
    /// asked about again.
    static let busyDelay: Duration = .seconds(1)

    init(
        store: NotificationStore,
        producer: KafkaProducer,
        control: PipelineControl,
        factory: ResultFactory,
        configuration: WorkerConfiguration,
        logger: Logger
    ) {
        self.store = store
        self.producer = producer
        self.control = control
        self.factory = factory
        self.configuration = configuration
        self.logger = logger
        (doorbell, doorbellIn) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (wakeUps, wakeUpsIn) = AsyncStream.makeStream()
    }

    /// Messages whose token results are all written.
    func submit(_ ready: [(MessageRef, PendingSummary)]) {
        guard !ready.isEmpty else { return }
        let now = ContinuousClock.now
        state.withLock { s in
            for (ref, pending) in ready { s.waiting.append(Waiting(ref: ref, pending: pending, due: now)) }
        }
        doorbellIn.yield()
    }

    /// Ends the loops (shutdown).
    func finish() {
        doorbellIn.finish()
        wakeUpsIn.finish()
    }

    /// Rings the doorbell when a summary held back is due.
    func runTimers() async {
        for await due in wakeUps {
            try? await Task.sleep(until: due)
            doorbellIn.yield()
        }
    }

    /// Writes summaries as messages become ready, until ``finish()``.
    func run(results: ResultStage) async {
        var rings = doorbell.makeAsyncIterator()
        while true {
            let now = ContinuousClock.now
            let due = state.withLock { s in
                let due = s.waiting.filter { $0.due <= now }
                s.waiting.removeAll { $0.due <= now }
                return due
            }
            if due.isEmpty {
                if await rings.next() == nil { return }
                continue
            }
            await write(due, results: results)
        }
    }

    private func write(_ batch: [Waiting], results: ResultStage) async {
        let ttl = configuration.worker.dedupeTTLSeconds
        var settled: [MessageRef] = []
        var held: [Waiting] = []
        var summaries: [(ref: MessageRef, summary: JobSummary)] = []
        let checks = batch.map(\.pending.check)
        guard
            let decisions = await retrying({ () throws(RedisError) in
                try await store.checkSummaries(checks, ttlSeconds: ttl)
            })
        else { return }
        for (item, decision) in zip(batch, decisions) {
            switch decision {
            case .notYours, .written:
                settled.append(item.ref)
            case .busy:
                held.append(item)
            case .write(var summary):
                summary.app = item.pending.app
                summary.environment = item.pending.environment
                summary.dryRun = item.pending.dryRun
                summary.metadata = item.pending.metadata
                summary.worker = factory.worker
                summary.at = factory.now()
                summaries.append((item.ref, summary))
            }
        }
        if !summaries.isEmpty {
            let messages = summaries.map {
                KafkaOutgoingMessage(
                    topic: configuration.kafka.resultsTopic,
                    key: $0.summary.key,
                    value: $0.summary.serialized()
                )
            }
            guard await producer.produceAll(messages, what: "job summary", control: control, logger: logger) else {
                return
            }
            let summaryIds = summaries.map(\.summary.resultId)
            guard
                await retrying({ () throws(RedisError) in
                    try await store.markSummariesWritten(summaryIds, ttlSeconds: ttl)
                }) != nil
            else { return }
            control.metrics.increment(MetricCatalogue.resultsProduced, by: summaries.count)
            control.count { $0.results += summaries.count }
            settled += summaries.map(\.ref)
        }
        if !held.isEmpty {
            let due = ContinuousClock.now + Self.busyDelay
            state.withLock { s in s.waiting += held.map { Waiting(ref: $0.ref, pending: $0.pending, due: due) } }
            wakeUpsIn.yield(due)
        }
        results.settleSummaries(settled)
        control.madeProgress()
    }

    /// Runs a Redis call until it succeeds; `nil` when cancelled meanwhile.
    private func retrying<T>(_ body: () async throws(RedisError) -> T) async -> T? {
        var delay: Duration = .milliseconds(50)
        while true {
            do {
                return try await body()
            } catch {
                if Task.isCancelled { return nil }
                logger.error("Cannot count a job summary in Redis; retrying", metadata: ["error": "\(error.message)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
                await store.reconnect(logger: logger)
            }
        }
    }

}
