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
    /// - `outcomeGeneration`: the generation the outcomes are recorded in
    ///   (``outcomeGeneration(ttlSeconds:)``), kept by the caller to delete them later.
    /// - `forgotten`: settled notifications, whose messages are before the written positions
    ///   stored by an earlier call that succeeded: their outcomes are deleted. Not in the call
    ///   that stores the position: on a cluster the position and the outcome live on different
    ///   primaries, and a message consumed again must never find its outcome gone while its
    ///   written position is still before it (``claim(topic:_:ttlSeconds:nowMilliseconds:)``
    ///   reads the outcome, then the position).
    func write(
        records: [RecordedResult],
        unregistered: [(app: String, environment: String, token: String, since: Int64, reason: String)],
        released: [(resultId: String, token: String)],
        positions: [TopicPartitionOffset] = [],
        environments: [TokenEnvironment] = [],
        accepted: [AcceptedActivity] = [],
        channels: [ChannelRecord] = [],
        forgotten: [SettledRecord] = [],
        outcomeGeneration: Int64? = nil,
        ttlSeconds: Int
    ) async throws(RedisError) {
        var commands = RedisCommands(
            capacity: records.reduce(256) {
                $0 + $1.result.value.count + ($1.feedback?.value.count ?? 0) + 64
            }
                + (unregistered.count * 4 + released.count) * 160 + positions.count * 80
                + forgotten.count * 64
        )
        let layout = fingerprintLayout(ttlSeconds: ttlSeconds)
        let now = Int64(Date().timeIntervalSince1970)
        appendOutcomes(
            records,
            generation: outcomeGeneration ?? layout.generation(at: now),
            layout: layout,
            to: &commands
        )
        // Into this generation's verdicts and the next one's, each kept two periods after its
        // last write (``RedisKeys``, `u:`).
        let generation = keys.verdictGeneration(at: now)
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
                commands.begin(.hset, arguments: 3)
                commands.appendKey(key)
                commands.append(entry.token)
                commands.append { value in
                    DecimalText.append(entry.since, to: &value)
                    value.append(UInt8(ascii: "|"))
                    value += entry.reason.utf8
                }
                commands.expire(key, seconds: 2 * keys.verdictPeriod)
            }
        }
        appendEnvironments(environments, to: &commands)
        appendAccepted(accepted, to: &commands)
        appendChannels(channels, to: &commands)
        appendReleases(released, layout: layout, now: now, to: &commands)
        // Only ever forward: a partition's new owner starts behind the position its previous
        // owner reached, and must not move it back. Kept two periods, as long as the claims it
        // decides for (a claim lives one to two periods).
        let positionKeys = positions.map { keys.writtenPosition(topic: $0.topic, partition: $0.partition) }
        for group in redis.groupedBySlot(Array(positions.indices), key: { positionKeys[$0] }) {
            commands.beginEvalsha(Scripts.advancePositions, keyCount: group.count, argumentCount: 1 + group.count)
            for index in group { commands.appendKey(positionKeys[index]) }
            commands.append(Int64(2 * ttlSeconds))
            for index in group { commands.append(positions[index].offset) }
        }
        appendForgotten(forgotten, to: &commands)
        guard !commands.isEmpty else { return }
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(
                commands,
                scripts: [Scripts.advancePositions, Scripts.release, Scripts.keepNewestActivity]
            )
        }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused a state update: \(failure.errorMessage ?? "")")
        }
    }

    /// The generation outcomes recorded now go into (``RedisKeys`` `o:`).
    func outcomeGeneration(ttlSeconds: Int) -> Int64 {
        fingerprintLayout(ttlSeconds: ttlSeconds).generation(at: Int64(Date().timeIntervalSince1970))
    }

    /// Appends, per partition, one `HSET o:<topic>:<partition>:<generation>` of its outcomes,
    /// `<offset>|<fingerprint>` → result (a newline and the `feedback` result after it), and
    /// the key's `EXPIREAT`.
    private func appendOutcomes(
        _ records: [RecordedResult],
        generation: Int64,
        layout: FingerprintLayout,
        to commands: inout RedisCommands
    ) {
        guard !records.isEmpty else { return }
        // One `HSET` per run of records of one partition (a batch is mostly of a few).
        var start = 0
        while start < records.count {
            let partition = records[start].ref.partition
            var end = start + 1
            while end < records.count && records[end].ref.partition == partition { end += 1 }
            let key = keys.outcomes(topic: partition.topic, partition: partition.partition, generation: generation)
            commands.begin(.hset, arguments: 1 + 2 * (end - start))
            commands.appendKey(key)
            for record in records[start..<end] {
                commands.append { Self.appendOutcomeField(offset: record.ref.offset, record.fingerprint, to: &$0) }
                commands.append { value in
                    value += record.result.value
                    if let feedback = record.feedback {
                        value.append(UInt8(ascii: "\n"))
                        value += feedback.value
                    }
                }
            }
            commands.begin(.expireAt, arguments: 2)
            commands.appendKey(key)
            commands.append(layout.expiry(of: generation))
            start = end
        }
    }

    /// Appends a call of ``Scripts/release`` per slot: each released claim of this owner, in
    /// this generation or the one before, becomes `F`.
    private func appendReleases(
        _ released: [(resultId: String, token: String)],
        layout: FingerprintLayout,
        now: Int64,
        to commands: inout RedisCommands
    ) {
        guard !released.isEmpty else { return }
        let generation = layout.generation(at: now)
        let entries = released.map { entry in
            (print: NotificationFingerprint(resultId: entry.resultId), tag: keys.tag(token: entry.token))
        }
        for group in redis.groupedBySlot(
            Array(entries.indices),
            key: { keys.claims(generation: 0, bucket: 0, tag: entries[$0].tag) }
        ) {
            commands.beginEvalsha(Scripts.release, keyCount: 2 * group.count, argumentCount: 1 + 2 * group.count)
            for index in group {
                let bucket = layout.bucket(of: entries[index].print)
                for g in [generation, generation - 1] {
                    commands.appendKey {
                        keys.appendClaims(generation: g, bucket: bucket, tag: entries[index].tag, to: &$0)
                    }
                }
            }
            commands.append(claimId)
            for index in group {
                commands.append(entries[index].print.text)
                commands.append(entries[index].print.text)
            }
        }
    }

    /// Appends one `HDEL` per run of `forgotten` in one outcome hash (they come per partition).
    private func appendForgotten(_ forgotten: [SettledRecord], to commands: inout RedisCommands) {
        var start = 0
        while start < forgotten.count {
            let (partition, generation) = (forgotten[start].partition, forgotten[start].outcomeGeneration)
            var end = start + 1
            while end < forgotten.count && forgotten[end].outcomeGeneration == generation
                && forgotten[end].partition == partition
            {
                end += 1
            }
            commands.begin(.hdel, arguments: 1 + end - start)
            commands.appendKey(
                keys.outcomes(topic: partition.topic, partition: partition.partition, generation: generation)
            )
            for entry in forgotten[start..<end] {
                commands.append { Self.appendOutcomeField(offset: entry.offset, entry.fingerprint, to: &$0) }
            }
            start = end
        }
    }
}

/// A notification whose outcome is recorded and whose result is written: its outcome is deleted
/// once a written position stored before passes its message.
struct SettledRecord: Sendable {
    var fingerprint: NotificationFingerprint
    var partition: TopicPartition
    var offset: Int64
    /// The generation its outcome was recorded in (``RedisKeys`` `o:`).
    var outcomeGeneration: Int64
}
