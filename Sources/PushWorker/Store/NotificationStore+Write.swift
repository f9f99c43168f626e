import APNSCore
import Foundation
import PushKafka
import PushRedis

extension NotificationStore {
    /// Records outcomes (each with the `feedback` result produced with it, re-emitted with it
    /// after a crash), unregistered tokens, tokens' environments found by `environmentFallback`
    /// (``RedisKeys``, `e:`), released claims (result id and token) and written
    /// positions (``RedisKeys``, `pw:`), in one round trip (per primary on a cluster). The outcomes
    /// are read where they are: copying their fields into records of the store's own retained
    /// each string and buffer in them (1.5% of the worker's samples in a profile).
    ///
    /// `compacted`: settled notifications whose messages are before their partitions' written
    /// positions (stored before or with this call): their records are replaced by fingerprints
    /// (``compact(_:ttlSeconds:to:)``).
    func write(
        records: [RecordedResult],
        unregistered: [(app: String, environment: String, token: String, since: Int64, reason: String)],
        released: [(resultId: String, token: String)],
        positions: [TopicPartitionOffset] = [],
        environments: [TokenEnvironment] = [],
        compacted: [SettledRecord] = [],
        ttlSeconds: Int
    ) async throws(RedisError) {
        var commands = RedisCommands(
            capacity: records.reduce(256) {
                $0 + $1.result.value.count + ($1.feedback?.value.count ?? 0) + $1.ref.partition.topic.utf8.count + 160
            }
                + (unregistered.count * 4 + released.count) * 160 + positions.count * 80
        )
        for record in records {
            commands.begin(argumentCount: 5)
            commands.append("SET")
            let tag = keys.tag(token: record.token)
            commands.appendKey { keys.appendRecord(resultId: record.resultId, tag: tag, to: &$0) }
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
        // Into this generation's verdicts and the next one's, each kept two periods after its
        // last write (``RedisKeys``, `u:`).
        let generation = keys.verdictGeneration(at: Int64(Date().timeIntervalSince1970))
        for entry in unregistered {
            let tag = keys.tag(token: entry.token)
            for g in generation...generation + 1 {
                var key: [UInt8] = []
                keys.appendUnregistered(
                    app: entry.app,
                    environment: entry.environment,
                    generation: g,
                    tag: tag,
                    to: &key
                )
                commands.begin(argumentCount: 4)
                commands.append("HSET")
                commands.appendKey(key)
                commands.append(entry.token)
                commands.append { value in
                    DecimalText.append(entry.since, to: &value)
                    value.append(UInt8(ascii: "|"))
                    value += entry.reason.utf8
                }
                commands.begin(argumentCount: 3)
                commands.append("EXPIRE")
                commands.appendKey(key)
                commands.append(2 * keys.verdictPeriod)
            }
        }
        appendEnvironments(environments, to: &commands)
        for entry in released {
            commands.begin(argumentCount: 2)
            commands.append("DEL")
            let tag = keys.tag(token: entry.token)
            commands.appendKey { keys.appendRecord(resultId: entry.resultId, tag: tag, to: &$0) }
        }
        // Only ever forward: a partition's new owner starts behind the position its previous
        // owner reached, and must not move it back.
        let positionKeys = positions.map { keys.writtenPosition(topic: $0.topic, partition: $0.partition) }
        for group in redis.groupedBySlot(Array(positions.indices), key: { positionKeys[$0] }) {
            commands.beginEvalsha(Scripts.advancePositions, keyCount: group.count, argumentCount: 1 + group.count)
            for index in group { commands.appendKey(positionKeys[index]) }
            commands.append(Int64(ttlSeconds))
            for index in group { commands.append(positions[index].offset) }
        }
        let expiring = compact(compacted, ttlSeconds: ttlSeconds, to: &commands)
        guard !commands.isEmpty else { return }
        do throws(RedisError) {
            let replies = try await measured { () throws(RedisError) in
                try await redis.pipeline(commands, scripts: [Scripts.advancePositions])
            }
            if let failure = replies.first(where: { $0.errorMessage != nil }) {
                throw RedisError(.server("ERR"), "Redis refused a state update: \(failure.errorMessage ?? "")")
            }
        } catch {
            fingerprintExpiries.withLock { $0.forget(expiring.places, generation: expiring.generation) }
            throw error
        }
    }

    /// Appends, for each settled notification, `SADD` of its fingerprint to its bucket of this
    /// generation (with the bucket's `EXPIREAT` the first time this worker writes it in the
    /// generation), then the `DEL` of the records: the fingerprint is in Redis before the record
    /// is gone (a record's `DEL` follows its `SADD` on the same server, its slot's primary), so a
    /// claim that finds no record finds the fingerprint (``claim``). Returns the
    /// buckets given their expiry, to forget if the round trip fails.
    private func compact(
        _ settled: [SettledRecord],
        ttlSeconds: Int,
        to commands: inout RedisCommands
    ) -> (places: [Int], generation: Int64) {
        guard !settled.isEmpty else { return ([], 0) }
        let layout = fingerprintLayout(ttlSeconds: ttlSeconds)
        let generation = layout.generation(at: Int64(Date().timeIntervalSince1970))
        var places: [Int] = []
        for entry in settled {
            let tag = keys.tag(token: entry.token)
            let fingerprint = NotificationFingerprint(resultId: entry.resultId)
            let bucket = layout.bucket(of: fingerprint)
            commands.begin(argumentCount: 3)
            commands.append("SADD")
            commands.appendKey { keys.appendFingerprints(generation: generation, bucket: bucket, tag: tag, to: &$0) }
            commands.append(fingerprint.member)
            let place = layout.place(bucket: bucket, tag: tag)
            if fingerprintExpiries.withLock({
                $0.needsExpiry(place: place, generation: generation, places: layout.places)
            }) {
                places.append(place)
                commands.begin(argumentCount: 3)
                commands.append("EXPIREAT")
                commands.appendKey {
                    keys.appendFingerprints(generation: generation, bucket: bucket, tag: tag, to: &$0)
                }
                commands.append(layout.expiry(of: generation))
            }
        }
        // One `DEL` of many records per slot (one on a server): a command costs Redis more to
        // run than a key costs it to delete.
        let records = settled.map { keys.record(resultId: $0.resultId, tag: keys.tag(token: $0.token)) }
        for group in redis.groupedBySlot(Array(records.indices), key: { records[$0] }) {
            commands.begin(argumentCount: 1 + group.count)
            commands.append("DEL")
            for index in group { commands.appendKey(records[index]) }
        }
        return (places, generation)
    }
}

/// A notification whose outcome is recorded and whose result is written: its record can give
/// way to its fingerprint once its message is before its partition's written position.
struct SettledRecord: Sendable {
    var resultId: String
    var token: String
}
