import APNSBinary
import APNSCore
import APNSHTTP2
import Dispatch
import Logging
import PushConfiguration
import PushKafka
import Synchronization

/// The third stage: one delivery pool per (app, environment), created on first use, and one
/// reader of each pool's events. Claimed notifications go in tagged; each outcome comes back as
/// a result for the result stage, and whether a pool can take notifications goes to the ledger
/// (``WaitingNotifications``), with a signal to the claim stage.
///
/// Apps with `environmentFallback` (`docs/jobs.md`, "Environment"): a notification whose token
/// has a remembered environment goes straight to that environment's pool, and one refused with
/// `BadDeviceToken` (binary status 8) goes once to the other environment's pool, under the same
/// claim, before its outcome becomes a result.
///
/// A credential reload replaces an (app, environment)'s pool (``replacePool(_:)``): the new
/// one takes every notification from then on, the old one finishes what it holds and closes.
final class DeliveryStage: Sendable {
    struct State {
        var pools: [PoolKey: any APNSDeliveryClient] = [:]
        /// Pools replaced by a credential reload that are still finishing what they hold.
        var retiring: [any APNSDeliveryClient] = []
        /// What each notification in a pool needs to become a result, by tag.
        var sent = TagTable<SentContext>()
        /// Outcomes each pool delivered, since it was first made.
        var outcomes: [PoolKey: Int] = [:]
        /// Which pools are stalled (``judgeStalls(at:)``).
        var judge: PoolStallJudge
        var stopping = false
    }

    /// A pool as it opens, for ``run()`` to read its events; or as it is replaced, for
    /// ``run()`` to shut it down.
    private enum PoolChange: Sendable {
        case opened(PoolKey, any APNSDeliveryClient)
        case retired(PoolKey, any APNSDeliveryClient)
    }

    let state: Mutex<State>
    let pools: PoolSettingsStore
    /// How long a replaced pool may take to finish what it holds.
    private let drainTimeout: Duration
    private let results: ResultStage
    let claimSignals: AsyncStream<ClaimStage.Signal>.Continuation
    /// Where the pools that cannot take notifications are kept, with what waits for them.
    let ledger: SharedLedger
    private let factory: ResultFactory
    let control: PipelineControl
    let logger: Logger
    /// Pools as they are created and replaced, for ``run()`` to read.
    private let opened: AsyncStream<PoolChange>
    private let openedIn: AsyncStream<PoolChange>.Continuation
    /// Channel jobs go to the channel management API instead of a pool.
    private let channelActions: ChannelActionStage
    /// The apps with `environmentFallback`, and where their tokens' environments are remembered.
    private let fallbackApps: Set<String>
    private let environments: NotificationStore?
    /// Notifications refused in one environment, on their way to the other (read by ``run()``,
    /// so that no pool's reader waits for another pool's room).
    private let redirects: AsyncStream<[SentContext]>
    private let redirectsIn: AsyncStream<[SentContext]>.Continuation

    init(
        pools: PoolSettingsStore,
        drainTimeout: Duration,
        results: ResultStage,
        claimSignals: AsyncStream<ClaimStage.Signal>.Continuation,
        ledger: SharedLedger,
        factory: ResultFactory,
        control: PipelineControl,
        logger: Logger,
        fallbackApps: Set<String> = [],
        environments: NotificationStore? = nil,
        stallBound: Int = PoolStallJudge.least(forMaxInFlight: 20_000)
    ) {
        state = Mutex(State(judge: PoolStallJudge(least: stallBound)))
        self.fallbackApps = fallbackApps
        self.environments = environments
        (redirects, redirectsIn) = AsyncStream.makeStream()
        self.pools = pools
        self.drainTimeout = drainTimeout
        self.results = results
        self.claimSignals = claimSignals
        self.ledger = ledger
        self.factory = factory
        self.control = control
        self.logger = logger
        (opened, openedIn) = AsyncStream.makeStream()
        channelActions = ChannelActionStage(pools: pools, results: results, factory: factory, logger: logger)
    }

