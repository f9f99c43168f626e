import APNSCore
import APNSHTTP2
import Foundation

/// Builds every result a worker writes (`docs/results.md`), so that each kind is made in one
/// place: error results for bad input, final outcomes decided by the claim, pool outcomes, and
/// feedback.
struct ResultFactory: Sendable {
    /// The worker id results name.
    var worker: String
    /// Every result names the topic its job came from (`topic`): the worker reads priority lanes.
    var namesTopics = false
    /// UNIX milliseconds now; a parameter so that tests can fix it.
    var now: @Sendable () -> Int64 = UnixTime.nowMilliseconds

    /// `invalidJob` for a message that is not a job at all.
    func invalidJob(
        _ ref: MessageRef,
        jobId: String?,
        app: String?,
        reason: String,
        metadata: [UInt8]? = nil,
        at: Int64
    ) -> ResultItem {
        var result = WorkerResult(
            kind: .invalidJob,
            resultId: WorkerResult.invalidJobId(
                topic: ref.partition.topic,
                partition: ref.partition.partition,
                offset: ref.offset
            ),
            jobId: jobId,
            app: app,
            status: .invalidJob,
            reason: reason,
            topic: ref.partition.topic,
            partition: ref.partition.partition,
            offset: ref.offset,
            worker: worker,
            at: at
        )
        result.metadata = metadata
        return .rejected(ref, result.message())
    }

    /// A `transmissionError` for a notification that cannot be sent as given (rejected job,
    /// malformed token, invalid payload): produced, not recorded.
    func rejected(
        _ ref: MessageRef,
        jobId: String,
        app: String?,
        environment: String?,
        token: String,
        status: APNSStatus,
        reason: String,
        metadata: [UInt8]? = nil,
        broadcast: Bool = false,
        at: Int64
    ) -> ResultItem {
        var result = WorkerResult(
            kind: .transmissionError,
            resultId: WorkerResult.notificationId(jobId: jobId, token: token),
            jobId: jobId,
            app: app,
            environment: environment,
            token: token,
            status: status,
            reason: reason,
            attempts: 0,
            possibleDuplicate: false,
            worker: worker,
            at: at
        )
        result.metadata = metadata
        if namesTopics { result.topic = ref.partition.topic }
        if broadcast { result.addressToChannel() }
        return .rejected(ref, result.message())
    }

    /// A final `transmissionError` decided without sending (unregistered, rate-limited, expired):
    /// recorded, then produced.
    func decided(
        _ c: Candidate,
        status: APNSStatus,
        reason: String,
        verdict: TokenVerdict? = nil,
        supersededBy: String? = nil,
        at: Int64
    ) -> ResultItem {
        var result = WorkerResult(
            kind: .transmissionError,
            resultId: c.resultId,
            jobId: c.job.jobId,
            app: c.job.app,
            environment: c.job.environment.rawValue,
            token: c.tokenHex,
            status: status,
            reason: reason,
            attempts: 0,
            possibleDuplicate: false,
            worker: worker,
            at: at
        )
        result.tokenVerdict = verdict
        result.supersededBy = supersededBy
        return .decided(finished(&result, of: c))
    }

    /// The record of `c`'s result: the job's `metadata`, its topic when results name topics,
    /// its channel in place of the token for a broadcast.
    private func finished(_ result: inout WorkerResult, of c: Candidate) -> RecordedResult {
        result.metadata = c.job.metadata
        if namesTopics { result.topic = c.ref.partition.topic }
        if c.job.broadcast { result.addressToChannel() }
        return RecordedResult(
            ref: c.ref,
            resultId: c.resultId,
            fingerprint: c.fingerprint,
            token: c.tokenHex,
            result: result.message(since: c.job.producedAt)
        )
    }

