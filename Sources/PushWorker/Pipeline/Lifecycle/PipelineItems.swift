import APNSCore
import PushConfiguration
import PushKafka

// The values that travel between the worker's stages (see `docs/architecture.md`).

/// Where a notification came from: one Kafka message.
struct MessageRef: Hashable, Sendable {
    var partition: TopicPartition
    var offset: Int64
    /// The consumer's rebalance generation when the message was fetched
    /// (``KafkaMessage/rebalanceGeneration``): which ownership of its partition it belongs to.
    /// Part of its identity: a completion or a summary count from an earlier ownership of a
    /// partition does not count for the current one (``OffsetTracker``, the job summaries).
    /// ``isSameMessage(as:)`` compares the message alone.
    var epoch: UInt64 = 0

    /// Whether both refer to the same Kafka message, of whichever ownership.
    func isSameMessage(as other: MessageRef) -> Bool { offset == other.offset && partition == other.partition }
}

/// One delivery pool: an (app, environment), or the broadcasts of one when they go to a
/// gateway of their own (`broadcastGateway`).
struct PoolKey: Hashable, Sendable {
    var app: String
    var environment: APNSEnvironment
    /// The pool of the environment's broadcasts, at its `broadcastGateway` (§7.3).
    var broadcasts = false

    /// The environment as a pool's name says it: `production`, or `production+broadcast` for
    /// its broadcasts' own pool (parked records' keys, logs).
    var environmentName: String { broadcasts ? environment.rawValue + "+broadcast" : environment.rawValue }

    /// The key an ``environmentName`` names.
    init?(app: String, environmentName: String) {
        let broadcasts = environmentName.hasSuffix("+broadcast")
        guard let environment = APNSEnvironment(rawValue: String(environmentName.dropLast(broadcasts ? 10 : 0)))
        else { return nil }
        self.init(app: app, environment: environment, broadcasts: broadcasts)
    }

    init(app: String, environment: APNSEnvironment, broadcasts: Bool = false) {
        self.app = app
        self.environment = environment
        self.broadcasts = broadcasts
    }
}

extension APNSEnvironment {
    /// The other environment: where `environmentFallback` tries a token refused in this one.
    var other: APNSEnvironment { self == .production ? .sandbox : .production }
}

/// What the notifications of one job share (one allocation per job, not per token).
/// Its fields are ordered so that the few of one byte come last, where they pad nothing: one
/// is kept per notification in flight, in 128 bytes instead of 160.
final class SharedJob: Sendable {
    let jobId: String
    let app: String
    /// The Kafka timestamp of the job's message (UNIX ms).
    let producedAt: Int64
    /// The notification and its payload, handed to the pool by reference.
    let content: APNSSubmission.Content
    /// The app's rate limits (0: none), looked up once per job.
    let appPerSecond: Int
    let devicePerHour: Int
    /// The job's `metadata` as compact JSON, repeated in each of its results.
    let metadata: [UInt8]?
    /// The job's `apnsId`, and whether each token gets one derived from it (several tokens).
    let apnsId: String?
    let registeredAt: Int64?
    let environment: APNSEnvironment
    let derivesAPNSIDs: Bool
    /// The job or its app asks for a dry run: `dryRun` results instead of sending.
    let dryRun: Bool
    /// A broadcast whose environment has a `broadcastGateway`: it goes to the pool there.
    let ownBroadcastPool: Bool
    /// A channel job: carried out by the channel management API, not a pool.
    let channelAction: ChannelAction?
    /// The job's message as consumed, kept when notifications may move aside
    /// (``ParkedRecord``); `nil` otherwise.
    let source: [UInt8]?
    /// A Live Activity job's event, timestamp and priority rule; `nil` for every other job.
    let activity: ActivityFacts?

