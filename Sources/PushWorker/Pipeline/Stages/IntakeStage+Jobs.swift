import APNSCore
import PushConfiguration
import PushKafka

/// One job into results and candidates: read (``JobParser``), checked against its app
/// (``check(_:timestamp:)``), then either refused, every token one `invalidJob` result
/// (``refuse(_:because:environment:app:from:into:)``), or expanded, a candidate per valid token
/// (``expand(_:app:environment:timestamp:value:from:into:)``). Every rejected token's result is
/// made by one ``Rejection``.
extension IntakeStage {
    /// The message a job came in, as its results name it.
    struct JobSource {
        let message: KafkaMessage
        let ref: MessageRef
        /// When it was parsed (UNIX ms): its results' time.
        let now: Int64
        /// The tokens a parked record still owes; `nil`: all of the job's.
        var owed: Set<String>? = nil

        /// `<topic>[<partition>]@<offset>`, for log lines.
        var place: String { "\(message.topic)[\(message.partition)]@\(message.offset)" }

        func owes(_ token: String) -> Bool { owed?.contains(token) ?? true }
    }

    /// Who a job's rejected tokens' results name: one per token, each with its status and
    /// reason.
    struct Rejection {
        let jobId: String
        let app: String?
        let environment: String?
        let metadata: [UInt8]?
        let broadcast: Bool

        init(jobId: String, app: String?, environment: String?, metadata: [UInt8]?, broadcast: Bool) {
            (self.jobId, self.app, self.environment) = (jobId, app, environment)
            (self.metadata, self.broadcast) = (metadata, broadcast)
        }

        init(_ job: Job, environment: String?) {
            self.init(
                jobId: job.id,
                app: job.app,
                environment: environment,
                metadata: job.metadata,
                broadcast: job.broadcast
            )
        }

        func result(
            _ token: String,
            _ status: APNSStatus,
            _ reason: String,
            from source: JobSource,
            factory: ResultFactory
        ) -> ResultItem {
            factory.rejected(
                source.ref,
                jobId: jobId,
                app: app,
                environment: environment,
                token: token,
                status: status,
                reason: reason,
                metadata: metadata,
                broadcast: broadcast,
                at: source.now
            )
        }
    }

    /// What ``check(_:timestamp:)`` finds of a job.
    enum JobCheck {
        /// The job cannot be sent: each token gets `reason`. `app`, when the job's app is
        /// known, says whether the rejection is a dry run's.
        case refused(reason: String, environment: String?, app: WorkerConfiguration.App?)
        case admitted(app: WorkerConfiguration.App, environment: APNSEnvironment)
    }

    /// Parses one job, `value`; of a parked record (``JobSource/owed``), only the tokens it owes.
    func parseJob(_ value: [UInt8], from source: JobSource, into chunk: inout Chunk) {
        let timestamp = MessageTimestamp(source.message)
        switch parser.parse(value, producedAt: timestamp.known) {
        case .unreadable(let jobId, let app, let reason, let metadata):
            logger.warning("Rejected message \(source.place): \(reason).")
            chunk.results.append(
                factory.invalidJob(
                    source.ref,
                    jobId: jobId,
                    app: app,
                    reason: reason,
                    metadata: metadata,
                    at: source.now
                )
            )
        case .rejected(let jobId, let app, let tokens, let reason, let metadata, let broadcast):
            logger.warning("Rejected job \(jobId) at \(source.place): \(reason).")
            let rejection = Rejection(
                jobId: jobId,
                app: app,
                environment: nil,
                metadata: metadata,
                broadcast: broadcast
            )
            for token in tokens where source.owes(token) {
                chunk.results.append(rejection.result(token, .invalidJob, reason, from: source, factory: factory))
            }
        case .job(var job):
            // A job's summary never moves aside (``ClaimStage``): a parked record has none.
            if source.owed != nil { job.summary = false }
            #if APN_WORKER_TEST_HOOKS
            TestHooks.parsed(job: job.id)
            #endif
            switch check(job, timestamp: timestamp) {
            case .refused(let reason, let environment, let app):
                refuse(job, because: reason, environment: environment, app: app, from: source, into: &chunk)
            case .admitted(let app, let environment):
                expand(
                    &job,
                    app: app,
                    environment: environment,
                    timestamp: timestamp,
                    value: value,
                    from: source,
                    into: &chunk
                )
            }
        }
    }