    /// The result of a pool's outcome, made at `at` (UNIX ms; the outcomes of one batch share
    /// it). A binary status 8 or an HTTP/2 410 also stores the token as unregistered; a 410 is
    /// published as a `feedback` result too (§3.4). The result names the environment the
    /// notification was sent in, and says `redirected` when that is not its job's;
    /// `environment` is the token's environment to remember or forget with it.
    func delivered(
        _ outcome: APNSDeliveryOutcome,
        context: SentContext,
        at: Int64,
        environment memory: TokenEnvironment? = nil
    ) -> ResultItem {
        let c = context.candidate
        let env = context.poolKey.environment.rawValue
        var result = WorkerResult(
            kind: outcome.isTransmitted ? .transmitted : .transmissionError,
            resultId: c.resultId,
            jobId: c.job.jobId,
            app: c.job.app,
            environment: env,
            token: c.tokenHex,
            status: outcome.status,
            reason: outcome.status.map { outcome.reason ?? outcome.message ?? $0.reason },
            attempts: outcome.attempts,
            possibleDuplicate: outcome.possibleDuplicate || context.takeover,
            worker: worker,
            at: at
        )
        result.apnsId = outcome.apnsID
        result.apnsUniqueId = outcome.apnsUniqueID
        // Superseded in the pool: the newest update of its activity, which its ticket still knows.
        if outcome.status == .superseded { result.supersededBy = c.activity?.replacement }
        result.metadata = c.job.metadata
        var accepted: AcceptedActivity? = nil
        if let activity = c.job.activity {
            if activity.autoPriority { result.priority = Int(c.activity?.priority ?? 10) }
            if outcome.isTransmitted, let ticket = c.activity {
                accepted = Self.accepted(ticket, activity, c, environment: env, at: at)
            }
        }
        if namesTopics { result.topic = c.ref.partition.topic }
        if let redirect = context.redirect, redirect.environment != c.job.environment { result.redirected = true }
        if c.job.broadcast { result.addressToChannel() }
        var unregister: Unregistration? = nil
        var feedback: ResultMessage? = nil
        // A channel is not a device: of the answers to a broadcast only `ChannelNotRegistered`
        // (§7.4: deleted, or never created) condemns its channel, remembered like a token.
        var verdict: TokenVerdict? = nil
        if c.job.broadcast {
            if outcome.reason == TokenVerdict.channelNotRegistered {
                verdict = TokenVerdict(reason: TokenVerdict.channelNotRegistered, since: at / 1000)
            }
        } else if outcome.status == .invalidToken {
            // Binary status 8 (§1.4).
            verdict = TokenVerdict(reason: TokenVerdict.invalidToken, since: at / 1000)
        } else if outcome.status == .gone {
            // HTTP/2 410 (§3.4): unregistered since its timestamp (ms), published like the
            // feedback service's news.
            let since = (outcome.unregisteredAt ?? at) / 1000
            verdict = TokenVerdict(reason: TokenVerdict.unregistered, since: since)
            feedback = self.feedback(app: c.job.app, environment: env, token: c.tokenHex, timestamp: since, at: at)
        } else if let reason = outcome.reason, TokenVerdict.permanentReasons.contains(reason) {
            // HTTP/2 400 BadDeviceToken, DeviceTokenNotForTopic (§3.4): never valid for this
            // app and environment.
            verdict = TokenVerdict(reason: reason, since: at / 1000)
        }
        if let verdict {
            unregister = Unregistration(app: c.job.app, environment: env, token: c.tokenHex, verdict: verdict)
            result.tokenVerdict = verdict
        }
        return .delivered(
            RecordedResult(
                ref: c.ref,
                resultId: c.resultId,
                fingerprint: c.fingerprint,
                token: c.tokenHex,
                result: result.message(since: c.job.producedAt),
                feedback: feedback,
                unregister: unregister,
                environment: memory,
                accepted: accepted,
                claimMark: context.claimMark
            )
        )
    }

    /// A Live Activity update Apple accepted, remembered until its `staleDate` (at most
    /// ``NotificationStore/acceptedActivityTTL``) so that no older one is sent after it.
    static func accepted(
        _ ticket: APNSActivityTicket,
        _ activity: ActivityFacts,
        _ c: Candidate,
        environment: String,
        at: Int64
    ) -> AcceptedActivity {
        let longest = NotificationStore.acceptedActivityTTL
        let ttl = activity.staleDate.map { min(longest, max(1, $0 - at / 1000)) } ?? longest
        return AcceptedActivity(
            app: c.job.app,
            environment: environment,
            target: c.tokenHex,
            mark: ticket.mark,
            jobId: c.job.jobId,
            ttlSeconds: ttl,
            ticket: ticket
        )
    }

