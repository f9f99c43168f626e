import APNSCore
import PushKafka

/// Every key the worker keeps in Redis, all under ``prefix``.
///
/// `<T>` is a token's hash tag (``tag(token:)``): empty on a server, `{xxxx}` on a cluster, so
/// that every key of one token shares a slot.
/// - `c:<T><generation>:<bucket>`: the claims of notifications whose fingerprints fall in the
///   bucket (``NotificationFingerprint``, ``FingerprintLayout``): a hash, fingerprint → state.
///   16 bytes: the claiming owner's claim id (``ClaimNames/owner(_:)``) and its
///   message's key (``ClaimNames/message(topic:partition:offset:)``); `F` for a claim
///   released (``NotificationStore/write``); `D`, settled, left by earlier builds. Small enough
///   for Redis' `listpack` encoding, so a notification costs about 28 bytes of its bucket for
///   the dedupe TTL. Whether its result is written is told by its partition's written position
///   (`pw:`), not by the claim. A claim is written into the generation current when it is
///   made, and looked up in that one and the one before.
/// - `o:<topic>:<partition>:<generation>`: a hash, `<offset>|<fingerprint>` → the outcome's
///   result JSON, followed by a newline and the `feedback` result JSON when the outcome also
///   published one (an HTTP/2 410): what a message consumed again produces again, byte for
///   byte, until it is before its partition's written position. The serialized results never
///   contain a raw newline, so it separates them. Deleted field by field one write after the
///   written position stored passes them; the key expires two periods after its generation began.
/// - `u:<T><app>:<env>:<generation>`: hash token → `<since>|<reason>`, Apple's permanent verdict
///   on the token (`Unregistered`, `BadDeviceToken`, `DeviceTokenNotForTopic`, binary
///   `InvalidToken`) and the UNIX time it was given. A verdict is written into the hashes of the
///   current generation (UNIX time ÷ ``verdictPeriod``) and the next, each expiring two periods
///   after its last write, and looked up in the current one: it is remembered for at least one
///   period (`invalidTokenTTLDays`) and at most two, and nothing in the store outlives that.
/// - `e:<T><app>:<token>`: the token's environment (`production`, `sandbox`), found by
///   `environmentFallback` when the other environment refused the token and this one delivered
///   the notification; kept for ``verdictPeriod`` (`invalidTokenTTLDays`) after it was found.
/// - `la:<T><app>:<env>:<target>`: a Live Activity's newest update Apple accepted,
///   `<rank><timestamp>|<jobId>` (rank `1` for an end, `0` for an update), kept until the
///   update's `staleDate`, at most 8 hours (``NotificationStore/acceptedActivities(_:)``).
/// - `lp:<T><app>:<env>:<target>`: a Live Activity's priority-10 updates of `"priority":
///   "auto"` jobs, in the hour since the first of them.
/// - `ch:<app>:<env>`: the app environment's broadcast channels the workers know (created by
///   channel jobs, or read from Apple when first broadcast to): a hash, channel ID → its storage
///   policy (`0` No Message Stored, `1` Most Recent Message Stored). A channel job's delete
///   removes its field. No expiry: Apple keeps a channel until it is deleted.
/// - `rd:<T><app>:<token>:<hour>`: the device's count this hour.
/// - `ra:<app>:<second>`: the app's count this second.
/// - `pw:<topic>:<partition>`: the partition's written position: every result of every message
///   before this offset is written to the results topic (the offset the worker commits, kept
///   here as well because a commit can fail during a rebalance). A notification claimed by a
///   message before it needs no result again. Kept two dedupe TTLs after it last moved, as long
///   as a claim it decides for.
/// - `ph:<topic>:<partition>`: `<offset>|<at>`, left by a worker that handed the partition on
///   (a rebalance, a stop) without committing its offset: every message before `offset` that was
///   produced at or before `at` (UNIX ms) has all its results written, so its next owner skips
///   those messages instead of consuming them again (``NotificationStore/handoffs(_:)``).
/// - `pp:<topic>:<partition>`: the partition's stop records (``StopGuard``): a hash, owner (its
///   claim id in hex, as in `w:#`) → `<from>|<to>|<stops>`, the messages the owner had in flight
///   and the stops they were charged before. Each worker replaces its own record before it
///   processes messages of the partition and removes it when it hands the partition on or stops
///   by choice; a dead owner's record is read by the partition's next owner. Kept two dedupe TTLs
///   after its last write.
/// - `w:<owner>`, `w:#<claim id>`: present while the worker incarnation `owner` is alive (short
///   TTL, refreshed); the second names it as its claims do, by its claim id in hex.
/// - `fl:<app>:<env>`: the feedback-polling lock.
/// - `s:{<summaryId>}`, `…:b`, `…:f`, `…:m`: a job summary (``summary(summaryId:)``), all four
///   under the hash tag of the summary's `resultId` (a digest of the job id, since an id may
///   contain braces), so that one job's keys share a slot.
///
/// The keys of a token are built by appending to a buffer (`append…(to:)`): a claim builds
/// three per notification, thousands per round trip, straight into its ``RedisCommands``.
/// The others are built whole.
struct RedisKeys: Sendable {
    let prefix: String
    /// Whether keys carry a token's hash tag (on a Redis Cluster).
    let isCluster: Bool
    /// How long a token verdict is remembered at least, in seconds: one generation of the
    /// verdict hashes.
    let verdictPeriod: Int64

