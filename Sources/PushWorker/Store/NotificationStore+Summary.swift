import APNSCore
import PushRedis

/// Job summaries in Redis (`docs/results.md`, "jobSummary").
///
/// Keys, all with the hash tag `{<summary resultId>}` so that one job's keys share a hash slot
/// (the tag is a digest of the job id rather than the id itself, since an id may contain braces):
/// - `s:{…}`: a hash: the job's fingerprint (`fp`, a digest of its token list) and token count
///   (`total`), the results counted (`done`), counts by type and status (`t`: transmitted,
///   `s<status>`: failed with that status, `k<type>`: any other type of token result), the failed
///   tokens left out of the list (`omitted`),
///   and the first and last `at`;
/// - `s:{…}:b`: a bitmap, one bit per token (by its place in the job): counted already;
/// - `s:{…}:f`: a list of the first 1,000 failed tokens, `<status>|<token>`;
/// - `s:{…}:m`: who writes the summary: `P|<owner>|<topic>|<partition>|<offset>` while a worker
///   does, for the message it came from, then `D` once it is written.
///
/// All of them expire with the dedupe TTL, like the notification records. The script touches
/// no other key, so it runs on a Redis Cluster too: when another worker is writing the summary,
/// it answers with that worker's name, and ``checkSummaries(_:ttlSeconds:)`` looks up its
/// liveness key (`w:<owner>`, in another slot) and asks again, naming it dead, if it is gone.
extension NotificationStore {
    /// One token result of a job that asked for a summary, as the summary counts it.
    struct SummaryOutcome: Sendable, Hashable {
        /// The token's place in the job (its tokens in order, each once).
        var index: Int
        /// The status of a `transmissionError`; `nil` for any other type.
        var status: APNSStatus?
        /// The result's type when it is neither `transmitted` nor `transmissionError`.
        var otherType: String? = nil
        /// The token as its result gives it (kept for failed tokens only).
        var token: String
        var at: Int64
    }

    /// A message of a job that asked for a summary, all of whose token results are written.
    struct SummaryCheck: Sendable {
        var jobId: String
        /// The summary's `resultId` (``WorkerResult/summaryId(jobId:dryRun:)``), which names its keys.
        var summaryId: String
        /// A digest of the job's tokens: another job that reuses the id with other tokens does not
        /// add to this one's summary.
        var fingerprint: String
        var tokens: Int
        var topic: String
        var partition: Int32
        var offset: Int64
        /// The results this message wrote for its tokens (none for tokens another message has).
        var outcomes: [SummaryOutcome]
    }

    /// What a check decided.
    enum SummaryDecision: Sendable, Hashable {
        /// Not for this message to write: some token results are still to come (their messages
        /// write it), another message's worker is writing it, or another job uses the same id.
        case notYours
        /// Already written.
        case written
        /// A live worker is writing it for this same message (consumed again): ask again later.
        case busy
        /// Every token has its result: write this summary (without `worker` and `at`), then
        /// ``markSummariesWritten(_:ttlSeconds:)``. `possibleDuplicate` when it was taken over
        /// from a worker that stopped while writing it.
        case write(JobSummary)
    }

    static func summaryKeys(prefix: String, summaryId: String) -> [[UInt8]] {
        let base = "\(prefix)s:{\(summaryId)}"
        return [Array(base.utf8), Array("\(base):b".utf8), Array("\(base):f".utf8), Array("\(base):m".utf8)]
    }

