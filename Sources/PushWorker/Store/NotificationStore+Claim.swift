import PushRedis

/// What a claim reads of a notification. A ``Candidate`` is claimed as it is: a request built
/// for each retained (and released) its four strings.
protocol ClaimSubject {
    var resultId: String { get }
    /// Its ``NotificationFingerprint``.
    var fingerprint: NotificationFingerprint { get }
    var partition: Int32 { get }
    var offset: Int64 { get }
    var app: String { get }
    var environment: String { get }
    /// The token in lowercase hex, which places its keys (``RedisKeys/tag(token:)``).
    var tokenHex: String { get }
    /// When the device last registered the token (UNIX seconds).
    var registeredAt: Int64? { get }
    var appPerSecond: Int { get }
    var devicePerHour: Int { get }
}

extension NotificationStore {
    /// A notification to claim, for callers that have no ``Candidate``.
    struct ClaimRequest: ClaimSubject, Sendable {
        let resultId: String
        var partition: Int32
        var offset: Int64
        var app: String
        var environment: String
        var tokenHex: String
        var registeredAt: Int64?
        var appPerSecond: Int
        var devicePerHour: Int
        /// Computed once: a claim reads it several times.
        let fingerprint: NotificationFingerprint

        init(
            resultId: String,
            partition: Int32,
            offset: Int64,
            app: String,
            environment: String,
            tokenHex: String,
            registeredAt: Int64?,
            appPerSecond: Int,
            devicePerHour: Int
        ) {
            self.resultId = resultId
            self.partition = partition
            self.offset = offset
            self.app = app
            self.environment = environment
            self.tokenHex = tokenHex
            self.registeredAt = registeredAt
            self.appPerSecond = appPerSecond
            self.devicePerHour = devicePerHour
            fingerprint = NotificationFingerprint(resultId: resultId)
        }
    }

    /// What the claim decided for one notification.
    enum ClaimDecision: Sendable, Hashable {
        /// Claimed: send it.
        case send
        /// Claimed from a dead worker that may have sent it, its outcome not recorded and its
        /// message not before its partition's written position: send, marked `possibleDuplicate`.
        case resend
        /// The outcome is already recorded by this message: produce the recorded result again,
        /// and the `feedback` result recorded with it, if any.
        case recorded(result: [UInt8], feedback: [UInt8]?)
        /// The outcome is recorded by this message and its result written (the message is
        /// before its partition's written position): nothing to do.
        case written
        /// Another message carries the same notification (a duplicate job): no send, no result.
        case duplicate
        /// A live worker has it claimed for this same message, or its part of the claim could
        /// not be run (a cluster slot without a primary): try again later.
        case busy
        /// The app is over its per-second rate: try again next second (not claimed).
        case throttled
        /// Apple gave a permanent verdict on the token (claimed; do not send).
        case unregistered(TokenVerdict)
        /// The device is over its per-hour limit (claimed; do not send).
        case rateLimited
    }

    /// Claims notifications of messages of `topic`: one round trip in the common case (per
    /// primary on a cluster), one more to take an app rate limit's permits first, and one more
    /// each when the claim meets another worker's claim (is it alive?), a recorded outcome
    /// (is its message's result written?), or permits left unused (given back).
    func claim<Request: ClaimSubject>(
        topic: String,
        _ requests: [Request],
        ttlSeconds: Int,
        nowMilliseconds: Int64
    ) async throws(RedisError) -> [ClaimDecision] {
        guard !requests.isEmpty else { return [] }
        let tags = requests.map { keys.tag(token: $0.tokenHex) }
        let hour = nowMilliseconds / 3_600_000
        let (permits, taken) = try await takePermits(requests, nowMilliseconds: nowMilliseconds)
        var codes = try await runClaims(
            topic: topic,
            requests,
            Array(requests.indices),
            tags: tags,
            hour: hour,
            permits: permits,
            dead: [],
            ttlSeconds: ttlSeconds
        )

        // Claims of other workers for the same message: taken over if the worker is dead.
        let others = codes.indices.filter { ClaimReply(code: codes[$0]) == .otherOwner }
        if !others.isEmpty {
            let dead = try await deadClaimOwners(Set(others.map { Array(codes[$0].dropFirst()) }))
            let takeOver = others.filter { dead.contains(Array(codes[$0].dropFirst())) }
            if !takeOver.isEmpty {
                let again = try await runClaims(
                    topic: topic,
                    requests,
                    takeOver,
                    tags: tags,
                    hour: hour,
                    permits: permits,
                    dead: dead,
                    ttlSeconds: ttlSeconds
                )
                for (index, code) in zip(takeOver, again) { codes[index] = code }
            }
        }

        // Settled notifications, claims taken over, and claims of live owners for this same
        // message: is an outcome of this message recorded (still kept for it)?
        let lookups = codes.indices.filter {
            [.settled, .resend, .otherOwner].contains(ClaimReply(code: codes[$0]))
        }
        try await findOutcomes(topic: topic, requests, lookups, ttlSeconds: ttlSeconds, codes: &codes)

        // Outcomes recorded by this same message, claims of it found without an outcome (taken
        // over, or another live owner's), and settled notifications: is the message's result
        // written already? A claim never changes once its result is written: the written
        // position alone tells.
        let written = try await writtenPositions(
            topic: topic,
            Set(codes.indices.filter { Self.readsWrittenPosition(codes[$0]) }.map { requests[$0].partition })
        )

        // Requests are read in place here and below: a copy of one retains its four strings.
        let decisions = try codes.indices.map { index throws(RedisError) in
            let code = codes[index]
            return try Self.decision(
                code,
                offset: requests[index].offset,
                writtenPosition: Self.readsWrittenPosition(code) ? written[requests[index].partition] ?? -1 : -1
            )
        }
        try await returnUnused(taken, requests: requests, permits: permits, decisions: decisions)
        return decisions
    }

