import APNSCore
import PushKafka

/// A message's Kafka timestamp as the worker computes with it (a job's age, its `staleAfter`
/// deadline, a Live Activity's default timestamp, the hand-off marks).
///
/// The timestamp is whatever the job's producer (`CreateTime`) or the broker (`LogAppendTime`)
/// wrote, and brokers accept any 64-bit value unless a cluster limits them
/// (`log.message.timestamp.after.max.ms`). Only a time from 1970 to the end of 9999 is used; a
/// message without one (the broker sent none, or Kafka's `-1`, "no timestamp") is taken as
/// produced when it is read; any other value makes the job invalid.
enum MessageTimestamp: Sendable, Equatable {
    /// No timestamp: the job counts as produced when it is read.
    case none
    /// UNIX milliseconds from 1970 to the end of 9999.
    case valid(Int64)
    /// A value no clock gives: its job is answered `invalidJob`.
    case outOfRange(Int64, KafkaTimestampType)

    init(_ message: KafkaMessage) {
        switch message.timestamp {
        case nil, -1: self = .none
        case let value? where UnixTime.isPlausible(milliseconds: value): self = .valid(value)
        case let value?: self = .outOfRange(value, message.timestampType)
        }
    }

    /// The timestamp, when it is one to use.
    var known: Int64? {
        if case .valid(let value) = self { return value }
        return nil
    }

    /// Why the job of a message with this timestamp is invalid; `nil` when it is not.
    var problem: String? {
        guard case .outOfRange(let value, let type) = self else { return nil }
        let who =
            type == .createTime
            ? "its producer set it (CreateTime): fix the producer's clock or the timestamp it gives, and produce the job again"
            : "the broker set it (LogAppendTime): check the broker's clock"
        return "the message's Kafka timestamp \(value) is not a time between 1970 and 9999 (UNIX milliseconds); \(who)"
    }
}
