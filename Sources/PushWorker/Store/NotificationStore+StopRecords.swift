import PushKafka
import PushRedis

/// Stop records (``StopGuard``): `pp:<topic>:<partition>`, a hash of owner (the claim id in hex,
/// as in `w:#`) → ``StopGuard/Record``.
extension NotificationStore {
    /// This incarnation's name in stop records: its claim id in hex.
    var stopRecordOwner: String { String(decoding: RedisKeys.hex(claimId), as: UTF8.self) }

    /// What a partition's stop records say when it is assigned.
    struct StopRecords: Sendable, Hashable {
        /// Every record, by owner.
        var records: [String: StopGuard.Record] = [:]
        /// Owners whose records could not be read (another build's, or damaged): removed with
        /// the dead ones.
        var unreadable: Set<String> = []
        /// The partition's written position (`pw:`), if one is stored.
        var written: Int64? = nil
    }

    /// Leaves this worker's stop records: one per partition, replacing its previous one, the
    /// key kept `ttlSeconds` from now; and removes the records of `passed` owners. One round trip
    /// (per primary on a cluster).
    func writeStopRecords(
        _ records: [(TopicPartition, StopGuard.Record)],
        ttlSeconds: Int,
        removing passed: [(TopicPartition, Set<String>)] = []
    ) async throws(RedisError) {
        guard !records.isEmpty || !passed.isEmpty else { return }
        let owner = stopRecordOwner
        var commands = RedisCommands(capacity: records.count * 160 + passed.count * 96)
        for (partition, record) in records {
            let key = keys.stopRecords(partition)
            commands.hset(key, field: owner, value: record.text)
            commands.expire(key, seconds: Int64(ttlSeconds))
        }
        for (partition, owners) in passed where !owners.isEmpty {
            commands.hdel(keys.stopRecords(partition), fields: owners.sorted())
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let message = replies.lazy.compactMap(\.errorMessage).first {
            throw RedisError(.server("ERR"), "Redis refused a stop record: \(message)")
        }
    }

    /// Removes this worker's stop records of `partitions` (it hands them on, or stops by
    /// choice). One round trip (per primary on a cluster).
    func removeStopRecords(_ partitions: [TopicPartition]) async throws(RedisError) {
        guard !partitions.isEmpty else { return }
        var commands = RedisCommands()
        for partition in partitions { commands.hdel(keys.stopRecords(partition), fields: [stopRecordOwner]) }
        let replies = try await redis.pipeline(commands)
        if let message = replies.lazy.compactMap(\.errorMessage).first {
            throw RedisError(.server("ERR"), "Redis refused to remove a stop record: \(message)")
        }
    }

    /// The stop records and written positions of `partitions`. One round trip (per primary on a
    /// cluster).
    func stopRecords(_ partitions: [TopicPartition]) async throws(RedisError) -> [TopicPartition: StopRecords] {
        guard !partitions.isEmpty else { return [:] }
        var commands = RedisCommands()
        for partition in partitions {
            commands.hgetall(keys.stopRecords(partition))
            commands.get(keys.writtenPosition(topic: partition.topic, partition: partition.partition))
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        var found: [TopicPartition: StopRecords] = [:]
        for (index, partition) in partitions.enumerated() {
            let (hash, position) = (replies[2 * index], replies[2 * index + 1])
            if let message = hash.errorMessage ?? position.errorMessage {
                throw RedisError(.server("ERR"), "Redis refused to read the stop records of \(partition): \(message)")
            }
            var entry = StopRecords()
            if let text = position.string {
                guard let offset = Int64(text), offset >= 0 else {
                    throw RedisError(
                        .protocol,
                        "the written position of \(partition) is \"\(text.prefix(32))\", not an offset"
                    )
                }
                entry.written = offset
            }
            let fields = hash.array ?? []
            for pair in stride(from: 0, to: fields.count - 1, by: 2) {
                guard let owner = fields[pair].string else { continue }
                if let text = fields[pair + 1].string, let record = StopGuard.Record(text: text) {
                    entry.records[owner] = record
                } else {
                    entry.unreadable.insert(owner)
                }
            }
            if !entry.records.isEmpty || !entry.unreadable.isEmpty { found[partition] = entry }
        }
        return found
    }

    /// Which of `owners` (names in stop records: claim ids in hex) are no longer alive. One
    /// round trip.
    func deadStopRecordOwners(_ owners: Set<String>) async throws(RedisError) -> Set<String> {
        var ids: [[UInt8]: String] = [:]
        var malformed = Set<String>()
        for owner in owners {
            if let id = Self.bytes(hex: owner) { ids[id] = owner } else { malformed.insert(owner) }
        }
        let dead = ids.isEmpty ? [] : try await deadClaimOwners(Set(ids.keys))
        return malformed.union(dead.compactMap { ids[$0] })
    }

    /// The bytes of an even number of lower-case hex digits; `nil` for anything else.
    static func bytes(hex text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard !utf8.isEmpty, utf8.count.isMultiple(of: 2), utf8.count <= 64 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: utf8.count, by: 2) {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }
}