    static let summaryScript = RedisScript(
        #"""
        -- KEYS: counters (hash), tokens counted (bitmap), failed tokens (list), writer.
        -- ARGV: owner, '<topic>|<partition>|<offset>', ttl, fingerprint, tokens, most failed tokens
        -- listed, a writer known to be dead ('' = none); then 4 per token result: index, what it is ('' = transmitted, a status =
        -- transmissionError, 'k<type>' = another type), at, token.
        local h, b, f, m = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
        local owner, msg, ttl, fp, total, cap, dead = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
        local known = redis.call('HGET', h, 'fp')
        if not known then
          redis.call('HSET', h, 'fp', fp, 'total', ARGV[5], 'done', '0')
        elseif known ~= fp then
          return {'N'}
        end
        local done, first, last, omitted = 0, nil, nil, 0
        local counts, failed = {}, {}
        local room = cap - redis.call('LLEN', f)
        for i = 8, #ARGV, 4 do
          if redis.call('SETBIT', b, ARGV[i], 1) == 0 then
            done = done + 1
            local status, at = ARGV[i + 1], tonumber(ARGV[i + 2])
            local field = 't'
            if string.sub(status, 1, 1) == 'k' then
              field = status
            elseif status ~= '' then
              field = 's' .. status
              if #failed < room then failed[#failed + 1] = status .. '|' .. ARGV[i + 3] else omitted = omitted + 1 end
            end
            counts[field] = (counts[field] or 0) + 1
            if not first or at < first then first = at end
            if not last or at > last then last = at end
          end
        end
        if done > 0 then
          for field, n in pairs(counts) do redis.call('HINCRBY', h, field, n) end
          redis.call('HINCRBY', h, 'done', done)
          if omitted > 0 then redis.call('HINCRBY', h, 'omitted', omitted) end
          if #failed > 0 then redis.call('RPUSH', f, unpack(failed)) end
          local known_first, known_last = tonumber(redis.call('HGET', h, 'first') or ''), tonumber(redis.call('HGET', h, 'last') or '')
          if not known_first or first < known_first then redis.call('HSET', h, 'first', string.format('%d', first)) end
          if not known_last or last > known_last then redis.call('HSET', h, 'last', string.format('%d', last)) end
        end
        for _, key in ipairs({h, b, f}) do redis.call('EXPIRE', key, ttl) end
        if tonumber(redis.call('HGET', h, 'done')) < total then return {'N'} end
        local state = redis.call('GET', m)
        local takeover = '0'
        if state then
          if state == 'D' then return {'D'} end
          local sowner, smsg = string.match(state, '^P|([^|]*)|(.*)$')
          if sowner == owner then
            if smsg ~= msg then return {'N'} end
          elseif sowner == dead then
            takeover = '1'
          else
            local same = '0'
            if smsg == msg then same = '1' end
            return {'O', sowner, same}
          end
        end
        redis.call('SET', m, 'P|' .. owner .. '|' .. msg, 'EX', ttl)
        return {'S', takeover, redis.call('HGETALL', h), redis.call('LRANGE', f, 0, -1)}
        """#)

    /// Counts a message's token results into its job's summary and says whether this worker
    /// writes the summary now, in one round trip. Counting is idempotent per token, so a message
    /// consumed again counts nothing twice.
    func checkSummary(_ check: SummaryCheck, ttlSeconds: Int) async throws(RedisError) -> SummaryDecision {
        try await checkSummaries([check], ttlSeconds: ttlSeconds)[0]
    }

    /// ``checkSummary(_:ttlSeconds:)`` for several messages in one round trip, in order (two
    /// messages of one job are decided as if one after the other); one more when another
    /// worker is writing a summary, to ask whether it is alive. Running a check twice decides
    /// the same, so a check may be sent again.
    func checkSummaries(_ checks: [SummaryCheck], ttlSeconds: Int) async throws(RedisError) -> [SummaryDecision] {
        guard !checks.isEmpty else { return [] }
        var decisions = try await runSummaryChecks(checks, dead: checks.map { _ in "" }, ttlSeconds: ttlSeconds)
        let others = decisions.indices.compactMap { index -> (Int, String, Bool)? in
            guard case .otherWriter(let owner, let sameMessage) = decisions[index] else { return nil }
            return (index, owner, sameMessage)
        }
        if !others.isEmpty {
            let dead = try await deadOwners(Set(others.map(\.1)))
            let takeOver = others.filter { dead.contains($0.1) }
            if !takeOver.isEmpty {
                let again = try await runSummaryChecks(takeOver.map { checks[$0.0] }, dead: takeOver.map(\.1), ttlSeconds: ttlSeconds)
                for (entry, decision) in zip(takeOver, again) { decisions[entry.0] = decision }
            }
        }
        return decisions.map { decision in
            guard case .otherWriter(_, let sameMessage) = decision else { return decision.final }
            return sameMessage ? .busy : .notYours
        }
    }

    /// What one run of the script said: a decision, or the name of the worker writing it.
    private enum ScriptAnswer {
        case decided(SummaryDecision)
        case otherWriter(owner: String, sameMessage: Bool)

        var final: SummaryDecision {
            if case .decided(let decision) = self { return decision }
            return .busy
        }
    }

    private func runSummaryChecks(_ checks: [SummaryCheck], dead: [String], ttlSeconds: Int) async throws(RedisError) -> [ScriptAnswer] {
        let commands = zip(checks, dead).map { check, dead in
            Self.summaryScript.evalshaCommand(
                keys: Self.summaryKeys(prefix: prefix, summaryId: check.summaryId), args: arguments(check, dead: dead, ttlSeconds))
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands, scripts: [Self.summaryScript]) }
        guard replies.count == checks.count else {
            throw RedisError(.protocol, "the summary script answered \(replies.count) times for \(checks.count) checks")
        }
        return try zip(checks, replies).map { check, reply throws(RedisError) in
            if let message = reply.errorMessage { throw RedisError(.server("ERR"), "the summary script failed: \(message)") }
            guard let items = reply.array, let code = items.first?.string else {
                throw RedisError(.protocol, "the summary script answered \(reply)")
            }
            switch code {
            case "N": return .decided(.notYours)
            case "D": return .decided(.written)
            case "O":
                guard items.count == 3, let owner = items[1].string else {
                    throw RedisError(.protocol, "the summary script answered \(reply)")
                }
                return .otherWriter(owner: owner, sameMessage: items[2].string == "1")
            case "S":
                guard items.count == 4, let fields = items[2].array, let failed = items[3].array else {
                    throw RedisError(.protocol, "the summary script answered \(reply)")
                }
                return .decided(.write(Self.summary(jobId: check.jobId, takeover: items[1].string == "1", fields: fields, failed: failed)))
            default:
                throw RedisError(.protocol, "the summary script answered \(reply)")
            }
        }
    }

    private func arguments(_ check: SummaryCheck, dead: String, _ ttlSeconds: Int) -> [[UInt8]] {
        var args: [[UInt8]] = [
            Array(owner.utf8), Array("\(check.topic)|\(check.partition)|\(check.offset)".utf8), Array(String(ttlSeconds).utf8),
            Array(check.fingerprint.utf8), Array(String(check.tokens).utf8), Array(String(JobSummary.maxFailedTokens).utf8),
            Array(dead.utf8),
        ]
        args.reserveCapacity(args.count + check.outcomes.count * 4)
        for outcome in check.outcomes {
            var index: [UInt8] = []
            DecimalText.append(Int64(outcome.index), to: &index)
            args.append(index)
            if let status = outcome.status {
                var code: [UInt8] = []
                DecimalText.append(Int64(status.rawValue), to: &code)
                args.append(code)
            } else if let type = outcome.otherType {
                args.append([UInt8(ascii: "k")] + Array(type.utf8))
            } else {
                args.append([])
            }
            var at: [UInt8] = []
            DecimalText.append(outcome.at, to: &at)
            args.append(at)
            args.append(outcome.status == nil ? [] : Array(outcome.token.utf8))
        }
        return args
    }

    /// The summary from the counters' fields and the failed-token list.
    static func summary(jobId: String, takeover: Bool, fields: [RedisValue], failed: [RedisValue]) -> JobSummary {
        var summary = JobSummary(
            jobId: jobId, tokens: 0, transmitted: 0, failed: 0, statuses: [], failedTokens: [], failedTokensOmitted: 0, firstAt: 0,
            lastAt: 0, possibleDuplicate: takeover, worker: "", at: 0)
        var statuses: [Int: Int] = [:]
        for pair in stride(from: 0, to: fields.count - 1, by: 2) {
            guard let name = fields[pair].string, let value = fields[pair + 1].int else { continue }
            switch name {
            case "total": summary.tokens = Int(value)
            case "t": summary.transmitted = Int(value)
            case "omitted": summary.failedTokensOmitted = Int(value)
            case "first": summary.firstAt = value
            case "last": summary.lastAt = value
            default:
                if name.hasPrefix("s"), let status = Int(name.dropFirst()) {
                    statuses[status, default: 0] += Int(value)
                    summary.failed += Int(value)
                } else if name.hasPrefix("k") {
                    summary.otherCounts[String(name.dropFirst())] = Int(value)
                }
            }
        }
        summary.statuses = statuses.sorted { $0.key < $1.key }.map {
            JobSummary.StatusCount(status: APNSStatus(rawValue: $0.key), count: $0.value)
        }
        summary.failedTokens = failed.compactMap { entry in
            guard let text = entry.string, let bar = text.firstIndex(of: "|"), let status = Int(text[..<bar]) else { return nil }
            return JobSummary.FailedToken(token: String(text[text.index(after: bar)...]), status: APNSStatus(rawValue: status))
        }
        return summary
    }

    /// Marks summaries written, in one round trip; the token bitmap and failed-token list are no
    /// longer needed.
    func markSummariesWritten(_ summaryIds: [String], ttlSeconds: Int) async throws(RedisError) {
        guard !summaryIds.isEmpty else { return }
        var commands: [[[UInt8]]] = []
        let ttl = Array(String(ttlSeconds).utf8)
        for summaryId in summaryIds {
            let keys = Self.summaryKeys(prefix: prefix, summaryId: summaryId)
            commands.append([Array("SET".utf8), keys[3], [UInt8(ascii: "D")], Array("EX".utf8), ttl])
            commands.append([Array("DEL".utf8), keys[1], keys[2]])
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused a summary update: \(failure.errorMessage ?? "")")
        }
    }
}
