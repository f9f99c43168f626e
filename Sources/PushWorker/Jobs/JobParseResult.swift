import APNSCore

/// A token of a job: parsed, or kept as text with the reason it is malformed.
public enum JobToken: Sendable, Hashable {
    /// A token and its lowercase hex (the job's text when it was that already).
    case valid(DeviceToken, hex: String)
    case malformed(text: String, reason: String)

    /// A parsed token.
    public static func valid(_ token: DeviceToken) -> JobToken { .valid(token, hex: token.hex) }

    /// The token as it appears in results: lowercase hex, or the text as given.
    public var text: String {
        switch self {
        case .valid(_, let hex): hex
        case .malformed(let text, _): text
        }
    }
}

/// What parsing one Kafka message gives.
public enum JobParseResult: Sendable, Hashable {
    /// A valid job (some tokens may still be malformed).
    case job(Job)
    /// Readable id and tokens but an invalid job: every token gets an `invalidJob` error result.
    /// `metadata` is the job's `metadata` (compact JSON) when it could be read.
    /// `broadcast`: the tokens are channel IDs (the job named `channel` or `channels`).
    case rejected(jobId: String, app: String?, tokens: [String], reason: String, metadata: [UInt8]?, broadcast: Bool)
    /// Not even the id and tokens could be read: one `invalidJob` result for the message, with the
    /// job's `metadata` when the message is an object whose `metadata` could be read.
    case unreadable(jobId: String?, app: String?, reason: String, metadata: [UInt8]?)
}