    /// Whether `job` can be sent by its app and environment, and by which.
    func check(_ job: Job, timestamp: MessageTimestamp) -> JobCheck {
        if let problem = timestamp.problem {
            return .refused(reason: problem, environment: job.environment, app: nil)
        }
        guard let settings = apps[job.app] else {
            let configured = apps.keys.sorted().joined(separator: ", ")
            return .refused(
                reason: "app \"\(job.app.abbreviated())\" is not configured; configured apps: \(configured)",
                environment: job.environment,
                app: nil
            )
        }
        let app = settings.app
        let environment = job.environment.flatMap(APNSEnvironment.init(rawValue:)) ?? app.defaultEnvironment
        func refused(_ reason: String) -> JobCheck {
            .refused(reason: reason, environment: environment.rawValue, app: app)
        }
        guard app.environments.index(forKey: environment) != nil else {
            return refused("app \"\(job.app)\" has no \(environment) environment configured")
        }
        // §3.3: an MDM notification's apns-topic is the MDM certificate's, which only the app's configuration knows.
        if job.notification.mdm != nil && app.transport == .http2 && app.mdmTopic == nil {
            return refused(
                "app \"\(job.app)\" sends over HTTP/2 and has no mdmTopic: set apps.\(job.app).mdmTopic to the topic of the "
                    + "MDM push certificate (com.apple.mgmt.External.<UUID>) to send MDM notifications"
            )
        }
        if job.channelAction != nil && app.transport != .http2 {
            return refused(
                "broadcast channels are part of the HTTP/2 API, and app \"\(job.app)\" is delivered over the binary protocol; configure it with transport http2"
            )
        }
        if let reason = Self.refusal(of: job, app: app, environment: environment) {
            return refused(reason)
        }
        return .admitted(app: app, environment: environment)
    }

    /// Every token the job owes gets an `invalidJob` result; a channel job (no tokens), one
    /// for its message.
    private func refuse(
        _ job: Job,
        because reason: String,
        environment: String?,
        app: WorkerConfiguration.App?,
        from source: JobSource,
        into chunk: inout Chunk
    ) {
        expectSummary(of: job, environment: environment, dryRun: job.dryRun || app?.dryRun == true, source, &chunk)
        logger.warning("Rejected job \(job.id) at \(source.place): \(reason).")
        if job.channelAction != nil {
            chunk.results.append(
                factory.invalidJob(
                    source.ref,
                    jobId: job.id,
                    app: job.app,
                    reason: reason,
                    metadata: job.metadata,
                    at: source.now
                )
            )
            return
        }
        let rejection = Rejection(job, environment: environment)
        for token in job.tokens where source.owes(token.text) {
            chunk.results.append(rejection.result(token.text, .invalidJob, reason, from: source, factory: factory))
        }
    }

    /// A candidate per valid token the job owes; a result for each malformed one, and for every
    /// token when the payload cannot be sent.
    private func expand(
        _ job: inout Job,
        app: WorkerConfiguration.App,
        environment: APNSEnvironment,
        timestamp: MessageTimestamp,
        value: [UInt8],
        from source: JobSource,
        into chunk: inout Chunk
    ) {
        var payloadError = job.payloadError
        if payloadError == nil, job.dryRun || app.dryRun, app.transport == .http2 {
            // What the HTTP/2 client checks before it sends (§3.3, §5), which a dry run never reaches.
            payloadError = Self.http2Problem(of: job.notification, app: app, environment: environment)
        }
        let shared = SharedJob(
            taking: &job,
            environment: environment,
            app: app,
            producedAt: timestamp.known ?? source.now,
            urgent: source.message.topic == urgentTopic,
            source: parkedTopic == nil ? nil : value
        )
        expectSummary(of: job, environment: environment.rawValue, dryRun: shared.dryRun, source, &chunk)
        let rejection = Rejection(job, environment: environment.rawValue)
        for token in job.tokens where source.owes(token.text) {
            switch token {
            case .malformed(let text, let reason):
                chunk.results.append(rejection.result(text, .malformedToken, reason, from: source, factory: factory))
            case .valid(let deviceToken, let hex):
                if let payloadError {
                    chunk.results.append(
                        rejection.result(hex, .invalidPayload, payloadError, from: source, factory: factory)
                    )
                } else {
                    chunk.candidates.append(
                        candidate(shared, token: deviceToken, hex: hex, environment: environment, from: source)
                    )
                }
            }
        }
        if let payloadError {
            logger.warning("Job \(job.id) at \(source.place) cannot be sent: \(payloadError).")
        }
    }

    /// One device's (or channel's) notification of a job.
    private func candidate(
        _ job: SharedJob,
        token: DeviceToken,
        hex: String,
        environment: APNSEnvironment,
        from source: JobSource
    ) -> Candidate {
        let resultId =
            if job.channelAction != nil {
                WorkerResult.channelJobId(jobId: job.jobId)
            } else if job.dryRun {
                WorkerResult.dryRunId(jobId: job.jobId, token: hex)
            } else {
                WorkerResult.notificationId(jobId: job.jobId, token: hex)
            }
        return Candidate(
            ref: source.ref,
            job: job,
            token: token,
            tokenHex: hex,
            resultId: resultId,
            activity: job.activity?.mark.map { mark in
                latestWins.enter(
                    ActivityFacts.key(app: job.app, environment: environment, target: hex),
                    mark: mark,
                    jobID: job.jobId
                )
            }
        )
    }

    /// A summary awaited for `job`, if it asked for one.
    private func expectSummary(
        of job: Job,
        environment: String?,
        dryRun: Bool,
        _ source: JobSource,
        _ chunk: inout Chunk
    ) {
        guard job.summary else { return }
        chunk.summaries.append(
            (source.ref, PendingSummary(job: job, environment: environment, ref: source.ref, dryRun: dryRun))
        )
    }
}
