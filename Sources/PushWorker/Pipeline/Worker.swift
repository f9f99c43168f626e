import APNSBinary
import APNSHTTP2
import APNSCore
import Dispatch
import Foundation
import Logging
import PushKafka
import PushRedis
import Synchronization

/// One member of the `apn-worker` consumer group: jobs in from Kafka, dedupe and rates in Redis,
/// delivery through one binary pool per (app, environment), one result per notification out.
///
/// The path of a notification (see `docs/architecture.md`):
/// 1. a batch of messages is parsed; bad input becomes error results at once;
/// 2. the batch's notifications are claimed in Redis in one round trip (dedupe, unregistered
///    tokens, rates);
/// 3. claimed notifications go to their pool; each outcome becomes a result;
/// 4. the result writer records outcomes in Redis, produces the results and, once Kafka has
///    acknowledged them, commits the offsets of every message whose results are all written.
public final class Worker: Sendable {
    public let options: WorkerOptions
    private let logger: Logger
    /// This incarnation: the worker id plus a random suffix, so a restarted worker with the same
    /// id does not mistake the claims of its dead predecessor for its own.
    let owner: String
    private let parser: JobParser
    private let state = Mutex(State())
    private let consumerBox = Mutex<KafkaConsumer?>(nil)
    private let revokeSignal = DispatchSemaphore(value: 0)

    // MARK: State

    struct MessageRef: Hashable, Sendable {
        var partition: TopicPartition
        var offset: Int64
    }

    /// What the notifications of one job share (one allocation per job, not per token).
    final class SharedJob: Sendable {
        let jobId: String
        let app: String
        let environment: APNSEnvironment
        let registeredAt: Int64?
        /// The notification and its payload, handed to the pool by reference.
        let content: APNSSubmission.Content
        /// The app's rate limits (0: none), looked up once per job.
        let appPerSecond: Int
        let devicePerHour: Int

        init(_ job: Job, environment: APNSEnvironment, app options: AppOptions, producedAt: Int64) {
            jobId = job.id
            app = job.app
            self.environment = environment
            registeredAt = job.registeredAt
            let staleAt = job.staleAfter.map { producedAt + $0.components.seconds * 1000 + $0.components.attoseconds / 1_000_000_000_000_000 }
            content = APNSSubmission.Content(notification: job.notification, payload: job.payload, staleAt: staleAt)
            appPerSecond = options.appPerSecond
            devicePerHour = options.devicePerHour
        }
    }

    /// A notification waiting to be claimed. A class: it moves between several queues, and
    /// copying a reference is cheaper than copying its fields.
    final class Candidate: @unchecked Sendable {
        // `retryAt` is only changed under the worker's state lock; the rest is immutable.
        let ref: MessageRef
        let job: SharedJob
        let token: DeviceToken
        let tokenHex: String
        let resultId: String
        var retryAt: ContinuousClock.Instant = .now

        init(ref: MessageRef, job: SharedJob, token: DeviceToken, tokenHex: String, resultId: String) {
            self.ref = ref
            self.job = job
            self.token = token
            self.tokenHex = tokenHex
            self.resultId = resultId
        }

        var jobId: String { job.jobId }
        var app: String { job.app }
        var environment: APNSEnvironment { job.environment }
        var registeredAt: Int64? { job.registeredAt }
        var poolKey: PoolKey { PoolKey(app: job.app, environment: job.environment) }
    }

    /// What a submitted notification's outcome needs to become a result.
    struct SentContext: Sendable {
        var candidate: Candidate
        var takeover: Bool
    }

    /// One entry for the result writer.
    struct Outgoing: Sendable {
        var ref: MessageRef?
        var resultId: String?
        var key: [UInt8]?
        /// The result to produce; `nil` for a released claim.
        var value: [UInt8]?
        /// Record this outcome in Redis first.
        var record: Bool
        var unregister: (app: String, environment: String, token: String, since: Int64)?
        /// A second result to produce with this one (the `feedback` result of an HTTP/2 410).
        var extra: (key: [UInt8]?, value: [UInt8])?
        /// Delete the claim instead (the notification was never sent; its message will be
        /// consumed again).
        var release: Bool = false
        /// Already counted in flight on its partition (it came from a pool).
        var fromPool: Bool = false
    }

    struct PoolKey: Hashable, Sendable {
        var app: String
        var environment: APNSEnvironment
    }

    struct State {
        var tracker = OffsetTracker()
        var inFlight = 0
        var active: [TopicPartition: Int] = [:]
        var capacityWaiter: CheckedContinuation<Void, Never>?
        var outgoing: [Outgoing] = []
        var commitDirty = false
        var writerWaiter: CheckedContinuation<Void, Never>?
        var held: [Candidate] = []
        /// Parsed notifications waiting for the claim stage, which overlaps with parsing.
        var unclaimed: [Candidate] = []
        var claimWaiter: CheckedContinuation<Void, Never>?
        var localClaims: [String: MessageRef] = [:]
        var sent: [UInt64: SentContext] = [:]
        var nextTag: UInt64 = 1
        var pools: [PoolKey: any APNSDeliveryClient] = [:]
        /// Pools that cannot reach their gateway: their new notifications are parked, not claimed.
        var unavailable: Set<PoolKey> = []
        /// Notifications waiting for their pool's gateway to come back, unclaimed.
        var parked: [PoolKey: [Candidate]] = [:]
        var parkedCount = 0
        var stopping = false
        var redisDown = false
        var paused = false
        var revoking: Set<TopicPartition>? = nil
        /// The written positions stored in Redis (`pw:`), by partition.
        var writtenMarks: [TopicPartition: Int64] = [:]
        /// A revocation waits for the written positions of its partitions to be stored.
        var marksRequested = false
        /// The result writer has finished (shutdown).
        var writerExited = false
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
        var statistics = WorkerStatistics()

        func activeCount(in partitions: Set<TopicPartition>) -> Int {
            partitions.reduce(0) { $0 + (active[$1] ?? 0) }
        }

        /// Whether consumption may take more: parked notifications (waiting for an unreachable
        /// gateway) have their own bound of the same size, so that other apps go on meanwhile.
        func hasCapacity(_ maxInFlight: Int) -> Bool {
            inFlight - parkedCount < maxInFlight && parkedCount < maxInFlight
        }

        /// Written positions that moved since they were last stored.
        func pendingMarks() -> [TopicPartitionOffset] {
            tracker.allPositions().filter { ($0.offset) > (writtenMarks[$0.topicPartition] ?? -1) }
        }

        /// Whether the written positions of `selection` are stored.
        func marksStored(for selection: Set<TopicPartition>) -> Bool {
            tracker.positions(in: selection).allSatisfy { $0.offset <= (writtenMarks[$0.topicPartition] ?? -1) }
        }

        /// Removes the parked notifications that match; returns them.
        mutating func unpark(where match: (Candidate) -> Bool) -> [Candidate] {
            guard parkedCount > 0 else { return [] }
            var out: [Candidate] = []
            for key in Array(parked.keys) {
                var list = parked[key]!
                let taken = list.filter(match)
                guard !taken.isEmpty else { continue }
                list.removeAll(where: match)
                parked[key] = list.isEmpty ? nil : list
                out += taken
            }
            parkedCount -= out.count
            return out
        }
    }

