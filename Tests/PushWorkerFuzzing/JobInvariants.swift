import APNSCore
import APNSHTTP2Core

@testable import PushWorker

/// What must hold for any message the job parser is given, and for any alert the payload
/// builder trims; shared by the seeded fuzz tests and the libFuzzer target (`scripts/fuzz`).
public enum JobInvariants {
    /// The largest result (key and value) the worker may make for one notification or message,
    /// besides the job's `metadata` (at most `JobParser.maxMetadataBytes`), which it repeats.
    public static let maxResultBytes = 4096

    /// Parses `bytes` as the worker does and returns what is wrong with the outcome and with the
    /// results the worker would write for it; empty when nothing is.
    public static func violations(ofMessage bytes: [UInt8], parser: JobParser = JobParser()) -> [String] {
        var problems: [String] = []
        var metadata: [UInt8]? = nil
        func result(_ result: WorkerResult) {
            var result = result
            result.metadata = metadata
            let limit = maxResultBytes + (metadata?.count ?? 0)
            let size = result.serialized().count + (result.key?.count ?? 0)
            if size > limit { problems.append("a \(result.kind.rawValue) result is \(size) bytes, over \(limit)") }
            if (try? JSONValue.parse(result.serialized())) == nil { problems.append("a result is not valid JSON") }
            if (metadata?.count ?? 0) > JobParser.maxMetadataBytes {
                problems.append("metadata over \(JobParser.maxMetadataBytes) bytes")
            }
        }
        let outcome = parser.parse(bytes)
        if bytes.count > parser.maxMessageBytes, case .unreadable = outcome {
        } else if bytes.count > parser.maxMessageBytes {
            problems.append("a message over the size limit was not rejected as unreadable")
        }
        switch outcome {
        case .unreadable(let jobId, let app, let reason, let kept):
            metadata = kept
            if reason.isEmpty { problems.append("an unreadable message has no reason") }
            result(
                WorkerResult(
                    kind: .invalidJob,
                    resultId: "r",
                    jobId: jobId,
                    app: app,
                    status: .invalidJob,
                    reason: reason,
                    topic: "apn.requests",
                    partition: 0,
                    offset: 0,
                    worker: "w",
                    at: 0
                )
            )
        case .rejected(let jobId, let app, let tokens, let reason, let kept, _):
            metadata = kept
            if reason.isEmpty { problems.append("a rejected job has no reason") }
            if tokens.isEmpty || tokens.count > parser.maxTokens {
                problems.append("a rejected job has \(tokens.count) tokens")
            }
            if jobId.isEmpty || jobId.utf8.count > 256 {
                problems.append("a rejected job has an id of \(jobId.utf8.count) bytes")
            }
            for token in tokens.prefix(3) {
                result(
                    WorkerResult(
                        kind: .transmissionError,
                        resultId: "r",
                        jobId: jobId,
                        app: app,
                        token: token,
                        status: .invalidJob,
                        reason: reason,
                        attempts: 0,
                        possibleDuplicate: false,
                        worker: "w",
                        at: 0
                    )
                )
            }
        case .job(let job):
            metadata = job.metadata
            if job.tokens.isEmpty || job.tokens.count > parser.maxTokens {
                problems.append("a job has \(job.tokens.count) tokens")
            }
            if job.id.isEmpty || job.id.utf8.count > 256 {
                problems.append("a job has an id of \(job.id.utf8.count) bytes")
            }
            if let error = job.payloadError {
                if error.isEmpty { problems.append("a payload error has no sentence") }
            } else {
                let limit = parser.http2Apps.contains(job.app) ? APNSPushType.voipPayloadLimit : parser.payloadLimit
                if job.payload.count > limit {
                    problems.append("a payload of \(job.payload.count) bytes is over \(limit)")
                }
                if case .object = try? JSONValue.parse(job.payload) {
                } else {
                    problems.append("the payload is not a JSON object")
                }
            }
            for token in job.tokens.prefix(3) {
                let reason: String? =
                    switch token {
                    case .malformed(_, let reason): reason
                    case .valid: job.payloadError ?? "app \"\(job.app.abbreviated())\" is not configured"
                    }
                result(
                    WorkerResult(
                        kind: .transmissionError,
                        resultId: "r",
                        jobId: job.id,
                        app: job.app,
                        environment: job.environment,
                        token: token.text,
                        status: .invalidJob,
                        reason: reason,
                        attempts: 0,
                        possibleDuplicate: false,
                        worker: "w",
                        at: 0
                    )
                )
            }
        }
        return problems
    }

    /// Trims `body` as an alert to `limit` bytes and returns what is wrong with the result.
    public static func violations(trimming body: String, title: String?, limit: Int, atWordEnd: Bool) -> [String] {
        var notification = APNSNotification()
        notification.alert = title.map { .fields(APNSAlertFields(title: $0, body: body)) } ?? .text(body)
        notification.truncateAtWordEnd = atWordEnd
        var trimmed = notification
        do {
            try trimmed.trim(toFit: limit)
        } catch {
            var empty = notification
            empty.alertBody = ""
            if error.code == .cannotTrim, let size = try? empty.payload().count, size > limit { return [] }
            return ["trimming failed although an empty body fits: \(error.message)"]
        }
        var problems: [String] = []
        guard let payload = try? trimmed.payload() else { return ["the trimmed notification has no payload"] }
        if payload.count > limit { problems.append("the trimmed payload is \(payload.count) bytes, over \(limit)") }
        if case .object = try? JSONValue.parse(payload) {
        } else {
            problems.append("the trimmed payload is not a JSON object")
        }
        let kept = trimmed.alertBody ?? ""
        if !body.hasPrefix(kept) { problems.append("the trimmed body is not a prefix of the body") }
        if !atWordEnd, kept.count < body.count {
            // The cut is as late as it can be: one more character would not fit.
            var longer = notification
            longer.alertBody = String(body.prefix(kept.count + 1))
            if let size = try? longer.payload().count, size <= limit {
                problems.append("the body was cut earlier than needed")
            }
        }
        return problems
    }

    /// Feeds arbitrary bytes to both checks: the bytes as a message, and as an alert body with a
    /// limit taken from the first two bytes.
    public static func violations(ofInput bytes: [UInt8]) -> [String] {
        var problems = violations(ofMessage: bytes)
        if bytes.count >= 3 {
            let limit = 20 + Int(bytes[0]) << 4 | Int(bytes[1] >> 4)
            let body = String(decoding: bytes[3...], as: UTF8.self)
            problems += violations(
                trimming: body,
                title: bytes[2] & 1 == 0 ? nil : "T",
                limit: limit,
                atWordEnd: bytes[2] & 2 != 0
            )
        }
        return problems
    }
}
