import APNSCore
import PushKafka
import PushRedis

/// The worker's state in Redis: one record per notification, worker liveness, rate counters,
/// the unregistered-token store and the feedback lock. Each call is one round trip per
/// server (per primary on a Redis Cluster), whatever the number of notifications it covers;
/// a claim takes more only when it meets another worker's claim, a recorded outcome, or an
/// app rate limit.
///
/// Keys (all under ``prefix``; `<T>` is ``tag(token:)``: empty on a server, a hash tag on a
/// cluster, so that every key of one token shares a slot):
/// - `n:<T><resultId>`: the notification's state, with the dedupe TTL:
///   `P|<owner>|<topic>|<partition>|<offset>` while a worker has it claimed,
///   `D|<topic>|<partition>|<offset>|<result JSON>` once its outcome is known, followed by a
///   newline and the `feedback` result JSON when the outcome also published one (an HTTP/2 410).
///   The serialized results never contain a raw newline, so it separates them.
/// - `u:<T><app>:<env>`: hash token → UNIX time Apple reported the token unregistered.
/// - `rd:<T><app>:<token>:<hour>`: the device's count this hour.
/// - `pw:<topic>:<partition>`: the partition's written position: every result of every message
///   before this offset is written to the results topic (the offset the worker commits, kept
///   here as well because a commit can fail during a rebalance). A notification recorded by a
///   message before it needs no result again.
/// - `ph:<topic>:<partition>`: `<offset>|<at>`, left by a worker that handed the partition on
///   (a rebalance, a stop) without committing its offset: every message before `offset` that was
///   produced at or before `at` (UNIX ms) has all its results written, so its next owner skips
///   those messages instead of consuming them again (``handoffs(_:)``).
/// - `w:<owner>`: present while the worker incarnation `owner` is alive (short TTL, refreshed).
/// - `ra:<app>:<second>`: the app's count this second.
/// - `fl:<app>:<env>`: the feedback-polling lock.
/// What a claim reads of a notification. A ``Candidate`` is claimed as it is: a request built
/// for each retained (and released) its four strings.
protocol ClaimSubject {
    var resultId: String { get }
    var partition: Int32 { get }
    var offset: Int64 { get }
    var app: String { get }
    var environment: String { get }
    /// The token in lowercase hex, which places its keys (``NotificationStore/tag(token:)``).
    var tokenHex: String { get }
    /// When the device last registered the token (UNIX seconds).
    var registeredAt: Int64? { get }
    var appPerSecond: Int { get }
    var devicePerHour: Int { get }
}

final class NotificationStore: Sendable {
    /// A notification to claim, for callers that have no ``Candidate``.
    struct ClaimRequest: ClaimSubject, Sendable {
        var resultId: String
        var partition: Int32
        var offset: Int64
        var app: String
        var environment: String
        var tokenHex: String
        var registeredAt: Int64?
        var appPerSecond: Int
        var devicePerHour: Int
    }

    /// What the claim decided for one notification.
    enum ClaimDecision: Sendable, Hashable {
        /// Claimed: send it.
        case send
        /// Claimed from a dead worker that may have sent it: send, marked `possibleDuplicate`.
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
        /// Apple reported the token unregistered at this UNIX time (claimed; do not send).
        case unregistered(since: Int64)
        /// The device is over its per-hour limit (claimed; do not send).
        case rateLimited
    }

    let redis: RedisClient
    let prefix: String
    let owner: String
    /// Where the claim and write round trips report their latency and failures.
    let metrics: WorkerMetrics?