    public init(options: WorkerOptions, logger: Logger = Logger(label: "apn-worker")) {
        self.options = options
        var logger = logger
        logger[metadataKey: "worker"] = "\(options.workerId)"
        self.logger = logger
        let suffix = (0..<6).map { _ in "0123456789abcdefghijklmnopqrstuvwxyz".randomElement()! }
        self.owner = "\(options.workerId)#\(String(suffix))"
        var parser = JobParser()
        parser.http2Apps = Set(options.apps.filter { _, app in
            app.environments.values.contains { if case .http2 = $0.transport { true } else { false } }
        }.keys)
        self.parser = parser
    }

    /// Counters for logs, tests and benchmarks.
    public var statistics: WorkerStatistics { state.withLock { $0.statistics } }

    /// Asks ``run()`` to stop: consumption ends, in-flight notifications are finished, their
    /// results written and offsets committed, then everything is closed.
    public func stop() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.stopping = true
            var out: [CheckedContinuation<Void, Never>] = []
            if let c = s.capacityWaiter { out.append(c); s.capacityWaiter = nil }
            if let c = s.writerWaiter { out.append(c); s.writerWaiter = nil }
            if let c = s.claimWaiter { out.append(c); s.claimWaiter = nil }
            return out
        }
        waiters.forEach { $0.resume() }
    }

    // MARK: Run

    /// Runs until ``stop()``; returns after the graceful shutdown.
    ///
    /// - Throws: a ``WorkerError`` when Kafka cannot be set up or fails fatally.
    public func run() async throws {
        let claimRedis = await connectRedis(purpose: "claims")
        let stateRedis = await connectRedis(purpose: "state")
        let claims = NotificationStore(redis: claimRedis, prefix: options.redisKeyPrefix, owner: owner)
        let store = NotificationStore(redis: stateRedis, prefix: options.redisKeyPrefix, owner: owner)

        var kafka = options.kafka
        // Requests go out at once instead of waiting for the previous segment's ACK (Nagle):
        // a result's latency includes an acknowledged produce.
        kafka.properties["socket.nagle.disable"] = kafka.properties["socket.nagle.disable"] ?? "true"
        var producerConfig = kafka
        producerConfig.properties["linger.ms"] = producerConfig.properties["linger.ms"] ?? "2"
        let producer: KafkaProducer
        let consumer: KafkaConsumer
        do {
            producer = try KafkaProducer(configuration: producerConfig)
            var consumerConfig = kafka
            consumerConfig.properties["group.id"] = options.groupId
            // A member that dies is noticed within 10 s (librdkafka's own default is 45 s), and
            // a rebalance reaches the members within a second.
            consumerConfig.properties["session.timeout.ms"] = consumerConfig.properties["session.timeout.ms"] ?? "10000"
            consumerConfig.properties["heartbeat.interval.ms"] = consumerConfig.properties["heartbeat.interval.ms"] ?? "1000"
            if let instance = options.groupInstanceId {
                // Static membership: a restarted worker with the same id takes its partitions
                // back within the session timeout, without a rebalance.
                consumerConfig.properties["group.instance.id"] = instance
            }
            consumerConfig.properties["auto.offset.reset"] = consumerConfig.properties["auto.offset.reset"] ?? "earliest"
            // Offsets are stored once their results are written; librdkafka commits them.
            consumerConfig.properties["enable.auto.commit"] = "true"
            consumerConfig.properties["enable.auto.offset.store"] = "false"
            consumerConfig.properties["auto.commit.interval.ms"] = consumerConfig.properties["auto.commit.interval.ms"] ?? "200"
            consumer = try KafkaConsumer(configuration: consumerConfig) { [self] partitions in
                handleRevoke(partitions)
            }
            try consumer.subscribe(topics: [options.requestsTopic])
        } catch {
            throw WorkerError("cannot set up Kafka at \(options.kafka.bootstrapServers ?? "?"): \(error)")
        }
        consumerBox.withLock { $0 = consumer }
        logger.info("Worker started", metadata: ["owner": "\(owner)", "group": "\(options.groupId)",
                                                 "topic": "\(options.requestsTopic)"])

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.heartbeatLoop(store) }
            group.addTask { await self.writerLoop(store: store, producer: producer, consumer: consumer) }
            group.addTask { await self.heldLoop(claims) }
            group.addTask { await self.claimLoop(claims) }
            group.addTask { await self.rebalanceLog(consumer) }
            for (appName, app) in options.apps {
                for (environment, env) in app.environments {
                    if let feedback = env.feedback {
                        group.addTask {
                            await self.feedbackLoop(app: appName, environment: environment, configuration: feedback,
                                                    interval: env.feedbackInterval, store: store, producer: producer)
                        }
                    }
                }
            }

            var failure: (any Error)? = nil
            do {
                try await consumeLoop(consumer: consumer, claims: claims)
            } catch {
                failure = error
                logger.error("Consumption failed; shutting down", metadata: ["error": "\(error)"])
            }
            stop()
            await drain(consumer: consumer, store: store)
            group.cancelAll()
            _ = try? await group.waitForAll()
            if let failure { throw failure }
        }

        state.withLock { $0.statistics.redisRoundTrips = claimRedis.roundTrips + stateRedis.roundTrips }
        await producer.close(timeout: .seconds(10))
        do { try await store.retire() } catch { logger.notice("Cannot remove the liveness key", metadata: ["error": "\(error)"]) }
        await claimRedis.close()
        await stateRedis.close()
        logger.info("Worker stopped", metadata: ["statistics": "\(statistics)"])
    }

    /// Connects, retrying until Redis answers (nothing can be sent without dedupe).
    private func connectRedis(purpose: String) async -> RedisConnection {
        var delay: Duration = .milliseconds(100)
        while true {
            do {
                let connection = try await RedisConnection.connect(options.redis)
                try await NotificationStore(redis: connection, prefix: options.redisKeyPrefix, owner: owner).prepare()
                return connection
            } catch {
                logger.warning("Redis is unreachable; retrying", metadata: ["endpoint": "\(options.redis.endpoint)",
                                                                             "purpose": "\(purpose)", "error": "\(error.message)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    // MARK: Consumption

    private func consumeLoop(consumer: KafkaConsumer, claims: NotificationStore) async throws {
        while true {
            await waitForCapacity()
            let (stopping, redisDown, paused) = state.withLock { ($0.stopping, $0.redisDown, $0.paused) }
            if stopping { return }
            // Redis unreachable: stop fetching (keep polling so the group keeps this member).
            if redisDown || paused != redisDown {
                if let assigned = try? consumer.assignment(), !assigned.isEmpty {
                    if redisDown { try? consumer.pause(assigned) } else { try? consumer.resume(assigned) }
                }
                if redisDown != paused {
                    logger.notice(redisDown ? "Redis is unreachable: consumption paused" : "Redis is back: consumption resumed")
                }
                state.withLock { $0.paused = redisDown }
            }
            var messages: [KafkaMessage]
            do {
                messages = try await consumer.poll(maxMessages: options.batchSize, timeout: .milliseconds(100))
                if !messages.isEmpty {
                    let deadline = ContinuousClock.now + options.batchWindow
                    while messages.count < options.batchSize {
                        let remaining = deadline - .now
                        if remaining <= .zero { break }
                        let more = try await consumer.poll(maxMessages: options.batchSize - messages.count, timeout: remaining)
                        if more.isEmpty { break }
                        messages += more
                    }
                }
            } catch {
                if error.isFatal { throw WorkerError("Kafka consumer failed: \(error)") }
                logger.warning("Kafka consumer error", metadata: ["error": "\(error)"])
                continue
            }
            if messages.isEmpty { continue }
            await handle(messages, claims: claims)
        }
    }

    /// Parses a batch, registers its messages, turns bad input into results and claims the rest.
    /// What is parsed is handed on at least every ``handOverInterval``, so the results of a batch's
    /// first messages (of any partition) never wait for the parsing of many large ones behind them.
    private func handle(_ messages: [KafkaMessage], claims: NotificationStore) async {
        let worker = options.workerId
        var now = Self.nowMilliseconds()
        var results: [Outgoing] = []
        var candidates: [Candidate] = []
        var registrations: [(MessageRef, Int)] = []
        var handedOver = ContinuousClock.now
        var parsed = 0

        func failure(_ ref: MessageRef, jobId: String, app: String?, env: String?, token: String, status: APNSStatus, reason: String) -> Outgoing {
            let resultId = WorkerResult.notificationId(jobId: jobId, token: token)
            let result = WorkerResult(kind: .transmissionError, resultId: resultId, jobId: jobId, app: app, environment: env,
                                      token: token, status: status, reason: reason, attempts: 0, possibleDuplicate: false,
                                      worker: worker, at: now)
            return Outgoing(ref: ref, resultId: resultId, key: result.key, value: result.serialized(), record: false)
        }

        for message in messages {
            if ContinuousClock.now - handedOver >= Self.handOverInterval {
                handOver(&registrations, &results, &candidates, messages: parsed)
                parsed = 0
                handedOver = .now
                now = Self.nowMilliseconds()
            }
            parsed += 1
            let ref = MessageRef(partition: TopicPartition(topic: message.topic, partition: message.partition), offset: message.offset)
            var where_: String { "\(message.topic)[\(message.partition)]@\(message.offset)" }
            let before = results.count + candidates.count
            switch parser.parse(message.value) {
            case .unreadable(let jobId, let app, let reason):
                logger.warning("Rejected message \(where_): \(reason).")
                let result = WorkerResult(kind: .invalidJob,
                                          resultId: WorkerResult.invalidJobId(topic: message.topic, partition: message.partition, offset: message.offset),
                                          jobId: jobId, app: app, status: .invalidJob, reason: reason, topic: message.topic,
                                          partition: message.partition, offset: message.offset, worker: worker, at: now)
                results.append(Outgoing(ref: ref, resultId: nil, key: result.key, value: result.serialized(), record: false))
            case .rejected(let jobId, let app, let tokens, let reason):
                logger.warning("Rejected job \(jobId) at \(where_): \(reason).")
                for token in tokens {
                    results.append(failure(ref, jobId: jobId, app: app, env: nil, token: token, status: .invalidJob, reason: reason))
                }
            case .job(let job):
                guard let app = options.apps[job.app] else {
                    let reason = "app \"\(job.app.abbreviated())\" is not configured; configured apps: \(options.apps.keys.sorted().joined(separator: ", "))"
                    logger.warning("Rejected job \(job.id) at \(where_): \(reason).")
                    for token in job.tokens {
                        results.append(failure(ref, jobId: job.id, app: job.app, env: job.environment, token: token.text, status: .invalidJob, reason: reason))
                    }
                    break
                }
                let environment = job.environment.flatMap(APNSEnvironment.init(rawValue:)) ?? app.defaultEnvironment
                guard app.environments[environment] != nil else {
                    let reason = "app \"\(job.app)\" has no \(environment) environment configured"
                    logger.warning("Rejected job \(job.id) at \(where_): \(reason).")
                    for token in job.tokens {
                        results.append(failure(ref, jobId: job.id, app: job.app, env: environment.rawValue, token: token.text, status: .invalidJob, reason: reason))
                    }
                    break
                }
                let shared = SharedJob(job, environment: environment, app: app, producedAt: message.timestamp ?? now)
                for token in job.tokens {
                    switch token {
                    case .malformed(let text, let reason):
                        results.append(failure(ref, jobId: job.id, app: job.app, env: environment.rawValue, token: text, status: .malformedToken, reason: reason))
                    case .valid(let deviceToken):
                        if let payloadError = job.payloadError {
                            results.append(failure(ref, jobId: job.id, app: job.app, env: environment.rawValue, token: deviceToken.hex,
                                                 status: .invalidPayload, reason: payloadError))
                        } else {
                            let hex = deviceToken.hex
                            candidates.append(Candidate(
                                ref: ref, job: shared, token: deviceToken, tokenHex: hex,
                                resultId: WorkerResult.notificationId(jobId: job.id, token: hex)))
                        }
                    }
                }
                if job.payloadError != nil {
                    logger.warning("Job \(job.id) at \(where_) cannot be sent: \(job.payloadError ?? "").")
                }
            }
            registrations.append((ref, results.count + candidates.count - before))
        }
        handOver(&registrations, &results, &candidates, messages: parsed)
    }

    /// How long parsing may go on before what is parsed is handed on (see ``handle(_:claims:)``).
    static let handOverInterval: Duration = .milliseconds(20)

    /// Registers parsed messages, hands their error results to the writer and their notifications
    /// to the claim stage, and empties the arrays.
    private func handOver(_ registrations: inout [(MessageRef, Int)], _ results: inout [Outgoing],
                          _ candidates: inout [Candidate], messages: Int) {
        defer { registrations = []; results = []; candidates = [] }
        state.withLock { s in
            for (ref, count) in registrations {
                s.tracker.register(ref.partition, offset: ref.offset, results: count)
                s.inFlight += count
            }
            s.statistics.messages += messages
            s.statistics.notifications += candidates.count
            s.statistics.rejected += results.count
            if registrations.contains(where: { $0.1 == 0 }) { s.commitDirty = true }
        }
        enqueue(results)
        guard !candidates.isEmpty else { return }
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.unclaimed += candidates
            defer { s.claimWaiter = nil }
            return s.claimWaiter
        }
        waiter?.resume()
    }

    /// The claim stage: claims what parsing produced, several batches per round trip when they
    /// pile up, while the consumer parses the next ones.
    private func claimLoop(_ claims: NotificationStore) async {
        while !Task.isCancelled {
            let batch = state.withLock { s -> [Candidate] in
                let count = min(s.unclaimed.count, max(options.batchSize, 5000))
                if count == s.unclaimed.count {
                    defer { s.unclaimed = [] }
                    return s.unclaimed
                }
                let batch = Array(s.unclaimed.prefix(count))
                s.unclaimed.removeFirst(count)
                return batch
            }
            if !batch.isEmpty {
                await claim(batch, claims: claims)
                continue
            }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { s -> Bool in
                    if !s.unclaimed.isEmpty || s.stopping { return true }
                    s.claimWaiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
            if state.withLock({ $0.stopping }) { return }
        }
    }

    /// Claims candidates in one round trip and acts on each decision.
    private func claim(_ candidates: [Candidate], claims: NotificationStore) async {
        guard !candidates.isEmpty else { return }
        // A notification this process still has in flight for the same message waits for it.
        var ready: [Candidate] = []
        var waiting: [Candidate] = []
        state.withLock { s in
            for c in candidates {
                if s.localClaims[c.resultId] == c.ref { waiting.append(c) } else { ready.append(c) }
            }
        }
        if !waiting.isEmpty { hold(waiting, for: .seconds(1)) }
        // A pool that cannot reach its gateway gets no more: its notifications wait, unclaimed.
        let parked = state.withLock { s -> Int in
            guard !s.unavailable.isEmpty else { return 0 }
            let before = ready.count
            ready.removeAll { c in
                let key = c.poolKey
                guard s.unavailable.contains(key) else { return false }
                s.parked[key, default: []].append(c)
                return true
            }
            s.parkedCount += before - ready.count
            return before - ready.count
        }
        if parked > 0 { wakeCapacityAndWriter() }
        guard !ready.isEmpty else { return }

        let now = Self.nowMilliseconds()
        let requests = ready.map { c in
            NotificationStore.ClaimRequest(
                resultId: c.resultId, partition: c.ref.partition.partition, offset: c.ref.offset, app: c.app,
                environment: c.environment.rawValue, token: c.tokenHex, registeredAt: c.registeredAt,
                appPerSecond: c.job.appPerSecond, devicePerHour: c.job.devicePerHour)
        }
        let decisions: [NotificationStore.ClaimDecision]
        do {
            decisions = try await claims.claim(topic: options.requestsTopic, requests, ttlSeconds: options.dedupeTTLSeconds,
                                               nowMilliseconds: now)
            let wasDown = state.withLock { s in defer { s.redisDown = false }; return s.redisDown }
            if wasDown { logger.notice("Redis answers again") }
        } catch {
            let wasDown = state.withLock { s in defer { s.redisDown = true }; return s.redisDown }
            if !wasDown {
                logger.error("Cannot claim notifications in Redis; holding them until it answers",
                             metadata: ["error": "\(error.message)", "notifications": "\(ready.count)"])
            }
            try? await claims.redis.reconnect()
            hold(ready, for: .milliseconds(500))
            return
        }

        let worker = options.workerId
        var toSend: [(key: PoolKey, job: SharedJob, submissions: [APNSSubmission])] = []
        var results: [Outgoing] = []
        var duplicates: [MessageRef] = []
        var busy: [Candidate] = []
        var throttled: [Candidate] = []
        state.withLock { s in
            for (c, decision) in zip(ready, decisions) {
                switch decision {
                case .send, .resend:
                    let tag = s.nextTag
                    s.nextTag += 1
                    s.sent[tag] = SentContext(candidate: c, takeover: decision == .resend)
                    s.localClaims[c.resultId] = c.ref
                    s.active[c.ref.partition, default: 0] += 1
                    let submission = APNSSubmission(tag: tag, token: c.token, content: c.job.content)
                    // Consecutive notifications usually share a job, hence a pool.
                    if let last = toSend.indices.last, toSend[last].job === c.job || toSend[last].key == PoolKey(app: c.app, environment: c.environment) {
                        toSend[last].submissions.append(submission)
                        toSend[last].job = c.job
                    } else {
                        toSend.append((PoolKey(app: c.app, environment: c.environment), c.job, [submission]))
                    }
                    if decision == .resend { s.statistics.takenOver += 1 }
                case .recorded(let value, let feedback):
                    var out = Outgoing(ref: c.ref, resultId: c.resultId, key: Array(c.tokenHex.utf8), value: value, record: false)
                    out.extra = feedback.map { (Array(c.tokenHex.utf8), $0) }
                    results.append(out)
                    s.statistics.reemitted += 1
                case .duplicate:
                    duplicates.append(c.ref)
                    s.statistics.duplicates += 1
                case .written:
                    duplicates.append(c.ref)
                    s.statistics.alreadyWritten += 1
                case .busy:
                    busy.append(c)
                case .throttled:
                    throttled.append(c)
                case .unregistered(let since):
                    let result = WorkerResult(kind: .transmissionError, resultId: c.resultId, jobId: c.jobId, app: c.app,
                                              environment: c.environment.rawValue, token: c.tokenHex, status: .unregistered,
                                              reason: "Apple reported this token unregistered at \(since), after the job's registeredAt (or the job has none)",
                                              attempts: 0, possibleDuplicate: false, worker: worker, at: now)
                    results.append(Outgoing(ref: c.ref, resultId: c.resultId, key: result.key, value: result.serialized(), record: true))
                case .rateLimited:
                    let result = WorkerResult(kind: .transmissionError, resultId: c.resultId, jobId: c.jobId, app: c.app,
                                              environment: c.environment.rawValue, token: c.tokenHex, status: .rateLimited,
                                              reason: "the device reached its limit of \(c.job.devicePerHour) notifications per hour",
                                              attempts: 0, possibleDuplicate: false, worker: worker, at: now)
                    results.append(Outgoing(ref: c.ref, resultId: c.resultId, key: result.key, value: result.serialized(), record: true))
                }
            }
            for ref in duplicates {
                s.tracker.complete(ref.partition, offset: ref.offset)
                s.inFlight -= 1
            }
            if !duplicates.isEmpty { s.commitDirty = true }
        }
        if !duplicates.isEmpty { wakeCapacityAndWriter() }
        enqueue(results)
        defer { if state.withLock({ $0.revoking != nil }) { revokeSignal.signal() } }
        if !busy.isEmpty { hold(busy, for: .seconds(1)) }
        if !throttled.isEmpty {
            let millis = Self.nowMilliseconds() % 1000
            hold(throttled, for: .milliseconds(1000 - millis + 1))
        }
        // One hand-over per pool, in the order the notifications came.
        var byPool: [PoolKey: [APNSSubmission]] = [:]
        var order: [PoolKey] = []
        for run in toSend {
            if byPool[run.key] == nil { order.append(run.key) }
            byPool[run.key, default: []] += run.submissions
        }
        for key in order {
            await submit(byPool[key]!, to: key)
        }
    }

    private func submit(_ submissions: [APNSSubmission], to key: PoolKey) async {
        do {
            let client = try pool(for: key)
            try await client.send(submissions)
        } catch {
            // The pool is shutting down or cannot be built: release the claims; the messages are
            // not committed past these notifications, so they are consumed again.
            logger.error("Cannot hand notifications to the \(key.app) \(key.environment) pool", metadata: ["error": "\(error)"])
            let released = state.withLock { s in
                submissions.compactMap { s.sent.removeValue(forKey: $0.tag) }
            }
            enqueue(released.map { ctx in
                Outgoing(ref: ctx.candidate.ref, resultId: ctx.candidate.resultId, key: nil, value: nil, record: false,
                         release: true, fromPool: true)
            })
        }
    }

    /// The pool for an (app, environment), created on first use.
    private func pool(for key: PoolKey) throws -> any APNSDeliveryClient {
        if let client = try state.withLock({ s throws -> (any APNSDeliveryClient)? in
            if s.stopping { throw APNSError(.shutDown, "the worker is stopping") }
            return s.pools[key]
        }) {
            return client
        }
        guard let transport = options.apps[key.app]?.environments[key.environment]?.transport else {
            throw WorkerError("app \(key.app) has no \(key.environment) environment")
        }
        var logger = self.logger
        logger[metadataKey: "app"] = "\(key.app)"
        logger[metadataKey: "env"] = "\(key.environment)"
        let created: any APNSDeliveryClient
        let connections: Int
        switch transport {
        case .binary(let configuration):
            created = try APNSBinaryClient(configuration: configuration, logger: logger)
            connections = configuration.maxConnections
        case .http2(let configuration):
            created = try APNSHTTP2Client(configuration: configuration, logger: logger)
            connections = configuration.maxConnections
        }
        let (client, isNew) = try state.withLock { s throws -> (any APNSDeliveryClient, Bool) in
            if s.stopping { throw APNSError(.shutDown, "the worker is stopping") }
            if let existing = s.pools[key] { return (existing, false) }
            s.pools[key] = created
            return (created, true)
        }
        if isNew {
            Task { await self.readEvents(of: client, key: key) }
            logger.info("Opened a delivery pool", metadata: ["gateway": "\(transport.endpoint)", "transport": "\(transport.name)",
                                                              "connections": "\(connections)"])
        }
        return client
    }

    /// Turns a pool's outcomes into results.
    private func readEvents(of client: any APNSDeliveryClient, key: PoolKey) async {
        let worker = options.workerId
        while let events = await client.nextEvents(max: 1024) {
            // The contexts of every outcome in the batch, under one lock.
            let contexts = state.withLock { s in
                events.map { event in event.outcome.flatMap { s.sent.removeValue(forKey: $0.tag) } }
            }
            var outgoing: [Outgoing] = []
            outgoing.reserveCapacity(events.count)
            var feedbackCount = 0
            defer {
                if feedbackCount > 0 { state.withLock { $0.statistics.feedback += feedbackCount } }
                enqueue(outgoing)
            }
            for (event, context) in zip(events, contexts) {
                switch event {
                case .transmitted(let outcome), .transmissionError(let outcome):
                    guard let ctx = context else { continue }
                    let c = ctx.candidate
                    if outcome.status == .shutDown {
                        // Never written: give the notification back.
                        outgoing.append(Outgoing(ref: c.ref, resultId: c.resultId, key: nil, value: nil, record: false, release: true, fromPool: true))
                        continue
                    }
                    let result = WorkerResult(
                        kind: outcome.isTransmitted ? .transmitted : .transmissionError, resultId: c.resultId, jobId: c.jobId,
                        app: c.app, environment: c.environment.rawValue, token: c.tokenHex, status: outcome.status,
                        reason: outcome.status.map { _ in outcome.reason ?? outcome.message ?? outcome.status!.reason },
                        attempts: outcome.attempts,
                        possibleDuplicate: outcome.possibleDuplicate || ctx.takeover, worker: worker, at: Self.nowMilliseconds())
                    var out = Outgoing(ref: c.ref, resultId: c.resultId, key: result.key, value: result.serialized(), record: true, fromPool: true)
                    if outcome.status == .invalidToken {
                        // Binary status 8 (§1.4).
                        out.unregister = (c.app, c.environment.rawValue, c.tokenHex, Int64(Date().timeIntervalSince1970))
                    } else if outcome.status == .gone {
                        // HTTP/2 410 (§3.4): the token is unregistered since its timestamp (ms), and
                        // the news is published like the feedback service's.
                        let since = (outcome.unregisteredAt ?? Self.nowMilliseconds()) / 1000
                        out.unregister = (c.app, c.environment.rawValue, c.tokenHex, since)
                        let feedback = WorkerResult(
                            kind: .feedback,
                            resultId: WorkerResult.feedbackId(app: c.app, environment: c.environment.rawValue, token: c.tokenHex, timestamp: since),
                            app: c.app, environment: c.environment.rawValue, token: c.tokenHex, timestamp: since,
                            worker: worker, at: Self.nowMilliseconds())
                        out.extra = (feedback.key, feedback.serialized())
                        feedbackCount += 1
                    }
                    outgoing.append(out)
                case .connected(let connection):
                    logger.debug("Gateway connection open", metadata: ["app": "\(key.app)", "connection": "\(connection)"])
                case .disconnected(let connection, let reason):
                    logger.info("Gateway connection closed", metadata: ["app": "\(key.app)", "connection": "\(connection)", "reason": "\(reason)"])
                case .timeout(let connection, let reason):
                    logger.warning("Gateway connection timed out", metadata: ["app": "\(key.app)", "connection": "\(connection)", "reason": "\(reason)"])
                case .socketError(let connection, let error):
                    logger.warning("Gateway socket error", metadata: ["app": "\(key.app)", "connection": "\(connection)", "error": "\(error)"])
                case .error(let error):
                    logger.warning("Delivery pool problem", metadata: ["app": "\(key.app)", "error": "\(error)"])
                case .unavailable(let reason):
                    state.withLock { _ = $0.unavailable.insert(key) }
                    logger.warning("Gateway unreachable: this app's new notifications wait until it answers; other apps go on",
                                   metadata: ["app": "\(key.app)", "env": "\(key.environment)", "reason": "\(reason)"])
                case .available:
                    let back = state.withLock { s in
                        s.unavailable.remove(key)
                        return s.unpark { $0.poolKey == key }
                    }
                    logger.notice("Gateway reachable again: parked notifications go out",
                                  metadata: ["app": "\(key.app)", "env": "\(key.environment)", "parked": "\(back.count)"])
                    if !back.isEmpty { requeue(back) }
                }
            }
        }
    }

    // MARK: Held notifications (busy, throttled, Redis down)

    private func hold(_ candidates: [Candidate], for delay: Duration) {
        let at = ContinuousClock.now + delay
        state.withLock { s in
            for c in candidates {
                c.retryAt = at
                s.held.append(c)
            }
        }
    }

    /// Hands notifications back to the claim stage.
    private func requeue(_ candidates: [Candidate]) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.unclaimed += candidates
            defer { s.claimWaiter = nil }
            return s.claimWaiter
        }
        waiter?.resume()
        wakeCapacityAndWriter()
    }

    /// Parked notifications whose job went stale get an `expired` result instead of waiting on.
    private func expireStaleParked() {
        let now = Self.nowMilliseconds()
        let stale = state.withLock { s in
            s.unpark { c in c.job.content.staleAt.map { $0 <= now } ?? false }
        }
        guard !stale.isEmpty else { return }
        let worker = options.workerId
        logger.warning("Notifications went stale while their gateway was unreachable", metadata: ["count": "\(stale.count)"])
        enqueue(stale.map { c in
            let result = WorkerResult(kind: .transmissionError, resultId: c.resultId, jobId: c.jobId, app: c.app,
                                      environment: c.environment.rawValue, token: c.tokenHex, status: .expired,
                                      reason: "the job's staleAfter passed while the gateway was unreachable; not sent",
                                      attempts: 0, possibleDuplicate: false, worker: worker, at: now)
            return Outgoing(ref: c.ref, resultId: c.resultId, key: result.key, value: result.serialized(), record: true)
        })
    }

    private func heldLoop(_ claims: NotificationStore) async {
        var lastStaleSweep = ContinuousClock.now
        while !Task.isCancelled {
            if ContinuousClock.now - lastStaleSweep >= .seconds(1) {
                lastStaleSweep = .now
                expireStaleParked()
            }
            let due = state.withLock { s -> [Candidate] in
                guard !s.held.isEmpty, !s.stopping else { return [] }
                let now = ContinuousClock.now
                let due = s.held.filter { $0.retryAt <= now }
                s.held.removeAll { $0.retryAt <= now }
                return due
            }
            if due.isEmpty {
                do { try await Task.sleep(for: .milliseconds(50)) } catch { return }
                continue
            }
            await claim(due, claims: claims)
        }
    }

    // MARK: Results

    private func enqueue(_ items: [Outgoing]) {
        guard !items.isEmpty else { return }
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.outgoing += items
            for item in items where !item.fromPool {
                if let ref = item.ref { s.active[ref.partition, default: 0] += 1 }
            }
            defer { s.writerWaiter = nil }
            return s.writerWaiter
        }
        waiter?.resume()
    }

    private func writerLoop(store: NotificationStore, producer: KafkaProducer, consumer: KafkaConsumer) async {
        defer { state.withLock { $0.writerExited = true } }
        var lastFlush = ContinuousClock.now
        while true {
            let (batch, dirty, stop) = await nextWriterBatch()
            if stop { return }
            if !batch.isEmpty || state.withLock({ $0.marksRequested }) {
                await write(batch, store: store, producer: producer)
            }
            if dirty || !batch.isEmpty {
                await commit(consumer)
            }
            // Gather a fuller batch next time when this one was small.
            if batch.count < options.resultBatchSize {
                let next = lastFlush + options.resultFlushInterval
                if next > .now { try? await Task.sleep(until: next) }
            }
            lastFlush = .now
        }
    }

    /// Waits for results (or a commit to make) and takes them; `stop` when stopping and drained.
    private func nextWriterBatch() async -> ([Outgoing], Bool, Bool) {
        while true {
            let taken = state.withLock { s -> ([Outgoing], Bool, Bool)? in
                if !s.outgoing.isEmpty || s.commitDirty || s.marksRequested {
                    let batch: [Outgoing]
                    if s.outgoing.count <= options.resultBatchSize {
                        batch = s.outgoing
                        s.outgoing = []
                    } else {
                        batch = Array(s.outgoing.prefix(options.resultBatchSize))
                        s.outgoing.removeFirst(batch.count)
                    }
                    defer { s.commitDirty = false }
                    return (batch, s.commitDirty, false)
                }
                if s.stopping && s.inFlight <= 0 && s.held.isEmpty && s.unclaimed.isEmpty && s.sent.isEmpty { return ([], false, true) }
                return nil
            }
            if let taken { return taken }
            if Task.isCancelled { return ([], false, true) }
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { s -> Bool in
                    if !s.outgoing.isEmpty || s.commitDirty || s.marksRequested || s.stopping { return true }
                    s.writerWaiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
            if state.withLock({ $0.stopping && $0.outgoing.isEmpty && !$0.commitDirty }) {
                // While stopping, poll for the drain to finish.
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Records outcomes in Redis, produces the results, then marks them written. Retries until
    /// both stores accept them: nothing is dropped.
    private func write(_ batch: [Outgoing], store: NotificationStore, producer: KafkaProducer) async {
        var records: [NotificationStore.Record] = []
        var unregistered: [(app: String, environment: String, token: String, since: Int64)] = []
        var released: [String] = []
        for item in batch {
            if item.release, let id = item.resultId { released.append(id) }
            if item.record, let id = item.resultId, let ref = item.ref, let value = item.value {
                records.append(.init(resultId: id, topic: ref.partition.topic, partition: ref.partition.partition, offset: ref.offset,
                                     result: value, feedback: item.extra?.value))
            }
            if let u = item.unregister { unregistered.append(u) }
        }
        // The written positions reached by earlier batches go with this one.
        let marks = state.withLock { s in
            defer { s.marksRequested = false }
            return s.pendingMarks()
        }
        var delay: Duration = .milliseconds(50)
        while true {
            do {
                try await store.write(records: records, unregistered: unregistered, released: released, positions: marks,
                                      ttlSeconds: options.dedupeTTLSeconds)
                if delay > .milliseconds(50) { state.withLock { $0.redisDown = false } }
                break
            } catch {
                // Shutting down: these messages are not committed, so they are consumed again.
                if Task.isCancelled { return }
                logger.error("Cannot record outcomes in Redis; retrying", metadata: ["error": "\(error.message)", "results": "\(batch.count)"])
                state.withLock { $0.redisDown = true }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
                try? await store.redis.reconnect()
            }
        }

        var pending: [KafkaOutgoingMessage] = []
        pending.reserveCapacity(batch.count)
        for item in batch {
            if let value = item.value { pending.append(KafkaOutgoingMessage(topic: options.resultsTopic, key: item.key, value: value)) }
            if let extra = item.extra { pending.append(KafkaOutgoingMessage(topic: options.resultsTopic, key: extra.key, value: extra.value)) }
        }
        delay = .milliseconds(50)
        while !pending.isEmpty {
            // Shutting down: these messages are not committed, so they are consumed again.
            if Task.isCancelled { return }
            let messages = pending
            var failed: [KafkaOutgoingMessage] = []
            do {
                let reports = try await producer.send(messages)
                var retriable: KafkaError?
                for (message, report) in zip(messages, reports) {
                    guard case .failure(let error) = report else { continue }
                    if error.isMessageTooLarge {
                        // Retrying could never write it, and would hold up every result behind it.
                        logger.error("A result is over the producer's message.max.bytes and is not written; raise kafka.properties.message.max.bytes",
                                     metadata: ["bytes": "\(message.value.count + (message.key?.count ?? 0))", "error": "\(error)"])
                        continue
                    }
                    failed.append(message)
                    retriable = retriable ?? error
                }
                if let retriable {
                    logger.warning("Results were not written; retrying", metadata: ["results": "\(failed.count)", "error": "\(retriable)"])
                }
            } catch {
                logger.error("Cannot write results to Kafka; retrying", metadata: ["error": "\(error)"])
                failed = pending
            }
            pending = failed
            if !pending.isEmpty {
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }

        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            for mark in marks { s.writtenMarks[mark.topicPartition] = max(s.writtenMarks[mark.topicPartition] ?? -1, mark.offset) }
            for item in batch {
                if let id = item.resultId, item.record || item.release { s.localClaims.removeValue(forKey: id) }
                guard let ref = item.ref else { continue }
                if item.value != nil {
                    s.tracker.complete(ref.partition, offset: ref.offset)
                    s.statistics.results += 1
                }
                s.active[ref.partition, default: 1] -= 1
                if s.active[ref.partition] ?? 0 <= 0 { s.active.removeValue(forKey: ref.partition) }
                s.inFlight -= 1
            }
            var out: [CheckedContinuation<Void, Never>] = []
            if let c = s.capacityWaiter, s.hasCapacity(options.maxInFlight) { out.append(c); s.capacityWaiter = nil }
            if let revoking = s.revoking, s.activeCount(in: revoking) == 0 {
                // Its positions are stored by the next write, which the revocation asks for.
                if !s.marksStored(for: revoking) { s.marksRequested = true }
                revokeSignal.signal()
            }
            if s.inFlight <= 0 { out += s.drainWaiters; s.drainWaiters.removeAll() }
            return out
        }
        waiters.forEach { $0.resume() }
    }

    /// Hands the offsets of fully written messages to librdkafka, which commits them on its
    /// auto-commit timer and on close. (A revocation commits its partitions itself, see
    /// ``commitRevoked(_:_:)``.)
    private func commit(_ consumer: KafkaConsumer) async {
        let offsets = state.withLock { $0.tracker.committable() }
        guard !offsets.isEmpty else { return }
        do {
            let skipped = Set(try consumer.store(offsets))
            state.withLock { $0.tracker.markCommitted(offsets.filter { !skipped.contains($0) }) }
        } catch {
            logger.warning("Cannot store offsets for commit; will retry", metadata: ["error": "\(error)", "offsets": "\(offsets)"])
            state.withLock { $0.commitDirty = true }
        }
    }

    // MARK: Capacity

    private func waitForCapacity() async {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { s -> Bool in
                if s.stopping || s.hasCapacity(options.maxInFlight) { return true }
                s.capacityWaiter = continuation
                return false
            }
            if ready { continuation.resume() }
        }
    }

    private func wakeCapacityAndWriter() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            var out: [CheckedContinuation<Void, Never>] = []
            if let c = s.capacityWaiter, s.hasCapacity(options.maxInFlight) { out.append(c); s.capacityWaiter = nil }
            if let c = s.writerWaiter { out.append(c); s.writerWaiter = nil }
            return out
        }
        waiters.forEach { $0.resume() }
    }

    // MARK: Rebalance

    /// Called by librdkafka (on the poll thread) before partitions are taken away: waits for
    /// their notifications in flight, commits what is complete, then forgets them. Held
    /// notifications of those partitions are handed back unclaimed.
    private func handleRevoke(_ partitions: [TopicPartition]) {
        let selection = Set(partitions)
        // Notifications waiting for a retry (busy, throttled) or for their gateway are handed
        // back; the ones about to be claimed and those in flight are finished first.
        func handBack(_ s: inout State, unclaimedToo: Bool) {
            var dropped = s.held.count { selection.contains($0.ref.partition) }
            s.held.removeAll { selection.contains($0.ref.partition) }
            if unclaimedToo {
                dropped += s.unclaimed.count { selection.contains($0.ref.partition) }
                s.unclaimed.removeAll { selection.contains($0.ref.partition) }
            }
            dropped += s.unpark { selection.contains($0.ref.partition) }.count
            s.inFlight -= dropped
        }
        func outstanding(_ s: State) -> Int {
            // Notifications queued in a pool that cannot reach its gateway cannot finish now:
            // the partition is handed on without them (their outcome is recorded when the
            // gateway answers; the next owner waits for that claim and produces its result).
            let stuck = s.unavailable.isEmpty ? 0 : s.sent.values.count {
                selection.contains($0.candidate.ref.partition) && s.unavailable.contains($0.candidate.poolKey)
            }
            return s.activeCount(in: selection) - stuck + s.unclaimed.count { selection.contains($0.ref.partition) }
        }
        let before = state.withLock { s -> Int in
            handBack(&s, unclaimedToo: false)
            s.revoking = selection
            return outstanding(s)
        }
        logger.info("Partitions revoked", metadata: ["partitions": "\(partitions)", "inFlight": "\(before)"])
        if before > 0 {
            let deadline = DispatchTime.now() + .milliseconds(Int(options.revokeTimeout.components.seconds * 1000))
            while state.withLock({ outstanding($0) }) > 0 {
                if revokeSignal.wait(timeout: deadline) == .timedOut {
                    logger.warning("Revoked partitions still had notifications in flight; handing them back", metadata: ["partitions": "\(partitions)"])
                    break
                }
            }
        }
        // What the claims put back to wait meanwhile (and, after a timeout, what is left) too.
        state.withLock { handBack(&$0, unclaimedToo: true) }
        // Their written positions go to Redis before they are handed on, so that the next owner
        // writes no result twice even when the commit below fails (a rebalance in progress).
        let marksDeadline = DispatchTime.now() + .seconds(2)
        while true {
            let (stored, waiter) = state.withLock { s -> (Bool, CheckedContinuation<Void, Never>?) in
                if s.marksStored(for: selection) || s.writerExited { return (true, nil) }
                s.marksRequested = true
                defer { s.writerWaiter = nil }
                return (false, s.writerWaiter)
            }
            if stored { break }
            waiter?.resume()
            if revokeSignal.wait(timeout: marksDeadline) == .timedOut {
                logger.warning("Cannot store the written positions of revoked partitions in time", metadata: ["partitions": "\(partitions)"])
                break
            }
        }
        state.withLock { $0.revoking = nil }
        // Committed here, synchronously, while the partitions are still this member's: the next
        // owner starts after the last message whose results are written.
        if let consumer = consumerBox.withLock({ $0 }) { commitRevoked(consumer, selection) }
        state.withLock { s in
            s.tracker.remove(selection)
            for partition in selection { s.writtenMarks.removeValue(forKey: partition) }
        }
        // Drain any stale signal.
        while revokeSignal.wait(timeout: .now()) == .success {}
    }

    /// Commits the written position of revoked partitions before they are handed on, retrying
    /// briefly while the coordinator is busy; stores it for librdkafka's own commit as well.
    private func commitRevoked(_ consumer: KafkaConsumer, _ selection: Set<TopicPartition>) {
        let offsets = state.withLock { $0.tracker.positions(in: selection) }
        guard !offsets.isEmpty else { return }
        _ = try? consumer.store(offsets)
        let deadline = ContinuousClock.now + options.revokeCommitTimeout
        var delay: Duration = .milliseconds(50)
        while true {
            do {
                try consumer.commitBlocking(offsets)
                state.withLock { $0.tracker.markCommitted(offsets) }
                logger.debug("Committed revoked partitions", metadata: ["offsets": "\(offsets)"])
                return
            } catch {
                if !error.isRetriable || ContinuousClock.now + delay > deadline {
                    logger.warning("Cannot commit the offsets of revoked partitions; their next owner consumes the messages after the last commit again (it writes no result twice for those before the written position stored in Redis)",
                                   metadata: ["error": "\(error)", "offsets": "\(offsets)"])
                    return
                }
                Thread.sleep(forTimeInterval: Double(delay.components.attoseconds) / 1e18 + Double(delay.components.seconds))
                delay = min(delay * 2, .milliseconds(500))
            }
        }
    }

    /// A member stopped while its first join is in progress cannot leave yet: it learns its
    /// member id only when the join answers, and closing at once would leave a member that the
    /// group assigns partitions to and waits for until its session times out. So it finishes
    /// the join (whatever it is assigned stays paused; nothing is processed) and then leaves.
    private func finishJoining(_ consumer: KafkaConsumer) async {
        guard !consumer.hasJoined else { return }
        let deadline = ContinuousClock.now + options.joinWaitOnStop
        logger.info("Stopping before the first assignment: finishing the join so as to leave the group cleanly")
        while ContinuousClock.now < deadline, !consumer.hasJoined {
            // Drives the join. A message fetched meanwhile is not processed: no offset is stored
            // for it, so its partition's next owner consumes it.
            _ = try? await consumer.poll(maxMessages: 1, timeout: .milliseconds(100))
            if let assigned = try? consumer.assignment(), !assigned.isEmpty { try? consumer.pause(assigned) }
        }
    }

    private func rebalanceLog(_ consumer: KafkaConsumer) async {
        for await event in consumer.rebalanceEvents {
            if case .assigned(let partitions) = event {
                logger.info("Partitions assigned", metadata: ["partitions": "\(partitions)"])
            }
        }
    }

    // MARK: Shutdown

    private func drain(consumer: KafkaConsumer, store: NotificationStore) async {
        let deadline = ContinuousClock.now + options.shutdownTimeout
        // Held notifications are not claimed: hand them back.
        state.withLock { s in
            s.inFlight -= s.held.count + s.unclaimed.count + s.unpark { _ in true }.count
            s.held.removeAll()
            s.unclaimed.removeAll()
        }
        let pools = state.withLock { Array($0.pools.values) }
        logger.info("Draining", metadata: ["inFlight": "\(state.withLock { $0.inFlight })", "pools": "\(pools.count)"])
        await withTaskGroup(of: Void.self) { group in
            for pool in pools {
                group.addTask { await pool.shutdown(gracePeriod: max(.seconds(1), deadline - .now)) }
            }
        }
        // Wait for the writer to write what the pools reported.
        let remaining = deadline - .now
        let drained = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let done = self.state.withLock { s -> Bool in
                        if s.inFlight <= 0 { return true }
                        s.drainWaiters.append(continuation)
                        return false
                    }
                    if done { continuation.resume() }
                }
                return true
            }
            group.addTask {
                try? await Task.sleep(for: max(.milliseconds(100), remaining))
                return false
            }
            let first = await group.next() ?? false
            if !first {
                // Release the drain waiter so the group can finish.
                let waiters = self.state.withLock { s in defer { s.drainWaiters.removeAll() }; return s.drainWaiters }
                waiters.forEach { $0.resume() }
            }
            group.cancelAll()
            return first
        }
        if !drained {
            logger.warning("Shutdown timeout reached with notifications in flight; their messages will be consumed again",
                           metadata: ["inFlight": "\(state.withLock { $0.inFlight })"])
        }
        // The written positions of everything finished, before the partitions are handed on.
        let marks = state.withLock { $0.pendingMarks() }
        if !marks.isEmpty {
            do {
                try await store.write(records: [], unregistered: [], released: [], positions: marks, ttlSeconds: options.dedupeTTLSeconds)
                state.withLock { s in for mark in marks { s.writtenMarks[mark.topicPartition] = mark.offset } }
            } catch {
                logger.warning("Cannot store the written positions; the next owners may write some results again", metadata: ["error": "\(error.message)"])
            }
        }
        await commit(consumer)
        await finishJoining(consumer)
        do { try await consumer.close() } catch { logger.warning("Cannot leave the consumer group cleanly", metadata: ["error": "\(error)"]) }
    }

    // MARK: Liveness

    private func heartbeatLoop(_ store: NotificationStore) async {
        let ttl = Int(options.livenessTTL.components.seconds * 1000)
        while !Task.isCancelled {
            do {
                try await store.heartbeat(ttlMilliseconds: ttl)
                state.withLock { $0.redisDown = false }
            } catch {
                logger.warning("Cannot refresh the liveness key", metadata: ["error": "\(error.message)"])
                state.withLock { $0.redisDown = true }
                try? await store.redis.reconnect()
            }
            do { try await Task.sleep(for: options.livenessTTL / 5) } catch { return }
        }
    }

    // MARK: Feedback

    private func feedbackLoop(app: String, environment: APNSEnvironment, configuration: APNSFeedbackClient.Configuration,
                              interval: Duration, store: NotificationStore, producer: KafkaProducer) async {
        let lockTTL = Int(interval.components.seconds * 1000) + Int(interval.components.attoseconds / 1_000_000_000_000_000)
        while !Task.isCancelled {
            do {
                if try await store.tryFeedbackLock(app: app, environment: environment.rawValue, ttlMilliseconds: max(1000, lockTTL)) {
                    try await pollFeedback(app: app, environment: environment, configuration: configuration, store: store, producer: producer)
                }
            } catch {
                logger.warning("Feedback polling failed", metadata: ["app": "\(app)", "env": "\(environment)", "error": "\(error)"])
            }
            do { try await Task.sleep(for: interval) } catch { return }
        }
    }

    private func pollFeedback(app: String, environment: APNSEnvironment, configuration: APNSFeedbackClient.Configuration,
                              store: NotificationStore, producer: KafkaProducer) async throws {
        let client = try APNSFeedbackClient(configuration: configuration, logger: logger)
        let tuples = try await client.fetch()
        guard !tuples.isEmpty else { return }
        let worker = options.workerId
        let now = Self.nowMilliseconds()
        try await store.write(records: [], unregistered: tuples.map { (app, environment.rawValue, $0.token.hex, Int64($0.timestamp)) },
                              released: [], ttlSeconds: options.dedupeTTLSeconds)
        var messages: [KafkaOutgoingMessage] = []
        for tuple in tuples {
            let token = tuple.token.hex
            let result = WorkerResult(kind: .feedback,
                                      resultId: WorkerResult.feedbackId(app: app, environment: environment.rawValue, token: token, timestamp: Int64(tuple.timestamp)),
                                      app: app, environment: environment.rawValue, token: token, timestamp: Int64(tuple.timestamp),
                                      worker: worker, at: now)
            messages.append(KafkaOutgoingMessage(topic: options.resultsTopic, key: result.key, value: result.serialized()))
        }
        var pending = messages
        while !pending.isEmpty {
            let reports = try await producer.send(pending)
            pending = zip(pending, reports).compactMap { message, report in
                if case .failure = report { return message } else { return nil }
            }
            if !pending.isEmpty { try await Task.sleep(for: .milliseconds(200)) }
        }
        state.withLock { $0.statistics.feedback += tuples.count }
        logger.info("Feedback read", metadata: ["app": "\(app)", "env": "\(environment)", "tokens": "\(tuples.count)"])
    }

    static func nowMilliseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }
}

/// Counters of one worker.
public struct WorkerStatistics: Sendable, CustomStringConvertible {
    public var messages = 0
    public var notifications = 0
    public var rejected = 0
    public var results = 0
    public var duplicates = 0
    public var reemitted = 0
    public var takenOver = 0
    /// Notifications consumed again whose results were already written (no result produced).
    public var alreadyWritten = 0
    public var feedback = 0
    /// Redis round trips of both connections (set when the worker stops).
    public var redisRoundTrips = 0

    public var description: String {
        "messages=\(messages) notifications=\(notifications) rejected=\(rejected) results=\(results) duplicates=\(duplicates) reemitted=\(reemitted) alreadyWritten=\(alreadyWritten) takenOver=\(takenOver) feedback=\(feedback) redisRoundTrips=\(redisRoundTrips)"
    }
}

/// A failure that stops the worker, with a sentence a person can act on.
public struct WorkerError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
