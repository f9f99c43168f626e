import APNSCore
import PushKafka
import PushRedis

/// The worker's state in Redis: one record per notification, worker liveness, rate counters,
/// the unregistered-token store and the feedback lock. Every call is one round trip, whatever
/// the number of notifications it covers.
///
/// Keys (all under ``prefix``):
/// - `n:<resultId>`: the notification's state, with the dedupe TTL:
///   `P|<owner>|<topic>|<partition>|<offset>` while a worker has it claimed,
///   `D|<topic>|<partition>|<offset>|<result JSON>` once its outcome is known, followed by a
///   newline and the `feedback` result JSON when the outcome also published one (an HTTP/2 410).
///   The serialized results never contain a raw newline, so it separates them.
/// - `pw:<topic>:<partition>`: the partition's written position: every result of every message
///   before this offset is written to the results topic (the offset the worker commits, kept
///   here as well because a commit can fail during a rebalance). A notification recorded by a
///   message before it needs no result again.
/// - `w:<owner>`: present while the worker incarnation `owner` is alive (short TTL, refreshed).
/// - `u:<app>:<env>`: hash token → UNIX time Apple reported the token unregistered.
/// - `ra:<app>:<second>`, `rd:<app>:<token>:<hour>`: rate counters.
/// - `fl:<app>:<env>`: the feedback-polling lock.
final class NotificationStore: Sendable {
    /// A notification to claim.
    struct ClaimRequest: Sendable {
        var resultId: String
        var partition: Int32
        var offset: Int64
        var app: String
        var environment: String
        var token: String
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
        /// A live worker has it claimed for this same message: try again later.
        case busy
        /// The app is over its per-second rate: try again next second (not claimed).
        case throttled
        /// Apple reported the token unregistered at this UNIX time (claimed; do not send).
        case unregistered(since: Int64)
        /// The device is over its per-hour limit (claimed; do not send).
        case rateLimited
    }

    let redis: RedisConnection
    let prefix: String
    let owner: String
    /// Where the claim and write round trips report their latency and failures.
    let metrics: WorkerMetrics?

    init(redis: RedisConnection, prefix: String, owner: String, metrics: WorkerMetrics? = nil) {
        self.redis = redis
        self.prefix = prefix
        self.owner = owner
        self.metrics = metrics
    }