    /// Takes the job's notification, leaving an empty one in its place: the notification is
    /// a large value, and a copy of it (and the destruction of the job's) was about 3% of the
    /// worker's CPU.
    init(
        taking job: inout Job,
        environment: APNSEnvironment,
        app settings: WorkerConfiguration.App,
        producedAt: Int64,
        urgent: Bool = false,
        source: [UInt8]? = nil
    ) {
        self.source = source
        jobId = job.id
        app = job.app
        self.environment = environment
        registeredAt = job.registeredAt
        self.producedAt = producedAt
        // Saturating: a deadline past the end of time is no deadline.
        let staleAt = job.staleAfter.map { after -> Int64 in
            let (whole, overflow) = after.components.seconds.multipliedReportingOverflow(by: 1000)
            let milliseconds = whole &+ after.components.attoseconds / 1_000_000_000_000_000
            let (deadline, late) = producedAt.addingReportingOverflow(milliseconds)
            return overflow || late ? .max : deadline
        }
        var notification = APNSNotification()
        swap(&notification, &job.notification)
        content = APNSSubmission.Content(
            notification: notification,
            payload: job.payload,
            staleAt: staleAt,
            broadcast: job.broadcast,
            urgent: urgent
        )
        // A channel job sends nothing to devices: the send rate limits do not count it.
        appPerSecond = job.channelAction == nil ? settings.appPerSecond : 0
        devicePerHour = job.channelAction == nil ? settings.devicePerHour : 0
        metadata = job.metadata
        apnsId = job.apnsId
        derivesAPNSIDs = job.tokens.count > 1
        dryRun = job.dryRun || settings.dryRun
        ownBroadcastPool = job.broadcast && settings.environments[environment]?.broadcastGateway != nil
        channelAction = job.channelAction
        activity = job.liveActivity.map {
            ActivityFacts($0, highPriorityPerHour: settings.liveActivityHighPriorityPerHour)
        }
    }

    /// The `apns-id` to send to `token` (lower-case hex): the job's `apnsId` for a job of one
    /// token, one derived from it per token otherwise, `nil` (the client makes one) without it.
    func apnsID(for token: String) -> String? {
        guard let apnsId else { return nil }
        return derivesAPNSIDs ? JobAPNSID.derived(from: apnsId, token: token) : apnsId
    }

    var poolKey: PoolKey { PoolKey(app: app, environment: environment, broadcasts: ownBroadcastPool) }

    /// A broadcast: its candidates' tokens are channel IDs (§7.3).
    var broadcast: Bool { content.broadcast }
}

/// What latest wins and the priority budget need of a Live Activity job
/// (`docs/delivery.md`, "Latest wins"; `docs/jobs.md`, "Priority budget").
final class ActivityFacts: Sendable {
    let event: LiveActivity.Event
    /// `aps.timestamp` (UNIX seconds).
    let timestamp: Int64
    /// `aps.stale-date` (UNIX seconds): how long the newest accepted update is remembered.
    let staleDate: Int64?
    /// `"priority": "auto"` on an update without an alert: the app's
    /// `liveActivityHighPriorityPerHour`, the updates per activity sent at 10 before 5; 0 when
    /// the job keeps its priority (a start, an end, an update with an alert, no budget).
    let highPriorityPerHour: Int
    /// The job said `"priority": "auto"`: its results say which priority was sent.
    let autoPriority: Bool

    init(_ activity: LiveActivity, highPriorityPerHour: Int) {
        event = activity.event
        timestamp = activity.timestamp
        staleDate = activity.staleDate
        autoPriority = activity.autoPriority
        let budgeted = activity.autoPriority && activity.event == .update && !activity.hasAlert
        self.highPriorityPerHour = budgeted ? highPriorityPerHour : 0
    }

    /// What names a Live Activity in a worker's ``APNSLatestWins``: its app, environment and
    /// push token (or broadcast channel).
    static func key(app: String, environment: APNSEnvironment, target: String) -> String {
        app + "\u{0}" + environment.rawValue + "\u{0}" + target
    }

    /// Its place among its activity's updates; `nil` for a start, which begins an activity.
    var mark: APNSActivityMark? {
        event == .start ? nil : APNSActivityMark(end: event == .end, timestamp: timestamp)
    }
}

/// A notification on its way to be claimed. A class: it may wait in several lists (held,
/// parked), and copying a reference is cheaper than copying its fields.
final class Candidate: Sendable {
    let ref: MessageRef
    let job: SharedJob
    let token: DeviceToken
    let tokenHex: String
    let resultId: String
    /// What names it in Redis (``NotificationFingerprint``), computed once.
    let fingerprint: NotificationFingerprint
    /// A Live Activity update's place among its activity's updates in this worker.
    let activity: APNSActivityTicket?