    /// Each open pool's state and counters, with its transport.
    func snapshots() -> [(key: PoolKey, transport: String, snapshot: APNSPoolSnapshot)] {
        let open = state.withLock { $0.pools }
        let settings = pools.all
        return open.map { key, client in (key, Self.transportLabel(key, settings[key]), client.snapshot()) }
            .sorted { ($0.key.app, $0.key.environmentName) < ($1.key.app, $1.key.environmentName) }
    }

    /// A pool's `transport` in metrics and the status: `binary`, `http2`, or `http2-broadcast`
    /// for the pool of an environment's broadcasts at its `broadcastGateway`.
    static func transportLabel(_ key: PoolKey, _ settings: PoolSettings?) -> String {
        guard let name = settings?.transport.name else { return "" }
        return key.broadcasts ? name + "-broadcast" : name
    }

    /// Opens the pools of the apps that keep connections open (`minConnections`) and starts
    /// them, then reads the events of every pool, each in a child task, until the pools are
    /// shut down.
    func run() async {
        let settings = pools.all
        for key in settings.keys.sorted(by: { ($0.app, $0.environment.rawValue) < ($1.app, $1.environment.rawValue) })
        where settings[key]?.transport.minConnections ?? 0 > 0 {
            do {
                try pool(for: key).start()
            } catch {
                logger.error("Cannot open the \(key.app) \(key.environmentName) pool", metadata: ["error": "\(error)"])
            }
        }
        await withDiscardingTaskGroup { group in
            group.addTask { await self.channelActions.run() }
            group.addTask {
                for await batch in self.redirects {
                    for (key, contexts) in Dictionary(grouping: batch, by: \.poolKey) {
                        await self.send(contexts, to: key)
                    }
                }
            }
            for await change in opened {
                switch change {
                case .opened(let key, let client):
                    group.addTask { await self.readEvents(of: client, key: key) }
                case .retired(let key, let client):
                    group.addTask { await self.retire(client, key: key) }
                }
            }
        }
    }

    /// Hands claimed notifications to their pool. A pool that cannot take them (shutting down,
    /// cannot be built) releases their claims: their messages are consumed again.
    func submit(_ notifications: [SentContext], to key: PoolKey) async {
        var notifications = notifications
        if notifications.contains(where: { $0.candidate.job.channelAction != nil }) {
            channelActions.enqueue(notifications.filter { $0.candidate.job.channelAction != nil })
            notifications.removeAll { $0.candidate.job.channelAction != nil }
            if notifications.isEmpty { return }
        }
        if fallbackApps.contains(key.app) {
            notifications = await redirectRemembered(notifications, from: key)
            if notifications.isEmpty { return }
        }
        await send(notifications, to: key)
    }

    /// Sends the notifications whose token has a remembered environment other than `key`'s to
    /// that environment's pool; returns the others. Without an answer from Redis, none is moved:
    /// the fallback still finds the token's environment.
    private func redirectRemembered(_ notifications: [SentContext], from key: PoolKey) async -> [SentContext] {
        guard let environments else { return notifications }
        let remembered: [String?]
        do {
            remembered = try await environments.rememberedEnvironments(
                app: key.app,
                tokens: notifications.map(\.candidate.tokenHex)
            )
        } catch {
            logger.debug("Cannot read remembered token environments", metadata: ["error": "\(error.message)"])
            return notifications
        }
        var stay: [SentContext] = []
        var moved: [SentContext] = []
        for (context, environment) in zip(notifications, remembered) {
            if let environment = environment.flatMap(APNSEnvironment.init), environment != key.environment,
                !context.candidate.job.broadcast
            {
                var redirected = context
                redirected.redirect = Redirect(environment: environment)
                moved.append(redirected)
            } else {
                stay.append(context)
            }
        }
        if !moved.isEmpty {
            countRedirects(moved.count, from: key, via: "remembered")
            await send(moved, to: PoolKey(app: key.app, environment: key.environment.other))
        }
        return stay
    }

