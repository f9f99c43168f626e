/// One metric the worker exports: its Prometheus name, kind, labels and meaning.
///
/// The catalogue is the contract with dashboards and alert rules (`deploy/prometheus`,
/// `deploy/grafana`) and with `docs/operations.md`; tests check that every metric those files
/// use is listed here. No label takes unbounded values: never a token or a job id.
public struct MetricDescription: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        case counter
        case gauge
        case histogram
    }

    /// The Prometheus name. Counters end in `_total`; histograms in a unit (`_seconds`).
    public var name: String
    public var kind: Kind
    /// Label names, in the order they are documented.
    public var labels: [String]
    public var help: String

    public init(_ name: String, _ kind: Kind, labels: [String] = [], _ help: String) {
        self.name = name
        self.kind = kind
        self.labels = labels
        self.help = help
    }
}

/// Every metric `apn-worker run` exports on `GET /metrics`.
public enum MetricCatalogue {
    /// The labels of a metric about one app's pool: `app`, `env` (`production`, `sandbox`) and
    /// `transport` (`binary`, `http2`).
    public static let poolLabels = ["app", "env", "transport"]

    // Intake
    public static let messagesConsumed = MetricDescription(
        "apn_worker_messages_consumed_total",
        .counter,
        "Kafka messages consumed from the requests topic."
    )
    public static let invalidJobs = MetricDescription(
        "apn_worker_invalid_jobs_total",
        .counter,
        "Messages that were not a valid job (an invalidJob result each)."
    )
    public static let messagesLostToRetention = MetricDescription(
        "apn_worker_messages_lost_to_retention_total",
        .counter,
        labels: ["topic", "partition"],
        "Jobs Kafka deleted (retention) before this worker read them: they get no result."
    )
    public static let messagesSkipped = MetricDescription(
        "apn_worker_messages_skipped_total",
        .counter,
        "Messages consumed again below their partition's hand-off mark: their results were written before the hand-over, so they are skipped."
    )
    public static let movedAside = MetricDescription(
        "apn_worker_notifications_moved_aside_total",
        .counter,
        labels: ["app", "env"],
        "Notifications written to kafka.parkedTopic because their gateway could not be reached and worker.moveAsideAfter of them waited: their jobs' offsets are committed and the other apps go on."
    )
    public static let broughtBack = MetricDescription(
        "apn_worker_notifications_brought_back_total",
        .counter,
        labels: ["app", "env"],
        "Notifications read back from kafka.parkedTopic to be claimed and sent, their gateway reachable again (a record written twice counts twice; its second copy is a duplicate)."
    )
    public static let movedAsideOldest = MetricDescription(
        "apn_worker_moved_aside_oldest_seconds",
        .gauge,
        labels: ["app", "env"],
        "Age, from its job's Kafka timestamp, of the oldest moved-aside notification this worker leaves in kafka.parkedTopic because its gateway still cannot be reached; 0 when it leaves none."
    )
    public static let notificationsWaiting = MetricDescription(
        "apn_worker_notifications_waiting",
        .gauge,
        labels: ["app", "env"],
        "Notifications of an app environment whose pool cannot take them now (unreachable or stalled): parked in the worker, and held by the pool; 0 while it delivers."
    )
    public static let poolBlocked = MetricDescription(
        "apn_worker_pool_blocked",
        .gauge,
        labels: ["app", "env", "reason"],
        "1 while an app environment's pool cannot take notifications, by reason: unreachable (it cannot connect to its gateway) or stalled (too slow for what it holds); its new notifications wait or move aside, and the other apps go on. 0 otherwise."
    )
    public static let stopsDetected = MetricDescription(
        "apn_worker_stops_detected_total",
        .counter,
        labels: ["topic"],
        "Stop records of dead workers found when a partition was assigned: a worker died (a crash, SIGKILL, out of memory) while it had the partition's messages in flight."
    )
    public static let poisonMessages = MetricDescription(
        "apn_worker_poison_messages_total",
        .counter,
        labels: ["topic"],
        "Messages answered with an invalidJob result and skipped because workers stopped worker.maxStopsPerMessage times while processing them."
    )