    init(
        ref: MessageRef,
        job: SharedJob,
        token: DeviceToken,
        tokenHex: String,
        resultId: String,
        activity: APNSActivityTicket? = nil
    ) {
        self.ref = ref
        self.job = job
        self.token = token
        self.tokenHex = tokenHex
        self.resultId = resultId
        self.activity = activity
        fingerprint = NotificationFingerprint(resultId: resultId)
    }

    /// The rebalance generation its message was fetched at: a candidate fetched before its
    /// partition's revocation took effect is handed back instead of claimed (see ``ClaimStage``).
    var epoch: UInt64 { ref.epoch }

    var poolKey: PoolKey { job.poolKey }
}

extension Candidate: ClaimSubject {
    var partition: Int32 { ref.partition.partition }
    var offset: Int64 { ref.offset }
    var app: String { job.app }
    var environment: String { job.environment.rawValue }
    var registeredAt: Int64? { job.registeredAt }
    var appPerSecond: Int { job.appPerSecond }
    var devicePerHour: Int { job.devicePerHour }
}

/// A claimed notification in a pool: what its outcome needs to become a result.
struct SentContext: Sendable {
    var candidate: Candidate
    /// The claim was taken over from a dead worker: the result says `possibleDuplicate`.
    var takeover: Bool
    /// The liveness mark taken before the claim (``LivenessWatch/mark()``): the result says
    /// `possibleDuplicate` when this worker's liveness key may have expired since.
    var claimMark: UInt32 = 0
    /// Sent in another environment than its job's (`environmentFallback`); `nil`: in its job's.
    var redirect: Redirect? = nil

    /// The pool it is in (a broadcast is never redirected).
    var poolKey: PoolKey {
        guard let redirect else { return candidate.job.poolKey }
        return PoolKey(app: candidate.job.app, environment: redirect.environment)
    }
}

/// Where a notification of an app with `environmentFallback` is sent instead of its job's
/// environment, and why. A class: it is rare, and a reference keeps ``SentContext`` small.
final class Redirect: Sendable {
    /// The environment it is sent in now.
    let environment: APNSEnvironment
    /// Its refusal (`BadDeviceToken`, binary status 8) in the environment it was sent in first:
    /// this send is the one fallback. `nil`: sent here first, the token's remembered environment.
    let firstRefusal: APNSDeliveryOutcome?
    /// The environment of ``firstRefusal``.
    let firstEnvironment: APNSEnvironment?

    init(environment: APNSEnvironment, firstRefusal: APNSDeliveryOutcome? = nil, in first: APNSEnvironment? = nil) {
        self.environment = environment
        self.firstRefusal = firstRefusal
        self.firstEnvironment = first
    }
}

/// A token's environment to remember (``RedisKeys``, `e:`), or to forget (`environment` `nil`).
struct TokenEnvironment: Sendable {
    var app: String
    var token: String
    var environment: String?
}

/// One message for `apn.results`.
struct ResultMessage: Sendable {
    var key: [UInt8]?
    var value: [UInt8]
    /// What the metrics count it as; `nil` for a stored result produced again (the metrics
    /// read it from the value).
    var metric: ResultMetric? = nil
}

/// What a result counts as in the metrics. Small, with one reference (the app's name): result
/// items are copied from stage to stage, each with one or two of these.
struct ResultMetric: Sendable, Hashable {
    var kind: WorkerResult.Kind
    var possibleDuplicate = false
    var environment: APNSEnvironment?
    /// The result's status (its `statusName` is the label); `nil` for results without one.
    var status: APNSStatus?
    var app: String?
    /// The Kafka timestamp (UNIX ms) of the job's message, for the end-to-end latency; 0 when
    /// the result did not come from a claimed notification.
    var since: Int64 = 0
}

/// A token to store as unregistered (binary status 8, HTTP/2 410, the feedback service).
struct Unregistration: Sendable {
    var app: String
    var environment: String
    var token: String
    var verdict: TokenVerdict
}

