import APNSCore
import PushRedis

/// Job summaries in Redis (`docs/results.md`, "jobSummary"), kept in four keys per job under
/// the job's hash tag (``RedisKeys/summary(summaryId:)``), which all expire with the dedupe TTL,
/// like the notification records.
///
/// The summary script (``NotificationStore/Scripts/summary``) touches no other key, so it runs
/// on a Redis Cluster too: when another worker is writing the summary, it answers with that
/// worker's name, and ``checkSummaries(_:ttlSeconds:)`` looks up its liveness key (`w:<owner>`,
/// in another slot) and asks again, naming it dead, if it is gone.
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
                let again = try await runSummaryChecks(
                    takeOver.map { checks[$0.0] },
                    dead: takeOver.map(\.1),
                    ttlSeconds: ttlSeconds
                )
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

    private func runSummaryChecks(
        _ checks: [SummaryCheck],
        dead: [String],
        ttlSeconds: Int
    ) async throws(RedisError) -> [ScriptAnswer] {
        var commands = RedisCommands()
        for (check, deadOwner) in zip(checks, dead) {
            commands.evalsha(
                Scripts.summary,
                keys: keys.summary(summaryId: check.summaryId).all,
                arguments: arguments(check, dead: deadOwner, ttlSeconds)
            )
        }
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(commands, scripts: [Scripts.summary])
        }
        guard replies.count == checks.count else {
            throw RedisError(.protocol, "the summary script answered \(replies.count) times for \(checks.count) checks")
        }
        return try zip(checks, replies).map { check, reply throws(RedisError) in
            if let message = reply.errorMessage {
                throw RedisError(.server("ERR"), "the summary script failed: \(message)")
            }
            guard let items = reply.array, let code = items.first?.bytes, code.count == 1,
                let answer = SummaryReply(rawValue: code[0])
            else {
                throw RedisError(.protocol, "the summary script answered \(reply)")
            }
            switch answer {
            case .notYours: return .decided(.notYours)
            case .written: return .decided(.written)
            case .otherWriter:
                guard items.count == 3, let owner = items[1].string else {
                    throw RedisError(.protocol, "the summary script answered \(reply)")
                }
                return .otherWriter(owner: owner, sameMessage: items[2].string == "1")
            case .write:
                guard items.count == 4, let fields = items[2].array, let failed = items[3].array else {
                    throw RedisError(.protocol, "the summary script answered \(reply)")
                }
                return .decided(
                    .write(
                        Self.summary(
                            jobId: check.jobId,
                            takeover: items[1].string == "1",
                            fields: fields,
                            failed: failed
                        )
                    )
                )
            }
        }
    }

    private func arguments(_ check: SummaryCheck, dead: String, _ ttlSeconds: Int) -> [[UInt8]] {
        var args: [[UInt8]] = [
            Array(owner.utf8), Array("\(check.topic)|\(check.partition)|\(check.offset)".utf8),
            Array(String(ttlSeconds).utf8),
            Array(check.fingerprint.utf8), Array(String(check.tokens).utf8),
            Array(String(JobSummary.maxFailedTokens).utf8),
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
            jobId: jobId,
            tokens: 0,
            transmitted: 0,
            failed: 0,
            statuses: [],
            failedTokens: [],
            failedTokensOmitted: 0,
            firstAt: 0,
            lastAt: 0,
            possibleDuplicate: takeover,
            worker: "",
            at: 0
        )
        var statuses: [Int: Int] = [:]
        for pair in stride(from: 0, to: fields.count - 1, by: 2) {
            guard let name = fields[pair].string, let stored = fields[pair + 1].int else { continue }
            // A count is of one job's tokens: a value no job gives (a damaged key) is clamped, so
            // that no sum of them overflows.
            let value = min(max(stored, 0), Int64(Int32.max))
            switch name {
            case "total": summary.tokens = Int(value)
            case "t": summary.transmitted = Int(value)
            case "omitted": summary.failedTokensOmitted = Int(value)
            case "first": summary.firstAt = stored
            case "last": summary.lastAt = stored
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
            guard let text = entry.string, let bar = text.firstIndex(of: "|"), let status = Int(text[..<bar]) else {
                return nil
            }
            return JobSummary.FailedToken(
                token: String(text[text.index(after: bar)...]),
                status: APNSStatus(rawValue: status)
            )
        }
        return summary
    }

    /// Marks summaries written, in one round trip; the token bitmap and failed-token list are no
    /// longer needed.
    func markSummariesWritten(_ summaryIds: [String], ttlSeconds: Int) async throws(RedisError) {
        guard !summaryIds.isEmpty else { return }
        var commands = RedisCommands()
        for summaryId in summaryIds {
            let summary = keys.summary(summaryId: summaryId)
            commands.set(summary.writer, "D", expiry: .seconds(Int64(ttlSeconds)))
            commands.del(summary.counted, summary.failed)
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused a summary update: \(failure.errorMessage ?? "")")
        }
    }
}
