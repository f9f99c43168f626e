import APNSCore
import PushKafka

/// One record of the parked topic (`kafka.parkedTopic`): the notifications of one job that moved
/// aside because their app's gateway could not be reached (`docs/delivery.md`, "Moving an app
/// aside").
///
/// Its value is one line of JSON, the envelope, then the job's message as it was consumed:
///
///     {"movedAt":…,"origin":{"offset":…,"partition":…,"topic":"apn.requests"},"staleAt":…,"tokens":["…"]}\n<the job>
///
/// `staleAt` (UNIX ms, absent without `staleAfter`) lets intake see that a record's job went stale
/// without parsing it. `tokens` are the ones the job still owes (the others were answered before
/// it moved aside). Its key is `<app>/<environment>/<origin partition>` (the environment is
/// `production+broadcast` for a pool of broadcasts, ``PoolKey/environmentName``), so that the
/// records of one app from one partition keep the order Kafka gave their jobs, while one app's
/// backlog spreads over the parked topic's partitions as its jobs did. Its timestamp is the job's, so
/// that `staleAfter` and ages count from when the job was produced.
/// A notification brought back keeps its result id (the job id and the token), so a record
/// written twice (a worker stopped between writing it and committing the job) is claimed once.
struct ParkedRecord: Sendable, Equatable {
    var origin: TopicPartitionOffset
    var movedAt: Int64
    /// When the job's `staleAfter` passes (UNIX ms); `nil` without one.
    var staleAt: Int64? = nil
    var tokens: [String]
    /// The job's message value, as consumed from `origin`.
    var job: [UInt8]

    /// The record's key: the pool it waits for, and the partition its job came from.
    static func key(_ pool: PoolKey, partition: Int32) -> [UInt8] {
        Array("\(pool.app)/\(pool.environmentName)/\(partition)".utf8)
    }

    /// The pool a record's key names, or `nil` for a key that names none.
    static func pool(key: [UInt8]?) -> PoolKey? {
        guard let key, let last = key.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        let rest = key[..<last]
        guard let slash = rest.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        return PoolKey(
            app: String(decoding: rest[..<slash], as: UTF8.self),
            environmentName: String(decoding: rest[(slash + 1)...], as: UTF8.self)
        )
    }

    /// The record's value.
    func encoded() -> [UInt8] {
        var members: [String: JSONValue] = [
            "origin": .object([
                "topic": .string(origin.topic),
                "partition": .int(Int64(origin.partition)),
                "offset": .int(origin.offset),
            ]),
            "movedAt": .int(movedAt),
            "tokens": .array(tokens.map(JSONValue.string)),
        ]
        if let staleAt { members["staleAt"] = .int(staleAt) }
        var out = JSONValue.object(members).serialized()
        out.append(UInt8(ascii: "\n"))
        out += job
        return out
    }

    /// When the job of a record's value goes stale, read from its envelope alone; `nil` when it
    /// has no `staleAfter` or the envelope cannot be read.
    static func staleAt(of value: [UInt8]) -> Int64? {
        guard let newline = value.firstIndex(of: UInt8(ascii: "\n")),
            case .object(let members)? = try? JSONValue.parse(value[..<newline]),
            case .int(let staleAt)? = members["staleAt"]
        else { return nil }
        return staleAt
    }

    /// Reads a record's value; the error says what is wrong with it.
    init(decoding value: [UInt8]) throws(ParkedRecordError) {
        guard let newline = value.firstIndex(of: UInt8(ascii: "\n")) else {
            throw ParkedRecordError("it has no envelope line")
        }
        let envelope: JSONValue
        do throws(JSONParseError) { envelope = try JSONValue.parse(value[..<newline]) } catch {
            throw ParkedRecordError("its envelope is not JSON (\(error.message))")
        }
        guard case .object(let members) = envelope,
            case .object(let origin)? = members["origin"],
            case .string(let topic)? = origin["topic"],
            case .int(let partition)? = origin["partition"], let partition = Int32(exactly: partition),
            case .int(let offset)? = origin["offset"],
            case .int(let movedAt)? = members["movedAt"],
            case .array(let tokens)? = members["tokens"]
        else {
            throw ParkedRecordError(
                "its envelope lacks origin.topic, origin.partition, origin.offset, movedAt or tokens"
            )
        }
        var texts: [String] = []
        texts.reserveCapacity(tokens.count)
        for token in tokens {
            guard case .string(let text) = token else {
                throw ParkedRecordError("a token of its envelope is not a string")
            }
            texts.append(text)
        }
        self.origin = TopicPartitionOffset(topic: topic, partition: partition, offset: offset)
        self.movedAt = movedAt
        if case .int(let staleAt)? = members["staleAt"] { self.staleAt = staleAt }
        self.tokens = texts
        self.job = Array(value[(newline + 1)...])
    }

    init(origin: TopicPartitionOffset, movedAt: Int64, staleAt: Int64? = nil, tokens: [String], job: [UInt8]) {
        self.origin = origin
        self.movedAt = movedAt
        self.staleAt = staleAt
        self.tokens = tokens
        self.job = job
    }
}

/// Why a parked record cannot be read.
struct ParkedRecordError: Error, Sendable {
    var message: String
    init(_ message: String) { self.message = message }
}