    static let defaultVerdictPeriod: Int64 = 30 * 86_400

    init(prefix: String, isCluster: Bool, verdictPeriod: Int64 = RedisKeys.defaultVerdictPeriod) {
        self.prefix = prefix
        self.isCluster = isCluster
        self.verdictPeriod = max(1, verdictPeriod)
    }

    /// The verdict hashes' generation at a UNIX time (seconds).
    func verdictGeneration(at unixSeconds: Int64) -> Int64 { unixSeconds / verdictPeriod }

    // MARK: A token's keys

    /// The hash tag of a token's keys on a cluster: a number below 16,384 from a hash of the
    /// token, so that tokens spread over 16,384 tags whatever they look like; written into keys
    /// as `{` four hex digits `}`. `nil` on a server, where the keys keep their names from
    /// before clusters were supported.
    func tag(token: String) -> UInt16? {
        guard isCluster else { return nil }
        var hash: UInt32 = 0x811C_9DC5  // FNV-1a
        for byte in token.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        return UInt16(hash & 0x3FFF)
    }

    /// Appends `{xxxx}` for a tag, nothing without one.
    static func append(tag: UInt16?, to key: inout [UInt8]) {
        guard let tag else { return }
        func digit(_ value: UInt16) -> UInt8 {
            value < 10 ? UInt8(ascii: "0") + UInt8(value) : UInt8(ascii: "a") + UInt8(value - 10)
        }
        key.append(UInt8(ascii: "{"))
        key.append(digit(tag >> 12))
        key.append(digit((tag >> 8) & 15))
        key.append(digit((tag >> 4) & 15))
        key.append(digit(tag & 15))
        key.append(UInt8(ascii: "}"))
    }

    /// Appends `c:<T><generation>:<bucket>`.
    func appendClaims(generation: Int64, bucket: Int, tag: UInt16?, to key: inout [UInt8]) {
        key += prefix.utf8
        key.append(UInt8(ascii: "c"))
        key.append(UInt8(ascii: ":"))
        Self.append(tag: tag, to: &key)
        DecimalText.append(generation, to: &key)
        key.append(UInt8(ascii: ":"))
        DecimalText.append(Int64(bucket), to: &key)
    }

    /// Appends `c:<T><generation>:<bucket>`, the generation given as its text and `:`
    /// (``claimsGeneration(_:)``): a claim round builds two keys per notification.
    func appendClaims(generation: [UInt8], bucket: Int, tag: UInt16?, to key: inout [UInt8]) {
        key += prefix.utf8
        key.append(UInt8(ascii: "c"))
        key.append(UInt8(ascii: ":"))
        Self.append(tag: tag, to: &key)
        key += generation
        DecimalText.append(Int64(bucket), to: &key)
    }

    /// A generation's text in a claims key, followed by `:`.
    static func claimsGeneration(_ generation: Int64) -> [UInt8] {
        var text: [UInt8] = []
        DecimalText.append(generation, to: &text)
        text.append(UInt8(ascii: ":"))
        return text
    }

    /// `c:<T><generation>:<bucket>`.
    func claims(generation: Int64, bucket: Int, tag: UInt16?) -> [UInt8] {
        var key: [UInt8] = []
        key.reserveCapacity(prefix.utf8.count + 32)
        appendClaims(generation: generation, bucket: bucket, tag: tag, to: &key)
        return key
    }

    /// Appends `u:<T><app>:<environment>:<generation>`.
    func appendUnregistered(
        app: String,
        environment: String,
        generation: Int64,
        tag: UInt16?,
        to key: inout [UInt8]
    ) {
        key += prefix.utf8
        key.append(UInt8(ascii: "u"))
        key.append(UInt8(ascii: ":"))
        Self.append(tag: tag, to: &key)
        key += app.utf8
        key.append(UInt8(ascii: ":"))
        key += environment.utf8
        key.append(UInt8(ascii: ":"))
        DecimalText.append(generation, to: &key)
    }

    /// `e:<T><app>:<token>`.
    func tokenEnvironment(app: String, token: String, tag: UInt16?) -> [UInt8] {
        var key: [UInt8] = []
        appendAppToken("e:", app: app, token: token, tag: tag, to: &key)
        return key
    }