    /// Counts notifications sent from the pool of `key` to the other environment's
    /// (`apn_worker_redirected_total`).
    private func countRedirects(_ count: Int, from key: PoolKey, via: String) {
        control.metrics.increment(
            MetricCatalogue.redirected,
            [key.app, key.environment.other.rawValue, via],
            by: count
        )
    }

    /// Hands notifications to the pool of `key`, or releases their claims when it cannot take them.
    private func send(_ notifications: [SentContext], to key: PoolKey) async {
        var submissions = state.withLock { s in
            notifications.map { context in
                APNSSubmission(
                    tag: s.sent.insert(context),
                    token: context.candidate.token,
                    content: context.candidate.job.content
                )
            }
        }
        // Jobs that give `apnsId`: the id per token, derived outside the lock; Live Activity
        // updates: their place among their activity's (latest wins) and chosen priority.
        for index in submissions.indices {
            let candidate = notifications[index].candidate
            if candidate.job.apnsId != nil { submissions[index].apnsID = candidate.job.apnsID(for: candidate.tokenHex) }
            if let activity = candidate.activity { submissions[index].activity = activity }
        }
        do {
            var client = try pool(for: key)
            while true {
                do {
                    try await client.send(submissions)
                    break
                } catch {
                    // Replaced by a credential reload while they waited for room: to the new pool.
                    guard let current = try? pool(for: key), current !== client else { throw error }
                    client = current
                }
            }
        } catch {
            logger.error(
                "Cannot hand notifications to the \(key.app) \(key.environmentName) pool",
                metadata: ["error": "\(error)"]
            )
            let released = state.withLock { s in submissions.compactMap { s.sent.remove($0.tag) } }
            results.submit(
                released.map {
                    .released($0.candidate.ref, resultId: $0.candidate.resultId, token: $0.candidate.tokenHex)
                }
            )
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
        guard let transport = pools[key]?.transport else {
            throw WorkerError("app \(key.app) has no \(key.environment) environment")
        }
        let created = try makePool(key, transport)
        let (client, isNew) = try state.withLock { s throws -> (any APNSDeliveryClient, Bool) in
            if s.stopping { throw APNSError(.shutDown, "the worker is stopping") }
            if let existing = s.pools[key] { return (existing, false) }
            s.pools[key] = created
            // Under the lock, so that no pool is opened after ``shutdown(gracePeriod:)`` ends the stream.
            openedIn.yield(.opened(key, created))
            return (created, true)
        }
        if isNew { logOpened(key, transport, "Opened a delivery pool") }
        return client
    }

    private func makePool(_ key: PoolKey, _ transport: DeliveryTransport) throws -> any APNSDeliveryClient {
        var logger = self.logger
        logger[metadataKey: "app"] = "\(key.app)"
        logger[metadataKey: "env"] = "\(key.environment)"
        switch transport {
        case .binary(let configuration): return try APNSBinaryClient(configuration: configuration, logger: logger)
        case .http2(let configuration): return try APNSHTTP2Client(configuration: configuration, logger: logger)
        }
    }

    private func logOpened(_ key: PoolKey, _ transport: DeliveryTransport, _ message: Logger.Message) {
        if !transport.verifiesServer {
            logger.warning(
                "\(WorkerConfiguration.insecureTLSWarning(app: key.app, environment: key.environment))",
                metadata: ["app": "\(key.app)", "env": "\(key.environmentName)", "gateway": "\(transport.endpoint)"]
            )
        }
        logger.info(
            message,
            metadata: [
                "app": "\(key.app)", "env": "\(key.environmentName)", "gateway": "\(transport.endpoint)",
                "transport": "\(transport.name)", "connections": "\(transport.maxConnections)",
                "proxy": "\(transport.proxyDescription)",
            ]
        )
    }

    /// Replaces the pool of `key`, if it has one, by a pool made with the settings now in
    /// force (after a credential reload): notifications go to the new pool from now on; the
    /// old one finishes what it holds (within the drain timeout) and closes its connections.
    /// What the old pool gives back unsent goes to the new one. Without a pool yet, the
    /// first one is made with the new settings anyway.
    func replacePool(_ key: PoolKey) {
        guard let transport = pools[key]?.transport else { return }
        let created: any APNSDeliveryClient
        do {
            created = try makePool(key, transport)
        } catch {
            logger.error(
                "Cannot open the \(key.app) \(key.environmentName) pool with the reloaded credentials",
                metadata: ["error": "\(error)"]
            )
            return
        }
        let replaced = state.withLock { s in
            guard !s.stopping, let old = s.pools[key] else { return false }
            s.pools[key] = created
            s.retiring.append(old)
            openedIn.yield(.opened(key, created))
            openedIn.yield(.retired(key, old))
            s.judge.forget(key)
            return true
        }
        guard replaced else { return }
        // The old pool's unreachability and stall are not the new one's, which shows its own.
        if ledger.update({ $0.poolReplaced(key) }) { claimSignals.yield(.available(key)) }
        if transport.minConnections > 0 { created.start() }
        logOpened(key, transport, "Opened a delivery pool with the reloaded credentials")
    }

    /// Shuts down a pool replaced by ``replacePool(_:)``; its reader goes on until its last
    /// event, then forgets it.
    private func retire(_ client: any APNSDeliveryClient, key: PoolKey) async {
        await client.shutdown(gracePeriod: drainTimeout)
        logger.info(
            "The replaced delivery pool finished what it held and closed",
            metadata: ["app": "\(key.app)", "env": "\(key.environmentName)"]
        )
    }

    /// Whether `client` was replaced by a credential reload (and the worker is not stopping).
    private func isRetired(_ client: any APNSDeliveryClient) -> Bool {
        state.withLock { s in !s.stopping && s.retiring.contains { $0 === client } }
    }

    /// Turns a pool's outcomes into results, in batches.
    private func readEvents(of client: any APNSDeliveryClient, key: PoolKey) async {
        while let events = await client.nextEvents(max: 1024) {
            // The outcomes taken out once: an event's `outcome` is a copy of every field.
            var outcomes: [APNSDeliveryOutcome] = []
            outcomes.reserveCapacity(events.count)
            var others: [APNSDeliveryEvent] = []
            for event in events {
                switch event {
                case .transmitted(let outcome), .transmissionError(let outcome): outcomes.append(outcome)
                default: others.append(event)
                }
            }
            var contexts = state.withLock { s in
                s.outcomes[key, default: 0] += outcomes.count
                return outcomes.map { s.sent.remove($0.tag) }
            }
            countLiveActivities(outcomes, contexts)
            let retired = isRetired(client)
            // A replaced pool gives back what it never wrote: to the pool in force.
            var resend: [SentContext] = []
            if retired {
                for index in outcomes.indices
                where outcomes[index].status == .shutDown && !outcomes[index].possibleDuplicate {
                    if let context = contexts[index], !context.takeover {
                        resend.append(context)
                        contexts[index] = nil
                    }
                }
            }
            let made = Self.results(of: outcomes, contexts: contexts, factory: factory, fallbackApps: fallbackApps)
            var items = made.items
            let (feedback, redirected) = (made.feedback, made.redirects)
            if feedback > 0 { control.count { $0.feedback += feedback } }
            if !redirected.isEmpty {
                countRedirects(redirected.count, from: key, via: "fallback")
                if case .terminated = redirectsIn.yield(redirected) {
                    // Stopped: given back as at a pool's shutdown; one taken over from a dead
                    // worker, which may have delivered it, keeps its claim for the next owner.
                    items += redirected.map { context in
                        let c = context.candidate
                        return context.takeover
                            ? .handedBack(c.ref, resultId: c.resultId)
                            : .released(c.ref, resultId: c.resultId, token: c.tokenHex)
                    }
                }
            }
            if control.metrics.isEnabled {
                let now = DispatchTime.now().uptimeNanoseconds
                var latencies: [Int64] = []
                latencies.reserveCapacity(outcomes.count)
                for outcome in outcomes {
                    if let writtenAt = outcome.writtenAt, now >= writtenAt { latencies.append(Int64(now - writtenAt)) }
                }
                let labels = [key.app, key.environment.rawValue, Self.transportLabel(key, pools[key])]
                control.metrics.observe(MetricCatalogue.deliveryLatency, labels, nanoseconds: latencies)
            }
            results.submit(items)
            if !resend.isEmpty { await submit(resend, to: key) }
            for event in others {
                // A replaced pool's reachability is not its app's: the pool in force reports that.
                if retired, case .unavailable = event { continue }
                if retired, case .available = event { continue }
                report(event, key: key)
            }
        }
        state.withLock { s in s.retiring.removeAll { $0 === client } }
    }

    /// The results of a batch of outcomes whose contexts were looked up; no I/O. Returns how
    /// many `feedback` results (HTTP/2 410s) are among them, and the notifications of
    /// `fallbackApps` to send once more, in the other environment (refused with `BadDeviceToken`
    /// or binary status 8 where they were sent first): they get no result yet.
    static func results(
        of outcomes: [APNSDeliveryOutcome],
        contexts: [SentContext?],
        factory: ResultFactory,
        fallbackApps: Set<String> = []
    ) -> (items: [ResultItem], feedback: Int, redirects: [SentContext]) {
        var items: [ResultItem] = []
        items.reserveCapacity(outcomes.count)
        var redirects: [SentContext] = []
        var feedback = 0
        let at = factory.now()
        for (outcome, context) in zip(outcomes, contexts) {
            guard let context else { continue }
            if outcome.status == .shutDown {
                let candidate = context.candidate
                if outcome.possibleDuplicate || context.takeover {
                    // Maybe written before: the claim stays for the next owner to take over.
                    items.append(.handedBack(candidate.ref, resultId: candidate.resultId))
                } else {
                    // Never written: the notification is given back.
                    items.append(.released(candidate.ref, resultId: candidate.resultId, token: candidate.tokenHex))
                }
                continue
            }
            let item: ResultItem
            if !fallbackApps.isEmpty, fallbackApps.contains(context.candidate.job.app) {
                let fallback = Self.fallback(outcome, context: context, factory: factory, at: at)
                if let redirect = fallback.redirect {
                    redirects.append(redirect)
                    continue
                }
                item = fallback.item ?? factory.delivered(outcome, context: context, at: at)
            } else {
                item = factory.delivered(outcome, context: context, at: at)
            }
            if case .delivered(let record) = item, record.feedback != nil { feedback += 1 }
            items.append(item)
        }
        return (items, feedback, redirects)
    }

    /// What `environmentFallback` makes of an outcome: the notification to send in the other
    /// environment (the first refusal of its token), or the result (a redirected send's: the
    /// token's environment remembered when it was delivered; the refusal in the job's environment
    /// when it was refused in both), or neither: its result as usual.
    static func fallback(
        _ outcome: APNSDeliveryOutcome,
        context: SentContext,
        factory: ResultFactory,
        at: Int64
    ) -> (redirect: SentContext?, item: ResultItem?) {
        let c = context.candidate
        guard !c.job.broadcast else { return (nil, nil) }
        let refused =
            outcome.status == .invalidToken || (outcome.status == .badRequest && outcome.reason == "BadDeviceToken")
        guard let redirect = context.redirect, let first = redirect.firstRefusal,
            let firstEnvironment = redirect.firstEnvironment
        else {
            guard refused else { return (nil, nil) }
            // Refused where it was sent first: once more, in the other environment.
            let here = context.poolKey.environment
            var again = context
            again.redirect = Redirect(environment: here.other, firstRefusal: outcome, in: here)
            return (again, nil)
        }
        let memory = { (environment: APNSEnvironment?) in
            TokenEnvironment(app: c.job.app, token: c.tokenHex, environment: environment?.rawValue)
        }
        guard refused else {
            // The fallback's own outcome, counting the writes to both environments; delivered:
            // this is the token's environment.
            var outcome = outcome
            outcome.attempts += first.attempts
            let remember = outcome.isTransmitted ? memory(redirect.environment) : nil
            return (nil, factory.delivered(outcome, context: context, at: at, environment: remember))
        }
        // Refused in both: the refusal in the job's environment. The first was there unless the
        // token's remembered environment was tried first, which is then forgotten.
        if firstEnvironment == c.job.environment {
            var original = context
            original.redirect = nil
            return (nil, factory.delivered(first, context: original, at: at))
        }
        return (nil, factory.delivered(outcome, context: context, at: at, environment: memory(nil)))
    }

    private func report(_ event: APNSDeliveryEvent, key: PoolKey) {
        let app = "\(key.app)"
        switch event {
        case .connected(let connection):
            logger.debug("Gateway connection open", metadata: ["app": "\(app)", "connection": "\(connection)"])
        case .disconnected(let connection, let reason):
            logger.info(
                "Gateway connection closed",
                metadata: ["app": "\(app)", "connection": "\(connection)", "reason": "\(reason)"]
            )
        case .timeout(let connection, let reason):
            logger.warning(
                "Gateway connection timed out",
                metadata: ["app": "\(app)", "connection": "\(connection)", "reason": "\(reason)"]
            )
        case .socketError(let connection, let error):
            logger.warning(
                "Gateway socket error",
                metadata: ["app": "\(app)", "connection": "\(connection)", "error": "\(error)"]
            )
        case .error(let error):
            logger.warning("Delivery pool problem", metadata: ["app": "\(app)", "error": "\(error)"])
        case .unavailable(let reason):
            if ledger.update({ $0.poolUnreachable(key, true) }) { claimSignals.yield(.unavailable(key)) }
            logger.warning(
                "Gateway unreachable: this app's new notifications wait until it answers; other apps go on",
                metadata: ["app": "\(app)", "env": "\(key.environmentName)", "reason": "\(reason)"]
            )
        case .available:
            // A stalled pool stays blocked until it is judged able to deliver again.
            if ledger.update({ $0.poolUnreachable(key, false) }) { claimSignals.yield(.available(key)) }
        case .transmitted, .transmissionError:
            break
        }
    }

    // MARK: Revocation and shutdown

    /// Notifications of `selection` queued in a pool that cannot reach its gateway, or stalled: they cannot
    /// finish now, so a revocation does not wait for them (their outcome is recorded when the
    /// gateway answers; the partition's next owner waits for that claim and produces the result).
    func stuck(in selection: Set<TopicPartition>) -> Int {
        let blocked = ledger.read { $0.waiting.blockedPools }
        guard !blocked.isEmpty else { return 0 }
        return state.withLock { s in
            var stuck = 0
            s.sent.forEach { context in
                if selection.contains(context.candidate.ref.partition) && blocked.contains(context.poolKey) {
                    stuck += 1
                }
            }
            return stuck
        }
    }

    /// Stops opening pools and shuts every pool down; each finishes what it accepted (within
    /// `gracePeriod`) and its reader ends after its last event.
    func shutdown(gracePeriod: Duration) async {
        let pools = state.withLock { s in
            s.stopping = true
            openedIn.finish()
            return Array(s.pools.values) + s.retiring
        }
        channelActions.finish()
        await withTaskGroup(of: Void.self) { group in
            for pool in pools {
                group.addTask { await pool.shutdown(gracePeriod: gracePeriod) }
            }
        }
        // A notification refused after this is given back (``readEvents(of:key:)``).
        redirectsIn.finish()
    }

    var poolCount: Int { state.withLock { $0.pools.count } }
}