    init(redis: RedisClient, prefix: String, owner: String, metrics: WorkerMetrics? = nil) {
        self.redis = redis
        self.prefix = prefix
        self.owner = owner
        self.metrics = metrics
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

    // MARK: Keys

    /// The hash tag of a token's keys on a cluster: a number below 16,384 from a hash of the
    /// token, so that tokens spread over 16,384 tags whatever they look like; written into keys
    /// as `{` four hex digits `}`. `nil` on a server, where the keys keep their names from
    /// before clusters were supported.
    func tag(token: String) -> UInt16? {
        guard redis.isCluster else { return nil }
        var hash: UInt32 = 0x811C_9DC5  // FNV-1a
        for byte in token.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        return UInt16(hash & 0x3FFF)
    }

    /// Appends `{xxxx}` for a tag, nothing without one.
    static func append(tag: UInt16?, to key: inout [UInt8]) {
        guard let tag else { return }
        func digit(_ value: UInt16) -> UInt8 { value < 10 ? UInt8(ascii: "0") + UInt8(value) : UInt8(ascii: "a") + UInt8(value - 10) }
        key.append(UInt8(ascii: "{"))
        key.append(digit(tag >> 12))
        key.append(digit((tag >> 8) & 15))
        key.append(digit((tag >> 4) & 15))
        key.append(digit(tag & 15))
        key.append(UInt8(ascii: "}"))
    }

    /// `n:<T><resultId>`.
    func appendRecordKey(resultId: String, tag: UInt16?, to key: inout [UInt8]) {
        key += prefix.utf8
        key.append(UInt8(ascii: "n"))
        key.append(UInt8(ascii: ":"))
        Self.append(tag: tag, to: &key)
        key += resultId.utf8
    }

    func recordKey(resultId: String, tag: UInt16?) -> [UInt8] {
        var key: [UInt8] = []
        key.reserveCapacity(prefix.utf8.count + 8 + resultId.utf8.count)
        appendRecordKey(resultId: resultId, tag: tag, to: &key)
        return key
    }

    /// `u:<T><app>:<environment>`.
    func appendUnregisteredKey(app: String, environment: String, tag: UInt16?, to key: inout [UInt8]) {
        key += prefix.utf8
        key.append(UInt8(ascii: "u"))
        key.append(UInt8(ascii: ":"))
        Self.append(tag: tag, to: &key)
        key += app.utf8
        key.append(UInt8(ascii: ":"))
        key += environment.utf8
    }

    /// `rd:<T><app>:<token>:<hour>`.
    func appendDeviceCounterKey(app: String, token: String, hour: Int64, tag: UInt16?, to key: inout [UInt8]) {
        key += prefix.utf8
        key += "rd:".utf8
        Self.append(tag: tag, to: &key)
        key += app.utf8
        key.append(UInt8(ascii: ":"))
        key += token.utf8
        key.append(UInt8(ascii: ":"))
        DecimalText.append(hour, to: &key)
    }

    // MARK: Scripts

    static let claimScript = RedisScript(
        #"""
        -- KEYS: 3 per notification: its record, its app's unregistered tokens, its device counter
        -- for this hour (one slot on a cluster). ARGV: owner, topic, ttl seconds, owners known to
        -- be dead (newline-separated), then 3 per notification: '<partition>|<offset>', token, and
        -- '<registeredAt>|<device limit per hour>|<1 if it may be sent this second, else 0>', or ''
        -- for the usual no registeredAt, no device limit, may be sent.
        -- Numbers passed back to Redis stay strings: a Lua number would be formatted per call.
        local owner, topic, ttl = ARGV[1], ARGV[2], ARGV[3]
        local dead = {}
        for w in string.gmatch(ARGV[4], '[^\n]+') do dead[w] = true end
        local claimed = 'P|' .. owner .. '|' .. topic .. '|'
        local out = {}
        for i = 1, #KEYS / 3 do
          local key, ukey, dkey = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
          local a = 3 * i + 2
          local where, tok, opts = ARGV[a], ARGV[a + 1], ARGV[a + 2]
          local reg, dlim, permit = '', 0, '1'
          if opts ~= '' then
            local r, d, p = string.match(opts, '^([^|]*)|([^|]*)|(.*)$')
            reg, dlim, permit = r, tonumber(d), p
          end
          -- A notification that may be sent is claimed and its earlier state read in one call.
          local state
          if permit == '1' then
            state = redis.call('SET', key, claimed .. where, 'NX', 'GET', 'EX', ttl)
          else
            state = redis.call('GET', key)
          end
          local code
          if state then
            local msg = topic .. '|' .. where
            if string.sub(state, 1, 2) == 'D|' then
              local rest = string.sub(state, 3)
              if string.sub(rest, 1, #msg + 1) == msg .. '|' then code = 'E' .. string.sub(rest, #msg + 2) else code = 'X' end
            else
              local sowner, smsg = string.match(state, '^P|([^|]*)|(.*)$')
              if smsg ~= msg then
                code = 'X'
              elseif sowner == owner or dead[sowner] then
                redis.call('SET', key, claimed .. where, 'EX', ttl)
                code = 'R'
              else
                code = 'O' .. sowner
              end
            end
          else
            local unreg = redis.call('HGET', ukey, tok)
            if unreg and (reg == '' or tonumber(reg) <= tonumber(unreg)) then
              code = 'U' .. unreg
            elseif permit ~= '1' then
              code = 'T'
            elseif dlim > 0 then
              local count = redis.call('INCR', dkey)
              if count == 1 then redis.call('EXPIRE', dkey, '3700') end
              if count > dlim then code = 'L' end
            end
            code = code or 'S'
            if permit ~= '1' and code ~= 'T' then redis.call('SET', key, claimed .. where, 'EX', ttl) end
          end
          out[#out + 1] = code
        end
        return out
        """#)

    /// KEYS[1]: an app's counter for this second; ARGV: wanted, limit. Takes up to `wanted` of
    /// what is left of the limit and returns how many it took.
    /// The counter lives a minute: long enough for every worker, whatever its clock's offset or
    /// a slow round trip, to find it while its second is current.
    static let takePermitsScript = RedisScript(
        #"""
        local used = tonumber(redis.call('GET', KEYS[1]) or '0')
        local n = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - used)
        if n <= 0 then return 0 end
        if redis.call('INCRBY', KEYS[1], n) == n then redis.call('EXPIRE', KEYS[1], '60') end
        return n
        """#)

    /// KEYS[1]: an app's counter for this second; ARGV[1]: permits taken but not used.
    static let returnPermitsScript = RedisScript(
        #"""
        if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECRBY', KEYS[1], ARGV[1]) end
        return 0
        """#)

    /// KEYS: written positions (one slot on a cluster); ARGV: ttl, then one offset per key.
    /// Sets each key to its offset unless it already holds a later one.
    static let advancePositionsScript = RedisScript(
        #"""
        for i, key in ipairs(KEYS) do
          local offset = tonumber(ARGV[i + 1])
          if offset > tonumber(redis.call('GET', key) or '-1') then redis.call('SET', key, ARGV[i + 1], 'EX', ARGV[1]) end
        end
        return 0
        """#)

    static let scripts = [claimScript, takePermitsScript, returnPermitsScript, advancePositionsScript, summaryScript]

    /// Loads the scripts (on every primary of a cluster) so that later calls meet no `NOSCRIPT`.
    func prepare() async throws(RedisError) {
        try await redis.load(Self.scripts)
    }

    // MARK: Claims

    /// Claims notifications of messages of `topic`: one round trip in the common case (per
    /// primary on a cluster), one more to take an app rate limit's permits first, and one more
    /// each when the claim meets another worker's claim (is it alive?), a recorded outcome
    /// (is its message's result written?), or permits left unused (given back).
    func claim<Request: ClaimSubject>(
        topic: String, _ requests: [Request], ttlSeconds: Int, nowMilliseconds: Int64
    ) async throws(RedisError) -> [ClaimDecision] {
        guard !requests.isEmpty else { return [] }
        let tags = requests.map { tag(token: $0.tokenHex) }
        let hour = nowMilliseconds / 3_600_000
        let (permits, taken) = try await takePermits(requests, nowMilliseconds: nowMilliseconds)
        var codes = try await runClaims(
            topic: topic, requests, Array(requests.indices), tags: tags, hour: hour, permits: permits, dead: [], ttlSeconds: ttlSeconds)

        // Claims of other workers for the same message: taken over if the worker is dead.
        let others = codes.indices.filter { codes[$0].first == UInt8(ascii: "O") }
        if !others.isEmpty {
            let dead = try await deadOwners(Set(others.map { String(decoding: codes[$0].dropFirst(), as: UTF8.self) }))
            let takeOver = others.filter { dead.contains(String(decoding: codes[$0].dropFirst(), as: UTF8.self)) }
            if !takeOver.isEmpty {
                let again = try await runClaims(
                    topic: topic, requests, takeOver, tags: tags, hour: hour, permits: permits, dead: dead, ttlSeconds: ttlSeconds)
                for (index, code) in zip(takeOver, again) { codes[index] = code }
            }
        }

        // Outcomes recorded by this same message: is its result written already?
        var written: [Int32: Int64] = [:]
        let recorded = Set(codes.indices.filter { codes[$0].first == UInt8(ascii: "E") }.map { requests[$0].partition })
        if !recorded.isEmpty {
            let partitions = recorded.sorted()
            let replies = try await measured { () throws(RedisError) in
                try await redis.pipeline(partitions.map { [Array("GET".utf8), Array("\(prefix)pw:\(topic):\($0)".utf8)] })
            }
            for (partition, reply) in zip(partitions, replies) {
                if let message = reply.errorMessage { throw RedisError(.server("ERR"), "Redis refused a written position: \(message)") }
                written[partition] = reply.string.flatMap { Int64($0) } ?? -1
            }
        }

        // Requests are read in place here and below: a copy of one retains its four strings.
        let decisions = try codes.indices.map { index throws(RedisError) in
            let code = codes[index]
            return try Self.decision(
                code, offset: requests[index].offset,
                writtenPosition: code.first == UInt8(ascii: "E") ? written[requests[index].partition] ?? -1 : -1)
        }
        try await returnUnused(taken, requests: requests, permits: permits, decisions: decisions)
        return decisions
    }

    /// The app rate limits' permits for this second: which requests may be sent (all of them
    /// for apps without a limit), and how many each app's counter gave.
    private func takePermits<Request: ClaimSubject>(
        _ requests: [Request], nowMilliseconds: Int64
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
                wanted.append((app, Array("\(prefix)ra:\(app):\(second)".utf8), requests[index].appPerSecond, [index]))
            }
        }
        var permits = [Bool](repeating: true, count: requests.count)
        guard !wanted.isEmpty else { return (permits, []) }
        let commands = wanted.map { w in
            Self.takePermitsScript.evalshaCommand(keys: [w.key], args: [Array(String(w.requests.count).utf8), Array(String(w.limit).utf8)])
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands, scripts: [Self.takePermitsScript]) }
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
        _ taken: [(app: String, key: [UInt8], count: Int)], requests: [Request], permits: [Bool], decisions: [ClaimDecision]
    ) async throws(RedisError) {
        guard !taken.isEmpty else { return }
        var used: [String: Int] = [:]
        for (index, decision) in decisions.enumerated() where permits[index] && requests[index].appPerSecond > 0 && decision == .send {
            used[requests[index].app, default: 0] += 1
        }
        var commands: [[[UInt8]]] = []
        for t in taken {
            let unused = t.count - (used[t.app] ?? 0)
            if unused > 0 { commands.append(Self.returnPermitsScript.evalshaCommand(keys: [t.key], args: [Array(String(unused).utf8)])) }
        }
        guard !commands.isEmpty else { return }
        _ = try await measured { () throws(RedisError) in try await redis.pipeline(commands, scripts: [Self.returnPermitsScript]) }
    }

    /// Claims the requests at `indices`, all in one pipeline, and returns their codes (those
    /// of the claim script) in the order of `indices`.
    ///
    /// A usual notification (no `registeredAt`, no device limit, a permit to be sent) is claimed
    /// with plain commands: `SET … NX GET` for its record and, for each app's unregistered
    /// tokens, one `HMGET` of the tokens; Redis runs a command called from Lua at about twice
    /// the cost of the same command sent as it is (`docs/architecture.md#the-claim`). A usual
    /// notification whose `SET` finds a state (a claim or a record) is then decided by the
    /// script, in one more round trip, which reads that state as it reads every other. The
    /// other notifications go through the script at once.
    private func runClaims<Request: ClaimSubject>(
        topic: String, _ requests: [Request], _ indices: [Int], tags: [UInt16?], hour: Int64, permits: [Bool],
        dead: Set<String>, ttlSeconds: Int
    ) async throws(RedisError) -> [[UInt8]] {
        var usual: [Int] = []
        var scripted: [Int] = []
        for index in indices {
            if dead.isEmpty && requests[index].registeredAt == nil && requests[index].devicePerHour == 0 && permits[index] {
                usual.append(index)
            } else {
                scripted.append(index)
            }
        }
        var commands = RedisCommands(capacity: 256 + indices.count * (3 * prefix.utf8.count + 320))
        let plain = appendPlainClaims(topic: topic, requests, usual, tags: tags, ttlSeconds: ttlSeconds, to: &commands)
        let groups = appendClaimScript(
            topic: topic, requests, scripted, tags: tags, hour: hour, permits: permits, dead: dead, ttlSeconds: ttlSeconds,
            to: &commands)
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands, scripts: [Self.claimScript]) }
        guard replies.count == commands.count else {
            throw RedisError(.protocol, "the claim's pipeline of \(commands.count) commands got \(replies.count) replies")
        }
        var codes = [[UInt8]?](repeating: nil, count: requests.count)
        let (found, plainFailures) = try Self.readPlainClaims(plain, replies: replies[..<plain.commands], into: &codes)
        let scriptFailures = try Self.readClaimScript(groups, replies: replies[plain.commands...], into: &codes)
        try checkFailures(plainFailures + scriptFailures, of: plain.groups.count + groups.count)
        if !found.isEmpty {
            // The script decides what they found, as it decides for every other notification.
            var again = RedisCommands(capacity: 256 + found.count * (3 * prefix.utf8.count + 320))
            let groups = appendClaimScript(
                topic: topic, requests, found, tags: tags, hour: hour, permits: permits, dead: dead, ttlSeconds: ttlSeconds, to: &again)
            let replies = try await measured { () throws(RedisError) in try await redis.pipeline(again, scripts: [Self.claimScript]) }
            guard replies.count == again.count else {
                throw RedisError(.protocol, "the claim's pipeline of \(again.count) commands got \(replies.count) replies")
            }
            try checkFailures(try Self.readClaimScript(groups, replies: replies[...], into: &codes), of: groups.count)
        }
        return indices.map { codes[$0]! }
    }

    /// A claim's commands that failed, one error message per slot: on a cluster, a slot
    /// without a primary answers `W` (busy) for its requests, and the claim fails only when
    /// every slot did; on a server, any failure fails the claim.
    private func checkFailures(_ failures: [String], of groups: Int) throws(RedisError) {
        guard let first = failures.first, !redis.isCluster || failures.count == groups else { return }
        throw RedisError(.server("ERR"), "the claim failed: \(first)")
    }

    /// The code of a usual notification claimed with plain commands and not unregistered.
    private static let sendCode = [UInt8(ascii: "S")]

    /// The plain commands of a pipeline's usual claims: which requests each slot's commands
    /// cover, and how many commands there are.
    private struct PlainClaims {
        /// Per slot (one on a server): the requests, whose `SET`s come first in that order, and
        /// the requests of each app's `HMGET` after them.
        var groups: [(sets: [Int], lookups: [[Int]])] = []
        var commands = 0
    }

    /// Appends, per slot, a `SET <record> P|<owner>|<topic>|<partition>|<offset> NX GET EX
    /// <ttl>` for each request, then an `HMGET <app's unregistered tokens> <tokens…>` for each
    /// app and environment among them.
    private func appendPlainClaims<Request: ClaimSubject>(
        topic: String, _ requests: [Request], _ indices: [Int], tags: [UInt16?], ttlSeconds: Int,
        to commands: inout RedisCommands
    ) -> PlainClaims {
        var plain = PlainClaims()
        for group in redis.groupedBySlot(indices, key: { recordKey(resultId: requests[$0].resultId, tag: tags[$0]) }) {
            var lookups: [[Int]] = []
            for index in group {
                commands.begin(argumentCount: 7)
                commands.append("SET")
                commands.appendKey { appendRecordKey(resultId: requests[index].resultId, tag: tags[index], to: &$0) }
                commands.append { value in
                    value += "P|".utf8
                    value += owner.utf8
                    value.append(UInt8(ascii: "|"))
                    value += topic.utf8
                    value.append(UInt8(ascii: "|"))
                    DecimalText.append(Int64(requests[index].partition), to: &value)
                    value.append(UInt8(ascii: "|"))
                    DecimalText.append(requests[index].offset, to: &value)
                }
                commands.append("NX")
                commands.append("GET")
                commands.append("EX")
                commands.append(Int64(ttlSeconds))
                // Most batches are of one app: the last lookup is tried first.
                if let place = lookups.lastIndex(where: {
                    requests[$0[0]].app == requests[index].app && requests[$0[0]].environment == requests[index].environment
                }) {
                    lookups[place].append(index)
                } else {
                    lookups.append([index])
                }
            }
            for lookup in lookups {
                let first = requests[lookup[0]]
                commands.begin(argumentCount: 2 + lookup.count)
                commands.append("HMGET")
                commands.appendKey {
                    appendUnregisteredKey(app: first.app, environment: first.environment, tag: tags[lookup[0]], to: &$0)
                }
                for index in lookup { commands.append(requests[index].tokenHex) }
            }
            plain.groups.append((group, lookups))
            plain.commands += group.count + lookups.count
        }
        return plain
    }

    /// Reads the replies of ``appendPlainClaims``: a notification claimed (its `SET` found
    /// nothing) gets `S`, or `U<since>` when its token is stored as unregistered; one whose
    /// `SET` found a state is returned, for the script to decide. A slot whose commands failed
    /// gets `W` (busy) for its requests, and its error is returned.
    private static func readPlainClaims(
        _ plain: PlainClaims, replies: ArraySlice<RedisValue>, into codes: inout [[UInt8]?]
    ) throws(RedisError) -> (found: [Int], failures: [String]) {
        var found: [Int] = []
        var failures: [String] = []
        var reply = replies.startIndex
        for (sets, lookups) in plain.groups {
            var failure: String? = nil
            for index in sets {
                let answer = replies[reply]
                reply += 1
                if let message = answer.errorMessage {
                    failure = message
                } else if answer.isNull {
                    codes[index] = sendCode  // claimed; the lookup below may find it unregistered
                } else if answer.bytes != nil {
                    found.append(index)
                } else {
                    throw RedisError(.protocol, "a claim's SET answered \(answer)")
                }
            }
            for lookup in lookups {
                let answer = replies[reply]
                reply += 1
                if let message = answer.errorMessage {
                    failure = message
                    continue
                }
                guard let items = answer.array, items.count == lookup.count else {
                    throw RedisError(.protocol, "the unregistered tokens' HMGET answered \(answer) for \(lookup.count) tokens")
                }
                for (index, item) in zip(lookup, items) where codes[index] != nil {
                    if let since = item.bytes { codes[index] = [UInt8(ascii: "U")] + since }
                }
            }
            if let failure {
                failures.append(failure)
                if !found.isEmpty { found.removeAll { sets.contains($0) } }
                for index in sets { codes[index] = [UInt8(ascii: "W")] }
            }
        }
        return (found, failures)
    }

    /// Appends a call of the claim script for the requests at `indices`: one call on a server,
    /// one per hash slot on a cluster. Returns the requests of each call.
    private func appendClaimScript<Request: ClaimSubject>(
        topic: String, _ requests: [Request], _ indices: [Int], tags: [UInt16?], hour: Int64, permits: [Bool],
        dead: Set<String>, ttlSeconds: Int, to commands: inout RedisCommands
    ) -> [[Int]] {
        let groups = redis.groupedBySlot(indices) { recordKey(resultId: requests[$0].resultId, tag: tags[$0]) }
        let deadOwners = dead.sorted().joined(separator: "\n")
        for group in groups {
            commands.beginEvalsha(Self.claimScript, keyCount: group.count * 3, argumentCount: 4 + group.count * 3)
            // The requests are read in place (`requests[index].…`): a copy of one retains its strings.
            for index in group {
                let tag = tags[index]
                commands.appendKey { appendRecordKey(resultId: requests[index].resultId, tag: tag, to: &$0) }
                commands.append {
                    appendUnregisteredKey(app: requests[index].app, environment: requests[index].environment, tag: tag, to: &$0)
                }
                if requests[index].devicePerHour == 0 {
                    // Without a device limit the counter is not touched: the record's key
                    // stands in for it (the same slot).
                    commands.append { appendRecordKey(resultId: requests[index].resultId, tag: tag, to: &$0) }
                } else {
                    commands.append {
                        appendDeviceCounterKey(app: requests[index].app, token: requests[index].tokenHex, hour: hour, tag: tag, to: &$0)
                    }
                }
            }
            commands.append(owner)
            commands.append(topic)
            commands.append(Int64(ttlSeconds))
            commands.append(deadOwners)
            for index in group {
                commands.append { place in
                    DecimalText.append(Int64(requests[index].partition), to: &place)
                    place.append(UInt8(ascii: "|"))
                    DecimalText.append(requests[index].offset, to: &place)
                }
                commands.append(requests[index].tokenHex)
                if requests[index].registeredAt == nil && requests[index].devicePerHour == 0 && permits[index] {
                    commands.append([UInt8]())  // the usual options, in two bytes
                } else {
                    commands.append { options in
                        if let registeredAt = requests[index].registeredAt { DecimalText.append(registeredAt, to: &options) }
                        options.append(UInt8(ascii: "|"))
                        DecimalText.append(Int64(requests[index].devicePerHour), to: &options)
                        options.append(UInt8(ascii: "|"))
                        options.append(permits[index] ? UInt8(ascii: "1") : UInt8(ascii: "0"))
                    }
                }
            }
        }
        return groups
    }

    /// Reads the replies of ``appendClaimScript``'s calls into `codes`. A call that failed gets
    /// `W` (busy) for its requests, and its error is returned.
    private static func readClaimScript(
        _ groups: [[Int]], replies: ArraySlice<RedisValue>, into codes: inout [[UInt8]?]
    ) throws(RedisError) -> [String] {
        var failures: [String] = []
        for (group, reply) in zip(groups, replies) {
            if let message = reply.errorMessage {
                for index in group { codes[index] = [UInt8(ascii: "W")] }
                failures.append(message)
                continue
            }
            guard let items = reply.array, items.count == group.count else {
                throw RedisError(.protocol, "the claim script answered \(reply) for \(group.count) notifications")
            }
            for (index, item) in zip(group, items) {
                guard let bytes = item.bytes, !bytes.isEmpty else { throw RedisError(.protocol, "the claim script answered \(item)") }
                codes[index] = bytes
            }
        }
        return failures
    }

    /// The decision a claim script's code stands for.
    static func decision(_ bytes: [UInt8], offset: Int64, writtenPosition: Int64) throws(RedisError) -> ClaimDecision {
        switch bytes.first {
        case UInt8(ascii: "S"): return .send
        case UInt8(ascii: "R"): return .resend
        case UInt8(ascii: "E"):
            if offset < writtenPosition { return .written }
            let recorded = bytes.dropFirst()
            guard let newline = recorded.firstIndex(of: UInt8(ascii: "\n")) else {
                return .recorded(result: Array(recorded), feedback: nil)
            }
            return .recorded(result: Array(recorded[..<newline]), feedback: Array(recorded[(newline + 1)...]))
        case UInt8(ascii: "X"): return .duplicate
        case UInt8(ascii: "W"), UInt8(ascii: "O"): return .busy
        case UInt8(ascii: "T"): return .throttled
        case UInt8(ascii: "L"): return .rateLimited
        case UInt8(ascii: "U"): return .unregistered(since: Int64(String(decoding: bytes.dropFirst(), as: UTF8.self)) ?? 0)
        default: throw RedisError(.protocol, "the claim script answered \(String(decoding: bytes, as: UTF8.self))")
        }
    }

    /// Which of `owners` (worker incarnations holding claims) are no longer alive: their
    /// liveness keys are gone. One round trip.
    func deadOwners(_ owners: Set<String>) async throws(RedisError) -> Set<String> {
        let list = owners.sorted()
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(list.map { [Array("EXISTS".utf8), Array("\(prefix)w:\($0)".utf8)] })
        }
        var dead = Set<String>()
        for (owner, reply) in zip(list, replies) {
            guard let exists = reply.int else { throw RedisError(.protocol, "Redis answered EXISTS with \(reply)") }
            if exists == 0 { dead.insert(owner) }
        }
        return dead
    }

    // MARK: Hand-offs

    /// Where a partition was handed on without a commit: its messages before `offset` that were
    /// produced at or before `at` (UNIX ms) have all their results written.
    struct HandoffMark: Sendable, Hashable {
        var offset: Int64
        var at: Int64

        /// Whether the message at `offset`, produced at `timestamp`, needs nothing more. A message
        /// produced after the hand-off is not one of its owner's, whatever its offset (the
        /// topic was deleted and made again), so it is consumed as usual, as is one without
        /// a timestamp.
        func covers(offset: Int64, timestamp: Int64?) -> Bool {
            guard let timestamp else { return false }
            return offset < self.offset && timestamp <= at
        }
    }

    private func handoffKey(_ partition: TopicPartition) -> [UInt8] {
        Array("\(prefix)ph:\(partition.topic):\(partition.partition)".utf8)
    }

    /// Leaves hand-off marks for `positions` (written positions of partitions handed on without
    /// a commit), made at `at`. One round trip (per primary on a cluster).
    func storeHandoffs(_ positions: [TopicPartitionOffset], at: Int64, ttlSeconds: Int) async throws(RedisError) {
        guard !positions.isEmpty else { return }
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(
                positions.map {
                    [
                        Array("SET".utf8), handoffKey($0.topicPartition), Array("\($0.offset)|\(at)".utf8), Array("EX".utf8),
                        Array("\(ttlSeconds)".utf8),
                    ]
                })
        }
        if let message = replies.lazy.compactMap(\.errorMessage).first {
            throw RedisError(.server("ERR"), "Redis refused a hand-off mark: \(message)")
        }
    }

    /// The hand-off marks of `partitions` that have one. One round trip (per primary on a cluster).
    func handoffs(_ partitions: [TopicPartition]) async throws(RedisError) -> [TopicPartition: HandoffMark] {
        guard !partitions.isEmpty else { return [:] }
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(partitions.map { [Array("GET".utf8), handoffKey($0)] })
        }
        var marks: [TopicPartition: HandoffMark] = [:]
        for (partition, reply) in zip(partitions, replies) {
            if let message = reply.errorMessage { throw RedisError(.server("ERR"), "Redis refused a hand-off mark: \(message)") }
            guard let text = reply.string else { continue }
            let parts = text.split(separator: "|")
            guard parts.count == 2, let offset = Int64(parts[0]), let at = Int64(parts[1]) else {
                throw RedisError(.protocol, "the hand-off mark of \(partition) is \"\(text.prefix(64))\", not <offset>|<at>")
            }
            marks[partition] = HandoffMark(offset: offset, at: at)
        }
        return marks
    }

    /// Records outcomes (each with the `feedback` result produced with it, re-emitted with it
    /// after a crash), unregistered tokens, released claims (result id and token) and written
    /// positions (see `pw:` above), in one round trip (per primary on a cluster). The outcomes
    /// are read where they are: copying their fields into records of the store's own retained
    /// each string and buffer in them (1.5% of the worker's samples in a profile).
    func write(
        records: [RecordedResult], unregistered: [(app: String, environment: String, token: String, since: Int64)],
        released: [(resultId: String, token: String)], positions: [TopicPartitionOffset] = [], ttlSeconds: Int
    ) async throws(RedisError) {
        var commands = RedisCommands(
            capacity: records.reduce(256) {
                $0 + $1.result.value.count + ($1.feedback?.value.count ?? 0) + $1.ref.partition.topic.utf8.count + 160
            }
                + (unregistered.count + released.count) * 160 + positions.count * 80)
        for record in records {
            commands.begin(argumentCount: 5)
            commands.append("SET")
            let tag = tag(token: record.token)
            commands.appendKey { appendRecordKey(resultId: record.resultId, tag: tag, to: &$0) }
            commands.append { value in
                value.append(UInt8(ascii: "D"))
                value.append(UInt8(ascii: "|"))
                value += record.ref.partition.topic.utf8
                value.append(UInt8(ascii: "|"))
                DecimalText.append(Int64(record.ref.partition.partition), to: &value)
                value.append(UInt8(ascii: "|"))
                DecimalText.append(record.ref.offset, to: &value)
                value.append(UInt8(ascii: "|"))
                value += record.result.value
                if let feedback = record.feedback {
                    value.append(UInt8(ascii: "\n"))
                    value += feedback.value
                }
            }
            commands.append("EX")
            commands.append(Int64(ttlSeconds))
        }
        for entry in unregistered {
            commands.begin(argumentCount: 4)
            commands.append("HSET")
            let tag = tag(token: entry.token)
            commands.appendKey { appendUnregisteredKey(app: entry.app, environment: entry.environment, tag: tag, to: &$0) }
            commands.append(entry.token)
            commands.append(entry.since)
        }
        for entry in released {
            commands.begin(argumentCount: 2)
            commands.append("DEL")
            let tag = tag(token: entry.token)
            commands.appendKey { appendRecordKey(resultId: entry.resultId, tag: tag, to: &$0) }
        }
        // Only ever forward: a partition's new owner starts behind the position its previous
        // owner reached, and must not move it back.
        let positionKeys = positions.map { Array("\(prefix)pw:\($0.topic):\($0.partition)".utf8) }
        for group in redis.groupedBySlot(Array(positions.indices), key: { positionKeys[$0] }) {
            commands.beginEvalsha(Self.advancePositionsScript, keyCount: group.count, argumentCount: 1 + group.count)
            for index in group { commands.appendKey(positionKeys[index]) }
            commands.append(Int64(ttlSeconds))
            for index in group { commands.append(positions[index].offset) }
        }
        guard !commands.isEmpty else { return }
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(commands, scripts: [Self.advancePositionsScript])
        }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused a state update: \(failure.errorMessage ?? "")")
        }
    }

    /// Marks this worker incarnation alive for `ttl`.
    func heartbeat(ttlMilliseconds: Int) async throws(RedisError) {
        try await redis.send(["SET", "\(prefix)w:\(owner)", "1", "PX", String(ttlMilliseconds)])
    }

    /// Marks this incarnation gone, so its claims can be taken over at once.
    func retire() async throws(RedisError) {
        try await redis.send(["DEL", "\(prefix)w:\(owner)"])
    }

    /// Takes the feedback lock for `app`/`environment` for `ttl` if nobody holds it.
    func tryFeedbackLock(app: String, environment: String, ttlMilliseconds: Int) async throws(RedisError) -> Bool {
        let reply = try await redis.send(["SET", "\(prefix)fl:\(app):\(environment)", owner, "NX", "PX", String(ttlMilliseconds)])
        return !reply.isNull
    }
}