    /// Appends `rd:<T><app>:<token>:<hour>`.
    func appendDeviceCounter(app: String, token: String, hour: Int64, tag: UInt16?, to key: inout [UInt8]) {
        appendAppToken("rd:", app: app, token: token, tag: tag, to: &key)
        key.append(UInt8(ascii: ":"))
        DecimalText.append(hour, to: &key)
    }

    /// Appends `<kind><T><app>:<token>`.
    private func appendAppToken(_ kind: StaticString, app: String, token: String, tag: UInt16?, to key: inout [UInt8]) {
        key += prefix.utf8
        kind.withUTF8Buffer { key += $0 }
        Self.append(tag: tag, to: &key)
        key += app.utf8
        key.append(UInt8(ascii: ":"))
        key += token.utf8
    }

    /// `<kind><T><app>:<environment>:<target>`: a Live Activity's newest accepted update
    /// (`la:`) or its priority-10 count (`lp:`); `target` is its push token or channel.
    func liveActivity(_ kind: StaticString, app: String, environment: String, target: String) -> [UInt8] {
        var key: [UInt8] = []
        appendAppToken(kind, app: app, token: environment, tag: tag(token: target), to: &key)
        key.append(UInt8(ascii: ":"))
        key += target.utf8
        return key
    }

    // MARK: Keys in slots of their own

    /// `ra:<app>:<second>`.
    func appRate(app: String, second: Int64) -> [UInt8] {
        Array("\(prefix)ra:\(app):\(second)".utf8)
    }

    /// `ch:<app>:<env>`.
    func channels(app: String, environment: String) -> [UInt8] {
        Array("\(prefix)ch:\(app):\(environment)".utf8)
    }

    /// `pw:<topic>:<partition>`.
    func writtenPosition(topic: String, partition: Int32) -> [UInt8] {
        Array("\(prefix)pw:\(topic):\(partition)".utf8)
    }

    /// `o:<topic>:<partition>:<generation>`.
    func outcomes(topic: String, partition: Int32, generation: Int64) -> [UInt8] {
        Array("\(prefix)o:\(topic):\(partition):\(generation)".utf8)
    }

    /// `ph:<topic>:<partition>`.
    func handoff(_ partition: TopicPartition) -> [UInt8] {
        Array("\(prefix)ph:\(partition.topic):\(partition.partition)".utf8)
    }

    /// `w:<owner>`.
    func liveness(owner: String) -> [UInt8] {
        Array("\(prefix)w:\(owner)".utf8)
    }

    /// `w:#<claim id>`: the liveness of the owner whose claims carry `id`
    /// (``ClaimNames/owner(_:)``), in hex.
    func liveness(claimId id: [UInt8]) -> [UInt8] {
        Array("\(prefix)w:#".utf8) + Self.hex(id)
    }

    /// `pp:<topic>:<partition>`.
    func stopRecords(_ partition: TopicPartition) -> [UInt8] {
        Array("\(prefix)pp:\(partition.topic):\(partition.partition)".utf8)
    }

    /// Bytes as lower-case hex digits.
    static func hex(_ bytes: [UInt8]) -> [UInt8] {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return text
    }

    /// `fl:<app>:<environment>`.
    func feedbackLock(app: String, environment: String) -> [UInt8] {
        Array("\(prefix)fl:\(app):\(environment)".utf8)
    }

    // MARK: A job summary's keys

    /// A job summary's four keys, all under the hash tag `{<summaryId>}`.
    struct Summary {
        /// `s:{…}`: a hash: the job's fingerprint (`fp`, a digest of its token list) and token
        /// count (`total`), the results counted (`done`), counts by type and status (`t`:
        /// transmitted, `s<status>`: failed with that status, `k<type>`: any other type of token
        /// result), the failed tokens left out of the list (`omitted`), and the first and last `at`.
        var counters: [UInt8]
        /// `s:{…}:b`: a bitmap, one bit per token (by its place in the job): counted already.
        var counted: [UInt8]
        /// `s:{…}:f`: a list of the first 1,000 failed tokens, `<status>|<token>`.
        var failed: [UInt8]
        /// `s:{…}:m`: who writes the summary: `P|<owner>|<topic>|<partition>|<offset>` while a
        /// worker does, for the message it came from, then `D` once it is written.
        var writer: [UInt8]

        /// In the order of the summary script's `KEYS`.
        var all: [[UInt8]] { [counters, counted, failed, writer] }
    }

    func summary(summaryId: String) -> Summary {
        let base = "\(prefix)s:{\(summaryId)}"
        return Summary(
            counters: Array(base.utf8),
            counted: Array("\(base):b".utf8),
            failed: Array("\(base):f".utf8),
            writer: Array("\(base):m".utf8)
        )
    }
}