    // Claim
    public static let duplicatesSuppressed = MetricDescription(
        "apn_worker_duplicates_suppressed_total",
        .counter,
        labels: ["app"],
        "Notifications not sent again because Redis already held their claim or result."
    )
    public static let rateLimited = MetricDescription(
        "apn_worker_rate_limited_total",
        .counter,
        labels: ["app", "scope"],
        "Notifications held back (scope app) or refused with status 520 (scope device) by a rate limit."
    )
    public static let unregisteredSkipped = MetricDescription(
        "apn_worker_unregistered_skipped_total",
        .counter,
        labels: ["app"],
        "Notifications not sent because Apple reported the token unregistered (status 519)."
    )
    public static let staleSkipped = MetricDescription(
        "apn_worker_stale_skipped_total",
        .counter,
        labels: ["app"],
        "Notifications not sent because their job's staleAfter had passed when they were consumed or about to be sent (status 521)."
    )
    public static let liveActivityUpdates = MetricDescription(
        "apn_worker_live_activity_updates_total",
        .counter,
        labels: ["app", "priority"],
        "Live Activity pushes Apple accepted, by the apns-priority they were sent with (10 or 5)."
    )
    public static let liveActivitySuperseded = MetricDescription(
        "apn_worker_live_activity_superseded_total",
        .counter,
        labels: ["app"],
        "Live Activity updates not sent because a newer update of the same activity replaced them (status 522)."
    )
    public static let channels = MetricDescription(
        "apn_worker_channels",
        .gauge,
        labels: ["app", "env"],
        "Broadcast channels of an app environment in the channel registry (created by channel jobs or apn-worker channels, not deleted), against Apple's limit of 10,000; read once a minute."
    )
    public static let redirected = MetricDescription(
        "apn_worker_redirected_total",
        .counter,
        labels: ["app", "env", "via"],
        "Notifications of apps with environmentFallback sent in the other environment than their job's (env): via fallback after a BadDeviceToken or status 8, or via remembered, the token's remembered environment."
    )