    /// The written positions (`pw:`) of `partitions` of `topic`, -1 where none is stored. One
    /// round trip (per primary on a cluster), none for no partition.
    private func writtenPositions(topic: String, _ partitions: Set<Int32>) async throws(RedisError) -> [Int32: Int64] {
        guard !partitions.isEmpty else { return [:] }
        let sorted = partitions.sorted()
        var commands = RedisCommands()
        for partition in sorted { commands.get(keys.writtenPosition(topic: topic, partition: partition)) }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        var written: [Int32: Int64] = [:]
        for (partition, reply) in zip(sorted, replies) {
            if let message = reply.errorMessage {
                throw RedisError(.server("ERR"), "Redis refused a written position: \(message)")
            }
            written[partition] = reply.string.flatMap { Int64($0) } ?? -1
        }
        return written
    }

    /// The app rate limits' permits for this second: which requests may be sent (all of them
    /// for apps without a limit), and how many each app's counter gave.
    private func takePermits<Request: ClaimSubject>(
        _ requests: [Request],
        nowMilliseconds: Int64
    ) async throws(RedisError) -> (permits: [Bool], taken: [(app: String, key: [UInt8], count: Int)]) {
        var wanted: [(app: String, key: [UInt8], limit: Int, requests: [Int])] = []
        var place: [String: Int] = [:]
        let second = nowMilliseconds / 1000
        for index in requests.indices where requests[index].appPerSecond > 0 {
            let app = requests[index].app
            if let at = place[app] {
                wanted[at].requests.append(index)
            } else {
                place[app] = wanted.count
                wanted.append((app, keys.appRate(app: app, second: second), requests[index].appPerSecond, [index]))
            }
        }
        var permits = [Bool](repeating: true, count: requests.count)
        guard !wanted.isEmpty else { return (permits, []) }
        var commands = RedisCommands()
        for w in wanted {
            commands.evalsha(Scripts.takePermits, keys: [w.key], arguments: [w.requests.count, w.limit])
        }
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(commands, scripts: [Scripts.takePermits])
        }
        var taken: [(app: String, key: [UInt8], count: Int)] = []
        for (w, reply) in zip(wanted, replies) {
            guard let count = reply.int else {
                throw RedisError(.protocol, "the app rate script answered \(reply)")
            }
            for (n, index) in w.requests.enumerated() { permits[index] = n < Int(count) }
            if count > 0 { taken.append((w.app, w.key, Int(count))) }
        }
        return (permits, taken)
    }

    /// Gives back the permits of requests that were not sent (already recorded, unregistered,
    /// over the device limit, another worker's): the app's rate counts what it sent.
    private func returnUnused<Request: ClaimSubject>(
        _ taken: [(app: String, key: [UInt8], count: Int)],
        requests: [Request],
        permits: [Bool],
        decisions: [ClaimDecision]
    ) async throws(RedisError) {
        guard !taken.isEmpty else { return }
        var used: [String: Int] = [:]
        for (index, decision) in decisions.enumerated()
        where permits[index] && requests[index].appPerSecond > 0 && decision == .send {
            used[requests[index].app, default: 0] += 1
        }
        var commands = RedisCommands()
        for t in taken {
            let unused = t.count - (used[t.app] ?? 0)
            if unused > 0 { commands.evalsha(Scripts.returnPermits, keys: [t.key], arguments: [unused]) }
        }
        guard !commands.isEmpty else { return }
        _ = try await measured { () throws(RedisError) in
            try await redis.pipeline(commands, scripts: [Scripts.returnPermits])
        }
    }

    /// Whether the decision for `code` depends on its partition's written position.
    private static func readsWrittenPosition(_ code: [UInt8]) -> Bool {
        switch ClaimReply(code: code) {
        case .recorded, .settled, .resend, .otherOwner: true
        default: false
        }
    }

    /// The decision a claim code stands for (``ClaimReply``), `writtenPosition` being its
    /// partition's written position (`-1` when none is stored, or not read).
    static func decision(_ bytes: [UInt8], offset: Int64, writtenPosition: Int64) throws(RedisError) -> ClaimDecision {
        guard let reply = ClaimReply(code: bytes) else {
            throw RedisError(.protocol, "the claim script answered \(String(decoding: bytes, as: UTF8.self))")
        }
        switch reply {
        case .send: return .send
        // Its claim taken over without an outcome: the outcome is deleted only once the written
        // position stored passes it, so before that position its result is written.
        case .resend: return offset < writtenPosition ? .written : .resend
        case .recorded:
            if offset < writtenPosition { return .written }
            let recorded = bytes.dropFirst()
            guard let newline = recorded.firstIndex(of: UInt8(ascii: "\n")) else {
                return .recorded(result: Array(recorded), feedback: nil)
            }
            return .recorded(result: Array(recorded[..<newline]), feedback: Array(recorded[(newline + 1)...]))
        case .duplicate: return .duplicate
        case .settled: return offset < writtenPosition ? .written : .duplicate
        // Another live worker's claim for this message, without an outcome: written if its
        // message is before the written position (the worker lost the partition after writing
        // its result), else that worker is still at it.
        case .otherOwner: return offset < writtenPosition ? .written : .busy
        case .busy: return .busy
        case .throttled: return .throttled
        case .rateLimited: return .rateLimited
        case .unregistered: return .unregistered(TokenVerdict(stored: bytes.dropFirst()))
        }
    }
}