    /// The result of a Live Activity update that a newer one of the same activity replaced
    /// before it was sent (status 522).
    func superseded(_ c: Candidate, by job: String, at: Int64) -> ResultItem {
        decided(
            c,
            status: .superseded,
            reason: "job \(job) has a newer update of this Live Activity; not sent",
            supersededBy: job,
            at: at
        )
    }

    /// A `dryRun` result: the notification was claimed (and counted against the rate limits) but
    /// not written to Apple. Recorded, then produced, like a decided outcome.
    func dryRun(_ c: Candidate, at: Int64) -> ResultItem {
        var result = WorkerResult(
            kind: .dryRun,
            resultId: c.resultId,
            jobId: c.job.jobId,
            app: c.job.app,
            environment: c.job.environment.rawValue,
            token: c.tokenHex,
            worker: worker,
            at: at
        )
        result.payloadBytes = c.job.content.payload?.count ?? 0
        return .decided(finished(&result, of: c))
    }

    /// A `feedback` result: the token was reported unregistered at `timestamp` (UNIX seconds).
    func feedback(app: String, environment: String, token: String, timestamp: Int64, at: Int64) -> ResultMessage {
        let result = WorkerResult(
            kind: .feedback,
            resultId: WorkerResult.feedbackId(app: app, environment: environment, token: token, timestamp: timestamp),
            app: app,
            environment: environment,
            token: token,
            timestamp: timestamp,
            worker: worker,
            at: at
        )
        return result.message()
    }
}

/// Channel jobs (`docs/results.md`, "channel").
extension ResultFactory {
    /// The result of a channel job Apple answered (`created` is a create's new channel ID) or
    /// that failed: type `channel`, or `transmissionError` with Apple's status and reason (515
    /// `connectionFailed` when no answer came). Recorded, then produced, like a pool's outcome.
    func channel(
        _ context: SentContext,
        action: ChannelAction,
        outcome: Result<String?, APNSChannelError>,
        at: Int64
    ) -> ResultItem {
        let c = context.candidate
        var result = WorkerResult(
            kind: .channel,
            resultId: c.resultId,
            jobId: c.job.jobId,
            app: c.job.app,
            environment: c.job.environment.rawValue,
            token: nil,
            attempts: 1,
            possibleDuplicate: context.takeover,
            worker: worker,
            at: at
        )
        result.action = action.name
        if case .create(let policy) = action { result.storagePolicy = policy.name }
        result.channel = c.tokenHex.isEmpty ? nil : c.tokenHex
        var record: ChannelRecord? = nil
        switch outcome {
        case .success(let created):
            if let created { result.channel = created }
            if let channel = result.channel {
                var policy: APNSChannelStoragePolicy? = nil
                if case .create(let created) = action { policy = created }
                record = ChannelRecord(
                    app: c.job.app,
                    environment: c.job.environment.rawValue,
                    channel: channel,
                    policy: policy
                )
            }
        case .failure(let error):
            result.kind = .transmissionError
            result.status = error.status == 0 ? .connectionFailed : APNSStatus(rawValue: error.status)
            // Apple's reason as it gave it, as for notifications; the channel limit as its sentence.
            let sentence = error.reason.isEmpty || error.reason == "CannotCreateChannelConfig"
            result.reason = sentence ? error.description : error.reason
        }
        result.metadata = c.job.metadata
        if namesTopics { result.topic = c.ref.partition.topic }
        return .delivered(
            RecordedResult(
                ref: c.ref,
                resultId: c.resultId,
                fingerprint: c.fingerprint,
                token: c.tokenHex,
                result: result.message(since: c.job.producedAt),
                channel: record,
                claimMark: context.claimMark
            )
        )
    }
}

extension WorkerResult {
    /// A broadcast's result names its channel (the text in ``token``) as `channel` instead.
    mutating func addressToChannel() {
        channel = token
        token = nil
    }
}