/// An outcome the result stage records in Redis before producing its result. A class: result
/// items are handed from stage to stage and gathered into batches, and each copy of a struct
/// of these fields retained every string and buffer in it.
final class RecordedResult: Sendable {
    let ref: MessageRef
    let resultId: String
    /// Its fingerprint (``NotificationFingerprint``), which names it in Redis.
    let fingerprint: NotificationFingerprint
    /// The notification's token (hex), which places its claim in Redis.
    let token: String
    let result: ResultMessage
    /// The liveness mark of the claim it answers, for a notification this worker sent
    /// (``SentContext/claimMark``); `nil` for one it decided not to send.
    let claimMark: UInt32?
    /// What a status 8 or an HTTP/2 410 adds, boxed: tens of thousands of results wait to be
    /// written at full load, and these two fields inline took each from 160 to 320 bytes.
    private let extra: Extra?

    private final class Extra: Sendable {
        let feedback: ResultMessage?
        let unregister: Unregistration?
        let environment: TokenEnvironment?
        let accepted: AcceptedActivity?
        let channel: ChannelRecord?
        init(
            feedback: ResultMessage?,
            unregister: Unregistration?,
            environment: TokenEnvironment?,
            accepted: AcceptedActivity?,
            channel: ChannelRecord?
        ) {
            self.feedback = feedback
            self.unregister = unregister
            self.environment = environment
            self.accepted = accepted
            self.channel = channel
        }
    }

    /// A second result produced with it (the `feedback` result of an HTTP/2 410).
    var feedback: ResultMessage? { extra?.feedback }
    /// The token to store as unregistered.
    var unregister: Unregistration? { extra?.unregister }
    /// The token's environment to remember or forget (`environmentFallback`).
    var environment: TokenEnvironment? { extra?.environment }
    /// The Live Activity update Apple accepted, to remember (latest wins).
    var accepted: AcceptedActivity? { extra?.accepted }
    /// A channel job's change to the channel registry.
    var channel: ChannelRecord? { extra?.channel }

    init(
        ref: MessageRef,
        resultId: String,
        fingerprint: NotificationFingerprint? = nil,
        token: String,
        result: ResultMessage,
        feedback: ResultMessage? = nil,
        unregister: Unregistration? = nil,
        environment: TokenEnvironment? = nil,
        accepted: AcceptedActivity? = nil,
        channel: ChannelRecord? = nil,
        claimMark: UInt32? = nil
    ) {
        self.ref = ref
        self.resultId = resultId
        self.fingerprint = fingerprint ?? NotificationFingerprint(resultId: resultId)
        self.token = token
        self.result = result
        self.claimMark = claimMark
        extra =
            feedback == nil && unregister == nil && environment == nil && accepted == nil && channel == nil
            ? nil
            : Extra(
                feedback: feedback,
                unregister: unregister,
                environment: environment,
                accepted: accepted,
                channel: channel
            )
    }
}

/// What the result stage is handed: every notification and every rejected message ends as
/// exactly one of these.
enum ResultItem: Sendable {
    /// A result for bad input (an unreadable message, a rejected job or token): produced, not
    /// recorded, since producing it again is harmless.
    case rejected(MessageRef, ResultMessage)
    /// A result recorded earlier (the message was consumed again): produced again as it was.
    case reemitted(MessageRef, resultId: String, [ResultMessage])
    /// A final outcome decided without a pool (unregistered, rate-limited, expired while parked).
    case decided(RecordedResult)
    /// A pool's outcome.
    case delivered(RecordedResult)
    /// A claimed notification that was never written to a gateway: its claim is deleted and its
    /// message is not committed past it, so it is consumed again.
    case released(MessageRef, resultId: String, token: String)
    /// A claimed notification not settled when its pool shut down that may have been written to
    /// a gateway (an earlier attempt on a connection that closed without an error packet, or a
    /// claim taken over from a dead worker): its claim stays, so the partition's next owner
    /// takes it over and sends it again flagged `possibleDuplicate`; its message is not
    /// committed past it.
    case handedBack(MessageRef, resultId: String)

    var ref: MessageRef {
        switch self {
        case .rejected(let ref, _), .reemitted(let ref, _, _), .released(let ref, _, _), .handedBack(let ref, _): ref
        case .decided(let r), .delivered(let r): r.ref
        }
    }

    /// Whether it came out of a pool (its partition's active count was raised at the claim).
    var fromPool: Bool {
        switch self {
        case .delivered, .released, .handedBack: true
        case .rejected, .reemitted, .decided: false
        }
    }
}
