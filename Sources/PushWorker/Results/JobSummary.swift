import APNSCore

/// The `jobSummary` result (`docs/results.md`): what became of every token of a job that asked
/// for a summary (`"summary": true`), written once all of them have their results.
public struct JobSummary: Sendable, Hashable {
    /// How many token results had one status.
    public struct StatusCount: Sendable, Hashable {
        public var status: APNSStatus
        public var count: Int
    }

    /// A token that was not delivered, with its status.
    public struct FailedToken: Sendable, Hashable {
        /// As its result gives it: lowercase hex, or the text as given for status 518.
        public var token: String
        public var status: APNSStatus
    }

    /// The most failed tokens a summary lists; the others are only counted.
    public static let maxFailedTokens = 1_000
    /// The most bytes the failed-token list may take: a malformed token is repeated as the job
    /// gave it (cut to 256 bytes, but escaped in JSON), and a summary must fit a Kafka message.
    public static let maxFailedTokensBytes = 500_000

    public var jobId: String
    public var app: String?
    public var environment: String?
    /// The job's tokens (each counted once).
    public var tokens: Int
    /// Token results of type `transmitted`.
    public var transmitted: Int
    /// Token results of type `transmissionError`.
    public var failed: Int
    /// Token results of any other type, by type.
    public var otherCounts: [String: Int] = [:]
    /// `transmissionError` results by status, in increasing status order.
    public var statuses: [StatusCount]
    /// Up to ``maxFailedTokens`` of the failed tokens, in the order their results were counted.
    public var failedTokens: [FailedToken]
    /// Failed tokens left out of ``failedTokens``.
    public var failedTokensOmitted: Int
    /// The earliest and the latest `at` of the job's token results (UNIX ms).
    public var firstAt: Int64
    public var lastAt: Int64
    /// `true` when a worker that may have written this summary already stopped before it could
    /// say so: the consumer may have seen an earlier copy.
    public var possibleDuplicate: Bool
    public var worker: String
    public var at: Int64

    /// The summary of a dry run (`dryRun` results instead of sending).
    public var dryRun = false
    /// The job's `metadata` as compact JSON, written into the summary as it is.
    public var metadata: [UInt8]?

    public var resultId: String { WorkerResult.summaryId(jobId: jobId, dryRun: dryRun) }

    /// The Kafka key: the job id.
    public var key: [UInt8] { Array(jobId.abbreviated(toBytes: WorkerResult.maxEchoBytes).utf8) }

    /// The JSON value written to Kafka, keys in a fixed order. Failed tokens that would take the
    /// list past ``maxFailedTokensBytes`` are left out and counted in `failedTokensOmitted`, so a
    /// summary stays under 600 KB whatever the job held.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(400 + failedTokens.count * 110 + (metadata?.count ?? 0))
        func key(_ name: StaticString, dynamic: String? = nil) {
            if out.last != UInt8(ascii: "{") { out.append(UInt8(ascii: ",")) }
            if let dynamic {
                JSONValue.string(dynamic.abbreviated(toBytes: WorkerResult.maxEchoBytes)).write(into: &out)
            } else {
                out.append(UInt8(ascii: "\""))
                name.withUTF8Buffer { out.append(contentsOf: $0) }
                out.append(UInt8(ascii: "\""))
            }
            out.append(UInt8(ascii: ":"))
        }
        func string(_ name: StaticString, _ value: String?) {
            guard let value else { return }
            key(name)
            JSONValue.string(value.abbreviated(toBytes: WorkerResult.maxEchoBytes)).write(into: &out)
        }
        func integer(_ name: StaticString, _ value: Int64) {
            key(name)
            DecimalText.append(value, to: &out)
        }
        out.append(UInt8(ascii: "{"))
        string("type", "jobSummary")
        string("resultId", resultId)
        string("jobId", jobId)
        string("app", app)
        string("env", environment)
        integer("tokens", Int64(tokens))
        key("counts")
        out.append(UInt8(ascii: "{"))
        integer("transmitted", Int64(transmitted))
        integer("transmissionError", Int64(failed))
        for (type, count) in otherCounts.sorted(by: { $0.key < $1.key }) {
            key("", dynamic: type)
            DecimalText.append(Int64(count), to: &out)
        }
        out.append(UInt8(ascii: "}"))
        key("statuses")
        out.append(UInt8(ascii: "["))
        for (index, entry) in statuses.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            integer("status", Int64(entry.status.rawValue))
            string("statusName", entry.status.name)
            integer("count", Int64(entry.count))
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
        key("failedTokens")
        out.append(UInt8(ascii: "["))
        let listStart = out.count
        var listed = 0
        for entry in failedTokens {
            let entryStart = out.count
            if listed > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            string("token", entry.token)
            integer("status", Int64(entry.status.rawValue))
            string("statusName", entry.status.name)
            out.append(UInt8(ascii: "}"))
            if out.count - listStart > Self.maxFailedTokensBytes {
                out.removeSubrange(entryStart...)
                break
            }
            listed += 1
        }
        out.append(UInt8(ascii: "]"))
        integer("failedTokensOmitted", Int64(failedTokensOmitted + failedTokens.count - listed))
        integer("firstAt", firstAt)
        integer("lastAt", lastAt)
        key("possibleDuplicate")
        out += Array((possibleDuplicate ? "true" : "false").utf8)
        if dryRun {
            key("dryRun")
            out += Array("true".utf8)
        }
        if let metadata {
            key("metadata")
            out += metadata
        }
        string("worker", worker)
        integer("at", at)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