    /// Runs one round trip, reporting its latency, or its failure, to the metrics.
    private func measured<T>(_ body: () async throws(RedisError) -> T) async throws(RedisError) -> T {
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

    static let claimScript = RedisScript(
        #"""
        -- ARGV: owner, topic, ttl seconds, now ms, key prefix, number of apps A, then 4 per app:
        -- app, env, app limit/s, device limit/h; then 5 per notification:
        -- resultId, '<partition>|<offset>', app number (1...A), token, registeredAt ('' = none).
        -- Numbers passed back to Redis stay strings: a Lua number would be formatted per call.
        local owner, topic, ttl, now, p = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
        local second = math.floor(now / 1000)
        local hour = math.floor(now / 3600000)
        local apps = {}
        local first = 7 + 4 * tonumber(ARGV[6])
        for i = 7, first - 1, 4 do
          local app, env, alim, dlim = ARGV[i], ARGV[i+1], tonumber(ARGV[i+2]), tonumber(ARGV[i+3])
          apps[#apps + 1] = {app = app, alim = alim, dlim = dlim, ukey = p .. 'u:' .. app .. ':' .. env,
                             akey = p .. 'ra:' .. app .. ':' .. string.format('%d', second),
                             dprefix = p .. 'rd:' .. app .. ':', dsuffix = ':' .. string.format('%d', hour)}
        end
        local claimed = 'P|' .. owner .. '|' .. topic .. '|'
        local written = {}
        local out = {}
        for i = first, #ARGV, 5 do
          local rid, where, a, tok, reg = ARGV[i], ARGV[i+1], apps[tonumber(ARGV[i+2])], ARGV[i+3], ARGV[i+4]
          local key = p .. 'n:' .. rid
          local msg = topic .. '|' .. where
          local state = redis.call('GET', key)
          local code
          if state then
            if string.sub(state, 1, 2) == 'D|' then
              local rest = string.sub(state, 3)
              if string.sub(rest, 1, #msg + 1) == msg .. '|' then
                local part, off = string.match(where, '^(%d+)|(%d+)$')
                if written[part] == nil then
                  written[part] = tonumber(redis.call('GET', p .. 'pw:' .. topic .. ':' .. part) or '-1')
                end
                if tonumber(off) < written[part] then code = 'P' else code = 'E' .. string.sub(rest, #msg + 2) end
              else
                code = 'X'
              end
            else
              local sowner, smsg = string.match(state, '^P|([^|]*)|(.*)$')
              if smsg ~= msg then
                code = 'X'
              elseif sowner ~= owner and redis.call('EXISTS', p .. 'w:' .. sowner) == 1 then
                code = 'W'
              else
                redis.call('SET', key, claimed .. where, 'EX', ttl)
                code = 'R'
              end
            end
          else
            local unreg = redis.call('HGET', a.ukey, tok)
            if unreg and (reg == '' or tonumber(reg) <= tonumber(unreg)) then
              code = 'U' .. unreg
            end
            if not code and a.alim > 0 and tonumber(redis.call('GET', a.akey) or '0') >= a.alim then
              code = 'T'
            end
            if not code and a.dlim > 0 then
              local dkey = a.dprefix .. tok .. a.dsuffix
              local count = redis.call('INCR', dkey)
              if count == 1 then redis.call('EXPIRE', dkey, '3700') end
              if count > a.dlim then code = 'L' end
            end
            if not code then
              if a.alim > 0 then
                if redis.call('INCR', a.akey) == 1 then redis.call('EXPIRE', a.akey, '2') end
              end
              code = 'S'
            end
            if code ~= 'T' then redis.call('SET', key, claimed .. where, 'EX', ttl) end
          end
          out[#out + 1] = code
        end
        return out
        """#)

    /// Loads the scripts so that later calls need no `NOSCRIPT` fallback.
    func prepare() async throws(RedisError) {
        _ = try await redis.scriptLoad(Self.claimScript.source)
        _ = try await redis.scriptLoad(Self.summaryScript.source)
    }

    /// Claims notifications of messages of `topic`, in one round trip.
    func claim(
        topic: String, _ requests: [ClaimRequest], ttlSeconds: Int, nowMilliseconds: Int64
    ) async throws(RedisError) -> [ClaimDecision] {
        guard !requests.isEmpty else { return [] }
        // Each (app, environment, limits) once, numbered from 1 in the order first seen.
        struct AppKey: Hashable {
            var app: String
            var environment: String
            var appPerSecond: Int
            var devicePerHour: Int
        }
        var appNumbers: [AppKey: Int] = [:]
        var appArgs: [[UInt8]] = []
        var numbers: [Int] = []
        numbers.reserveCapacity(requests.count)
        var last: (key: AppKey, number: Int)?
        for r in requests {
            let key = AppKey(app: r.app, environment: r.environment, appPerSecond: r.appPerSecond, devicePerHour: r.devicePerHour)
            if let last, last.key == key {
                numbers.append(last.number)
                continue
            }
            let number: Int
            if let known = appNumbers[key] {
                number = known
            } else {
                number = appNumbers.count + 1
                appNumbers[key] = number
                appArgs += [
                    Array(r.app.utf8), Array(r.environment.utf8), Array(String(r.appPerSecond).utf8), Array(String(r.devicePerHour).utf8),
                ]
            }
            numbers.append(number)
            last = (key, number)
        }
        var args: [[UInt8]] = [
            Array(owner.utf8), Array(topic.utf8), Array(String(ttlSeconds).utf8),
            Array(String(nowMilliseconds).utf8), Array(prefix.utf8), Array(String(appNumbers.count).utf8),
        ]
        args.reserveCapacity(args.count + appArgs.count + requests.count * 5)
        args += appArgs
        for (r, number) in zip(requests, numbers) {
            args.append(Array(r.resultId.utf8))
            var place: [UInt8] = []
            place.reserveCapacity(24)
            DecimalText.append(Int64(r.partition), to: &place)
            place.append(UInt8(ascii: "|"))
            DecimalText.append(r.offset, to: &place)
            args.append(place)
            args.append(number < 10 ? [UInt8(ascii: "0") + UInt8(number)] : Array(String(number).utf8))
            args.append(Array(r.token.utf8))
            if let registeredAt = r.registeredAt {
                var bytes: [UInt8] = []
                DecimalText.append(registeredAt, to: &bytes)
                args.append(bytes)
            } else {
                args.append([])
            }
        }
        let reply = try await measured { () throws(RedisError) in try await redis.evalsha(Self.claimScript, keys: [], args: args) }
        guard let items = reply.array, items.count == requests.count else {
            throw RedisError(.protocol, "the claim script answered \(reply) for \(requests.count) notifications")
        }
        return try items.map { item throws(RedisError) in
            guard let bytes = item.bytes, let first = bytes.first else {
                throw RedisError(.protocol, "the claim script answered \(item)")
            }
            switch first {
            case UInt8(ascii: "S"): return .send
            case UInt8(ascii: "R"): return .resend
            case UInt8(ascii: "E"):
                let recorded = bytes.dropFirst()
                guard let newline = recorded.firstIndex(of: UInt8(ascii: "\n")) else {
                    return .recorded(result: Array(recorded), feedback: nil)
                }
                return .recorded(result: Array(recorded[..<newline]), feedback: Array(recorded[(newline + 1)...]))
            case UInt8(ascii: "P"): return .written
            case UInt8(ascii: "X"): return .duplicate
            case UInt8(ascii: "W"): return .busy
            case UInt8(ascii: "T"): return .throttled
            case UInt8(ascii: "L"): return .rateLimited
            case UInt8(ascii: "U"): return .unregistered(since: Int64(String(decoding: bytes.dropFirst(), as: UTF8.self)) ?? 0)
            default: throw RedisError(.protocol, "the claim script answered \(item)")
            }
        }
    }

    /// A notification outcome to record before its result is produced.
    struct Record: Sendable {
        var resultId: String
        var topic: String
        var partition: Int32
        var offset: Int64
        var result: [UInt8]
        /// The `feedback` result produced with this one, re-emitted with it after a crash.
        var feedback: [UInt8]? = nil
    }

    /// Records outcomes, unregistered tokens, released claims and written positions (see
    /// `pw:` above), in one round trip.
    func write(
        records: [Record], unregistered: [(app: String, environment: String, token: String, since: Int64)],
        released: [String], positions: [TopicPartitionOffset] = [], ttlSeconds: Int
    ) async throws(RedisError) {
        var commands: [[[UInt8]]] = []
        commands.reserveCapacity(records.count + unregistered.count + released.count + positions.count)
        let ttl = Array(String(ttlSeconds).utf8)
        let set = Array("SET".utf8), ex = Array("EX".utf8), keyPrefix = Array("\(prefix)n:".utf8)
        for record in records {
            var value: [UInt8] = []
            value.reserveCapacity(record.topic.utf8.count + 24 + record.result.count + (record.feedback.map { $0.count + 1 } ?? 0))
            value += [UInt8(ascii: "D"), UInt8(ascii: "|")]
            value += record.topic.utf8
            value.append(UInt8(ascii: "|"))
            DecimalText.append(Int64(record.partition), to: &value)
            value.append(UInt8(ascii: "|"))
            DecimalText.append(record.offset, to: &value)
            value.append(UInt8(ascii: "|"))
            value += record.result
            if let feedback = record.feedback {
                value.append(UInt8(ascii: "\n"))
                value += feedback
            }
            commands.append([set, keyPrefix + record.resultId.utf8, value, ex, ttl])
        }
        for entry in unregistered {
            commands.append([
                Array("HSET".utf8), Array("\(prefix)u:\(entry.app):\(entry.environment)".utf8),
                Array(entry.token.utf8), Array(String(entry.since).utf8),
            ])
        }
        for resultId in released {
            commands.append([Array("DEL".utf8), Array("\(prefix)n:\(resultId)".utf8)])
        }
        if !positions.isEmpty {
            // Only ever forward: a partition's new owner starts behind the position its previous
            // owner reached, and must not move it back.
            var command: [[UInt8]] = [Array("EVAL".utf8), Self.advancePositionsScript, Array(String(positions.count).utf8)]
            for position in positions { command.append(Array("\(prefix)pw:\(position.topic):\(position.partition)".utf8)) }
            command.append(ttl)
            for position in positions { command.append(Array(String(position.offset).utf8)) }
            commands.append(command)
        }
        guard !commands.isEmpty else { return }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused a state update: \(failure.errorMessage ?? "")")
        }
    }

    /// KEYS: written positions; ARGV: ttl, then one offset per key. Sets each key to its offset
    /// unless it already holds a later one.
    static let advancePositionsScript = Array(
        #"""
        for i, key in ipairs(KEYS) do
          local offset = tonumber(ARGV[i + 1])
          if offset > tonumber(redis.call('GET', key) or '-1') then redis.call('SET', key, ARGV[i + 1], 'EX', ARGV[1]) end
        end
        return 0
        """#.utf8)

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