    // Delivery
    public static let notifications = MetricDescription(
        "apn_worker_notifications_total",
        .counter,
        labels: ["app", "env", "transport", "type", "status"],
        "Results by outcome: type transmitted, transmissionError, feedback or invalidJob; status is the result's statusName."
    )
    public static let deliveryAttempts = MetricDescription(
        "apn_worker_delivery_attempts_total",
        .counter,
        labels: poolLabels,
        "Notifications written to Apple, resends included."
    )
    public static let retransmissions = MetricDescription(
        "apn_worker_retransmissions_total",
        .counter,
        labels: poolLabels,
        "Notifications written again after Apple discarded them (binary) or a connection was lost."
    )
    public static let possibleDuplicates = MetricDescription(
        "apn_worker_possible_duplicates_total",
        .counter,
        labels: poolLabels,
        "Results written with possibleDuplicate: true."
    )
    public static let endToEndLatency = MetricDescription(
        "apn_worker_end_to_end_latency_seconds",
        .histogram,
        labels: poolLabels,
        "From the Kafka timestamp of the job to the result being produced."
    )
    public static let deliveryLatency = MetricDescription(
        "apn_worker_delivery_latency_seconds",
        .histogram,
        labels: poolLabels,
        "From a notification's write to Apple to its outcome (confirmed or answered)."
    )
    public static let poolConnections = MetricDescription(
        "apn_worker_pool_connections",
        .gauge,
        labels: poolLabels + ["state"],
        "Connections of a pool by state: open, connecting, backoff."
    )
    public static let connectionsOpened = MetricDescription(
        "apn_worker_connections_opened_total",
        .counter,
        labels: poolLabels,
        "Connections to Apple established."
    )
    public static let connectFailures = MetricDescription(
        "apn_worker_connect_failures_total",
        .counter,
        labels: poolLabels + ["reason"],
        "Failed connects to Apple by reason: tls, refused, timeout, other."
    )
    public static let connectionsClosed = MetricDescription(
        "apn_worker_connections_closed_total",
        .counter,
        labels: poolLabels + ["reason"],
        "Connections closed by reason: errorResponse, silentClose, goaway, idle, shutdown, other."
    )
    public static let sentCacheNotifications = MetricDescription(
        "apn_worker_sent_cache_notifications",
        .gauge,
        labels: ["app", "env"],
        "Notifications held in a binary pool's sent cache for retransmission."
    )
    public static let backpressureWaits = MetricDescription(
        "apn_worker_backpressure_waits_total",
        .counter,
        labels: poolLabels,
        "Times a send waited because a pool's queue or sent cache was full."
    )
    public static let http2StreamsInUse = MetricDescription(
        "apn_worker_http2_streams_in_use",
        .gauge,
        labels: ["app", "env"],
        "HTTP/2 streams open to Apple."
    )
    public static let providerTokenRefreshes = MetricDescription(
        "apn_worker_provider_token_refreshes_total",
        .counter,
        labels: ["app", "env"],
        "Provider tokens (JWT) signed."
    )
    public static let providerTokenRefreshed = MetricDescription(
        "apn_worker_provider_token_refreshed_timestamp_seconds",
        .gauge,
        labels: ["app", "env"],
        "When the newest provider token APNs accepted was signed (its iat), in seconds since 1970: a token counts once a request that carried it got a 200 or a 4xx answer other than 403 and 429."
    )
    public static let credentialExpiry = MetricDescription(
        "apn_worker_credential_expiry_timestamp_seconds",
        .gauge,
        labels: ["app", "env", "kind"],
        "When a credential configured for an app's environment stops being valid, in seconds since 1970: kind certificate is a client certificate's notAfter."
    )
    public static let credentialReloadFailed = MetricDescription(
        "apn_worker_credential_reload_failed",
        .gauge,
        labels: ["app", "env"],
        "1 while an app environment's changed credential files (or config file) fail the checks of the start, so the worker goes on with the credentials it has; 0 otherwise."
    )
    public static let credentialReloads = MetricDescription(
        "apn_worker_credential_reloads_total",
        .counter,
        labels: ["app", "env", "result"],
        "Credential reloads of an app environment: result applied (new connections use the new credentials) or failed (the old ones stay in use)."
    )
    public static let tooManyRequests = MetricDescription(
        "apn_worker_http2_too_many_requests_total",
        .counter,
        labels: ["app", "env"],
        "HTTP/2 answers with status 429."
    )
    public static let malformedAnswers = MetricDescription(
        "apn_worker_gateway_malformed_answers_total",
        .counter,
        labels: ["app", "env"],
        "Answers of the gateway the worker could not fully use and partly ignored (a 410 timestamp out of range), each logged."
    )
    public static let feedbackTokens = MetricDescription(
        "apn_worker_feedback_tokens_total",
        .counter,
        labels: ["app", "env"],
        "Tokens read from the feedback service."
    )
    public static let inFlight = MetricDescription(
        "apn_worker_in_flight",
        .gauge,
        "Notifications claimed or parsed without a written result."
    )

