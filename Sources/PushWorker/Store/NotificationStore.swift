import Crypto
import Foundation
import Logging
import PushRedis

/// The worker's state in Redis: each notification's claim (16 bytes, kept for the dedupe TTL)
/// and its outcome until its message is before its partition's written position, worker liveness, rate counters,
/// the unregistered-token store, hand-off marks, job summaries and the feedback lock. Each call
/// is one round trip per server (per primary on a Redis Cluster), whatever the number of
/// notifications it covers; a claim takes more only when it meets another worker's claim, a
/// recorded outcome, or an app rate limit.
///
/// Its keys are ``RedisKeys``; its Lua scripts ``Scripts``. By concern:
/// - the claim (`NotificationStore+Claim.swift`, its commands in `+ClaimCommands.swift`);
/// - recording outcomes (`+Write.swift`);
/// - job summaries (`+Summary.swift`);
/// - worker liveness (`+Liveness.swift`), hand-off marks (`+Handoff.swift`) and the feedback
///   lock (`+FeedbackLock.swift`).
final class NotificationStore: Sendable {
    let redis: RedisClient
    let keys: RedisKeys
    let owner: String
    /// What names ``owner`` in a claim: 8 bytes (``ClaimNames/owner(_:)``).
    let claimId: [UInt8]
    /// Where the claim and write round trips report their latency and failures.
    let metrics: WorkerMetrics?
    /// Buckets of settled notifications' fingerprints per generation (``FingerprintLayout``).
    let fingerprintBuckets: Int
    /// The claims buckets whose expiry this worker has set (``FingerprintExpiries``), shared by
    /// its stores.
    let fingerprintExpiries: SharedFingerprintExpiries

    /// `invalidTokenTTL`: how long a token verdict is remembered at least (``RedisKeys``, `u:`).
    init(
        redis: RedisClient,
        prefix: String,
        owner: String,
        metrics: WorkerMetrics? = nil,
        invalidTokenTTL: Duration = .seconds(RedisKeys.defaultVerdictPeriod),
        fingerprintBuckets: Int = FingerprintLayout.defaultBuckets,
        fingerprintExpiries: SharedFingerprintExpiries = SharedFingerprintExpiries()
    ) {
        self.fingerprintExpiries = fingerprintExpiries
        self.redis = redis
        self.keys = RedisKeys(
            prefix: prefix,
            isCluster: redis.isCluster,
            verdictPeriod: invalidTokenTTL.components.seconds
        )
        self.owner = Self.claimOwner(owner)
        self.claimId = ClaimNames.owner(self.owner)
        self.metrics = metrics
        self.fingerprintBuckets = fingerprintBuckets
    }

    /// The name an owner is known by in Redis (claims, liveness, summary writers): the owner
    /// itself up to 24 bytes; a longer one is cut to its first 7 bytes, `~` and 16 hex digits
    /// of its SHA-256, so that a claim (``RedisKeys`` `c:`) stays within the 64 bytes a
    /// `listpack` value may have.
    static func claimOwner(_ owner: String) -> String {
        guard owner.utf8.count > 24 else { return owner }
        let digest = SHA256.hash(data: Array(owner.utf8))
        let hex = digest.prefix(8).map { String(format: "%02x", $0) }.joined()
        return String(decoding: owner.utf8.prefix(7), as: UTF8.self) + "~" + hex
    }

    /// Where the fingerprints of notifications remembered for `ttlSeconds` live.
    func fingerprintLayout(ttlSeconds: Int) -> FingerprintLayout {
        FingerprintLayout(period: Int64(ttlSeconds), buckets: fingerprintBuckets, isCluster: redis.isCluster)
    }

    /// Loads the scripts (on every primary of a cluster) so that later calls meet no `NOSCRIPT`.
    func prepare() async throws(RedisError) {
        try await redis.load(Scripts.all)
    }

    /// Opens the connection again after a failed command. A reconnect that fails too (Redis is
    /// still away) is logged at debug level: the caller's next command fails and retries it, and
    /// that failure is what the caller logs and counts.
    func reconnect(logger: Logger) async {
        do {
            try await redis.reconnect()
        } catch {
            logger.debug("Cannot reconnect to Redis yet", metadata: ["error": "\(error.message)"])
        }
    }

    /// Runs one round trip, reporting its latency, or its failure, to the metrics.
    func measured<T>(_ body: () async throws(RedisError) -> T) async throws(RedisError) -> T {
        guard let metrics, metrics.isEnabled else { return try await body() }
        let start = ContinuousClock.now
        do {
            let value = try await body()
            metrics.observe(MetricCatalogue.redisLatency, [], .now - start)
            return value
        } catch {
            metrics.increment(MetricCatalogue.redisErrors)
            throw error
        }
    }
}