    // Results and Kafka
    public static let resultsProduced = MetricDescription(
        "apn_worker_results_produced_total",
        .counter,
        "Result messages produced to the results topic."
    )
    public static let produceErrors = MetricDescription(
        "apn_worker_result_produce_errors_total",
        .counter,
        "Result messages the producer failed to deliver."
    )
    public static let offsetsCommitted = MetricDescription(
        "apn_worker_offsets_committed_total",
        .counter,
        "Offset commits that succeeded."
    )
    public static let rebalances = MetricDescription(
        "apn_worker_rebalances_total",
        .counter,
        labels: ["kind"],
        "Partition assignments (kind assign) and revocations (kind revoke)."
    )
    public static let assignedPartitions = MetricDescription(
        "apn_worker_assigned_partitions",
        .gauge,
        "Partitions of the requests topic this worker owns."
    )
    public static let consumerLag = MetricDescription(
        "apn_worker_consumer_lag",
        .gauge,
        labels: ["topic", "partition"],
        "Messages between the partition's high watermark and this worker's position."
    )

    // Redis
    public static let redisRoundTrips = MetricDescription(
        "apn_worker_redis_round_trips_total",
        .counter,
        "Pipelined round trips to Redis."
    )
    public static let redisRedirects = MetricDescription(
        "apn_worker_redis_redirects_total",
        .counter,
        "Redis Cluster MOVED and ASK redirections followed: slots moving between primaries, or a failover."
    )
    public static let redisLatency = MetricDescription(
        "apn_worker_redis_latency_seconds",
        .histogram,
        "Time of one pipelined Redis round trip."
    )
    public static let redisErrors = MetricDescription(
        "apn_worker_redis_errors_total",
        .counter,
        "Redis round trips that failed (connection lost, timeout, error reply)."
    )
    public static let redisUp = MetricDescription(
        "apn_worker_redis_up",
        .gauge,
        "1 while Redis answers, 0 while it does not."
    )

    // The worker
    public static let ready = MetricDescription(
        "apn_worker_ready",
        .gauge,
        "1 while the worker is a consuming member of its group with Redis reachable."
    )

    // The process (Linux /proc)
    public static let processResidentMemory = MetricDescription(
        "process_resident_memory_bytes",
        .gauge,
        "Resident memory of the process."
    )
    public static let processCPU = MetricDescription(
        "process_cpu_seconds_total",
        .counter,
        "User and system CPU time of the process."
    )
    public static let processOpenFiles = MetricDescription(
        "process_open_fds",
        .gauge,
        "Open file descriptors of the process."
    )
    public static let processHeapAllocated = MetricDescription(
        "process_heap_allocated_bytes",
        .gauge,
        "Bytes the process has allocated on its heap and not freed."
    )

    // Unsafe settings
    public static let insecureTLS = MetricDescription(
        "apn_worker_insecure_tls",
        .gauge,
        labels: ["app", "env"],
        "1 while an app environment does not verify the certificate of Apple's servers (verifyServer: false), so an impostor on the network could read its notifications and collect its credentials; 0 otherwise."
    )

    /// Every metric, in the order `docs/operations.md` lists them.
    public static let all: [MetricDescription] = [
        messagesConsumed, invalidJobs, messagesLostToRetention, messagesSkipped,
        movedAside, broughtBack, movedAsideOldest, notificationsWaiting, poolBlocked,
        stopsDetected, poisonMessages,
        duplicatesSuppressed, rateLimited,
        unregisteredSkipped,
        staleSkipped, liveActivityUpdates, liveActivitySuperseded, channels, redirected, notifications,
        deliveryAttempts, retransmissions, possibleDuplicates, endToEndLatency, deliveryLatency, poolConnections,
        connectionsOpened, connectFailures, connectionsClosed, sentCacheNotifications, backpressureWaits,
        http2StreamsInUse, providerTokenRefreshes, providerTokenRefreshed, credentialExpiry, credentialReloadFailed,
        credentialReloads, tooManyRequests, malformedAnswers,
        feedbackTokens, inFlight, resultsProduced,
        produceErrors, offsetsCommitted, rebalances, assignedPartitions, consumerLag, redisRoundTrips, redisRedirects,
        redisLatency, redisErrors, redisUp, ready, processResidentMemory, processCPU, processOpenFiles,
        processHeapAllocated, insecureTLS,
    ]
}
