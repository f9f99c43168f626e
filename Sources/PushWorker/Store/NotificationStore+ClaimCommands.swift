import APNSCore
import Foundation
import PushRedis

// The commands of a claim round trip and the reading of their replies.
extension NotificationStore {
    /// Claims the requests at `indices`, all in one pipeline, and returns their codes (a
    /// ``ClaimReply`` and its detail, as the claim script answers) in the order of `indices`.
    ///
    /// A usual notification (no `registeredAt`, no device limit, a permit to be sent) is claimed
    /// with plain commands: `HSETNX` of its fingerprint into its claims bucket of this
    /// generation, `HGET` in the bucket of the generation before, and, for each app's
    /// unregistered tokens, one `HMGET` of the tokens; Redis runs a command called from Lua at
    /// about twice the cost of the same command sent as it is
    /// (`docs/architecture.md#the-claim`). A usual notification that finds a state (a claim or a
    /// settled notification) in either bucket is then decided by the script, in one more round
    /// trip, which reads that state as it reads every other. The other notifications go through
    /// the script at once.
    func runClaims<Request: ClaimSubject>(
        topic: String,
        _ requests: [Request],
        _ indices: [Int],
        tags: [UInt16?],
        hour: Int64,
        permits: [Bool],
        dead: Set<[UInt8]>,
        ttlSeconds: Int
    ) async throws(RedisError) -> [[UInt8]] {
        let layout = fingerprintLayout(ttlSeconds: ttlSeconds)
        let now = Int64(Date().timeIntervalSince1970)
        let round = ClaimRound(
            topic: topic,
            requests: requests,
            tags: tags,
            place: ClaimPlace(layout: layout, now: now),
            hour: hour,
            permits: permits,
            dead: dead,
            verdicts: keys.verdictGeneration(at: now)
        )
        let usual = indices.filter { round.isUsual($0) }
        let scripted = indices.filter { !round.isUsual($0) }
        var commands = RedisCommands(capacity: 256 + indices.count * (3 * keys.prefix.utf8.count + 320))
        let plain = appendPlainClaims(round, usual, to: &commands)
        let groups = appendClaimScript(round, scripted, to: &commands)
        var codes = [[UInt8]?](repeating: nil, count: requests.count)
        let replies: [RedisValue]
        do {
            replies = try await claimRoundTrip(commands)
        } catch {
            fingerprintExpiries.withLock { $0.forget(plain.expiring, generation: round.place.generation) }
            throw error
        }
        let (found, plainFailures) = try Self.readPlainClaims(plain, replies: replies[..<plain.commands], into: &codes)
        if !plainFailures.isEmpty {
            fingerprintExpiries.withLock { $0.forget(plain.expiring, generation: round.place.generation) }
        }
        let scriptFailures = try Self.readClaimScript(groups, replies: replies[plain.commands...], into: &codes)
        try checkFailures(plainFailures + scriptFailures, of: plain.groups.count + groups.count)
        if !found.isEmpty {
            // The script decides what they found, as it decides for every other notification.
            var again = RedisCommands(capacity: 256 + found.count * (3 * keys.prefix.utf8.count + 320))
            let groups = appendClaimScript(round, found, to: &again)
            let replies = try await claimRoundTrip(again)
            try checkFailures(
                try Self.readClaimScript(groups, replies: replies[...], into: &codes),
                of: groups.count
            )
        }
        return indices.map { codes[$0]! }
    }

    /// What every command of one claim round is built from.
    struct ClaimRound<Request: ClaimSubject> {
        let topic: String
        let requests: [Request]
        let tags: [UInt16?]
        let place: ClaimPlace
        let hour: Int64
        let permits: [Bool]
        let dead: Set<[UInt8]>
        /// The generation of the unregistered tokens (``RedisKeys/verdictGeneration(at:)``).
        let verdicts: Int64

        /// No `registeredAt`, no device limit, a permit to be sent: the script's options are
        /// empty.
        func hasUsualOptions(_ index: Int) -> Bool {
            requests[index].registeredAt == nil && requests[index].devicePerHour == 0 && permits[index]
        }

        /// Claimed with plain commands (unless they find a state): usual options, and no dead
        /// owner's claims to take over.
        func isUsual(_ index: Int) -> Bool {
            dead.isEmpty && hasUsualOptions(index)
        }
    }

    /// Where a claim round writes and looks: this generation (``FingerprintLayout``) and the one
    /// before.
    struct ClaimPlace {
        let layout: FingerprintLayout
        let generation: Int64

        init(layout: FingerprintLayout, now: Int64) {
            self.layout = layout
            generation = layout.generation(at: now)
        }
    }

    /// Looks up the outcomes recorded for claims that found their notification settled, taken
    /// over, or held by another live owner (``RedisKeys`` `o:`, this generation and the one
    /// before): a notification whose outcome is recorded by this same message becomes
    /// ``ClaimReply/recorded``, followed by the outcome. One round trip (per primary).
    func findOutcomes<Request: ClaimSubject>(
        topic: String,
        _ requests: [Request],
        _ indices: [Int],
        ttlSeconds: Int,
        codes: inout [[UInt8]]
    ) async throws(RedisError) {
        guard !indices.isEmpty else { return }
        let layout = fingerprintLayout(ttlSeconds: ttlSeconds)
        let generation = layout.generation(at: Int64(Date().timeIntervalSince1970))
        var commands = RedisCommands(capacity: indices.count * 2 * 128)
        for index in indices {
            let field = Self.outcomeField(offset: requests[index].offset, requests[index].fingerprint)
            for g in [generation, generation - 1] {
                commands.hget(
                    keys.outcomes(topic: topic, partition: requests[index].partition, generation: g),
                    field: field
                )
            }
        }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        guard replies.count == commands.count else {
            throw RedisError(.protocol, "the outcome lookups got \(replies.count) replies for \(commands.count)")
        }
        for (n, index) in indices.enumerated() {
            for reply in replies[(2 * n)..<(2 * n + 2)] {
                if let message = reply.errorMessage {
                    throw RedisError(.server("ERR"), "Redis refused an outcome lookup: \(message)")
                }
                if let outcome = reply.bytes {
                    codes[index] = [ClaimReply.recorded.rawValue] + outcome
                    break
                }
            }
        }
    }

    /// How a claim of an earlier build names a topic, `|<topic mark>|`: four hex digits of an
    /// FNV-1a hash of its name. Such a claim, `<owner>|<topic mark>|<partition>|<offset>`, is
    /// recognised by the claim script (``Scripts/claim``) as its message's.
    static func legacyTopicMark(_ topic: String) -> String {
        var hash: UInt32 = 0x811C_9DC5
        for byte in topic.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        let folded = (hash >> 16) ^ (hash & 0xFFFF)
        let hex = String(folded, radix: 16)
        return "|" + String(repeating: "0", count: 4 - hex.count) + hex + "|"
    }

    /// An outcome's field in its hash, `<offset>|<fingerprint>`.
    static func outcomeField(offset: Int64, _ fingerprint: NotificationFingerprint) -> [UInt8] {
        var field: [UInt8] = []
        field.reserveCapacity(42)
        appendOutcomeField(offset: offset, fingerprint, to: &field)
        return field
    }

    /// Appends ``outcomeField(offset:_:)``.
    static func appendOutcomeField(offset: Int64, _ fingerprint: NotificationFingerprint, to field: inout [UInt8]) {
        DecimalText.append(offset, to: &field)
        field.append(UInt8(ascii: "|"))
        fingerprint.text.append(to: &field)
    }

    /// One claim pipeline (plain claims, the claim script, or both) and its replies, one per
    /// command.
    private func claimRoundTrip(_ commands: RedisCommands) async throws(RedisError) -> [RedisValue] {
        let replies = try await measured { () throws(RedisError) in
            try await redis.pipeline(commands, scripts: [Scripts.claim])
        }
        guard replies.count == commands.count else {
            throw RedisError(
                .protocol,
                "the claim's pipeline of \(commands.count) commands got \(replies.count) replies"
            )
        }
        return replies
    }

    /// A claim's commands that failed, one error message per slot: on a cluster, a slot
    /// without a primary answers ``ClaimReply/busy`` for its requests, and the claim fails only when
    /// every slot did; on a server, any failure fails the claim.
    private func checkFailures(_ failures: [String], of groups: Int) throws(RedisError) {
        guard let first = failures.first, !redis.isCluster || failures.count == groups else { return }
        throw RedisError(.server("ERR"), "the claim failed: \(first)")
    }

    /// The code of a usual notification claimed with plain commands and not unregistered.
    private static let sendCode = [ClaimReply.send.rawValue]

    /// A released claim's state in a bucket (``Scripts/release``): as good as none.
    private static let releasedState = [UInt8(ascii: "F")]

    /// The plain commands of a pipeline's usual claims: which requests each slot's commands
    /// cover, how many commands there are, and the buckets given their expiry.
    private struct PlainClaims {
        /// Per slot (one on a server): the requests, whose `HSETNX` and `HGET` come first in
        /// that order, the requests of each app's `HMGET` after them, then the `EXPIREAT`s.
        var groups: [(claims: [Int], lookups: [[Int]], expiries: Int)] = []
        var commands = 0
        /// The buckets (``FingerprintLayout/place(bucket:tag:)``) given their expiry.
        var expiring: [Int] = []
    }

    /// Appends, per slot, an `HSETNX <bucket> <fingerprint> <claim id><message key>`
    /// and an `HGET <bucket of the generation before> <fingerprint>` for each request, then
    /// an `HMGET <app's unregistered tokens> <tokens…>` for each app and environment among them,
    /// then an `EXPIREAT` for each bucket this worker writes first in this generation
    /// (``FingerprintExpiries``; a bucket never empties, so it keeps it).
    private func appendPlainClaims<Request: ClaimSubject>(
        _ round: ClaimRound<Request>,
        _ indices: [Int],
        to commands: inout RedisCommands
    ) -> PlainClaims {
        var plain = PlainClaims()
        let (buckets, needsExpiry) = plainBuckets(round, indices, expiring: &plain.expiring)
        let tags = round.tags
        for group in redis.groupedBySlot(indices, key: { keys.claims(generation: 0, bucket: 0, tag: tags[$0]) }) {
            var lookups: [[Int]] = []
            var expiring: [(bucket: Int, tag: UInt16?)] = []
            for index in group {
                appendPlainClaim(round, index, bucket: buckets[index], to: &commands)
                if needsExpiry[index] { expiring.append((buckets[index], tags[index])) }
                // Most batches are of one app: the last lookup is tried first.
                if let place = lookups.lastIndex(where: {
                    round.requests[$0[0]].app == round.requests[index].app
                        && round.requests[$0[0]].environment == round.requests[index].environment
                }) {
                    lookups[place].append(index)
                } else {
                    lookups.append([index])
                }
            }
            for lookup in lookups {
                let first = round.requests[lookup[0]]
                commands.begin(.hmget, arguments: 1 + lookup.count)
                commands.appendKey {
                    keys.appendUnregistered(
                        app: first.app,
                        environment: first.environment,
                        generation: round.verdicts,
                        tag: tags[lookup[0]],
                        to: &$0
                    )
                }
                for index in lookup { commands.append(round.requests[index].tokenHex) }
            }
            for (bucket, tag) in expiring {
                commands.begin(.expireAt, arguments: 2)
                commands.appendKey {
                    keys.appendClaims(generation: round.place.generation, bucket: bucket, tag: tag, to: &$0)
                }
                commands.append(round.place.layout.expiry(of: round.place.generation))
            }
            plain.groups.append((group, lookups, expiring.count))
            plain.commands += 2 * group.count + lookups.count + expiring.count
        }
        return plain
    }

    /// Each request's bucket, computed once (a 64-bit division), and whether this worker writes
    /// it first in this generation (under one lock); those buckets are added to `expiring`.
    private func plainBuckets<Request: ClaimSubject>(
        _ round: ClaimRound<Request>,
        _ indices: [Int],
        expiring: inout [Int]
    ) -> (buckets: [Int], needsExpiry: [Bool]) {
        let layout = round.place.layout
        var buckets = [Int](repeating: 0, count: round.requests.count)
        for index in indices { buckets[index] = layout.bucket(of: round.requests[index].fingerprint) }
        var needsExpiry = [Bool](repeating: false, count: round.requests.count)
        fingerprintExpiries.withLock { expiries in
            for index in indices {
                let at = layout.place(bucket: buckets[index], tag: round.tags[index])
                if expiries.needsExpiry(place: at, generation: round.place.generation, places: layout.places) {
                    needsExpiry[index] = true
                    expiring.append(at)
                }
            }
        }
        return (buckets, needsExpiry)
    }

    /// One usual claim: `HSETNX <bucket> <fingerprint> <claim id><message key>`, then
    /// `HGET <bucket of the generation before> <fingerprint>`.
    private func appendPlainClaim<Request: ClaimSubject>(
        _ round: ClaimRound<Request>,
        _ index: Int,
        bucket: Int,
        to commands: inout RedisCommands
    ) {
        let (current, previous) = (
            RedisKeys.claimsGeneration(round.place.generation), RedisKeys.claimsGeneration(round.place.generation - 1)
        )
        let tag = round.tags[index]
        let print = round.requests[index].fingerprint
        commands.begin(.hsetnx, arguments: 3)
        commands.appendKey { keys.appendClaims(generation: current, bucket: bucket, tag: tag, to: &$0) }
        commands.append(print.text)
        commands.append { value in
            value += claimId
            value.append(contentsOf: repeatElement(0, count: 8))
            ClaimNames.appendMessage(
                topic: round.topic,
                partition: round.requests[index].partition,
                offset: round.requests[index].offset,
                to: &value,
                at: value.count - 8
            )
        }
        commands.begin(.hget, arguments: 2)
        commands.appendKey { keys.appendClaims(generation: previous, bucket: bucket, tag: tag, to: &$0) }
        commands.append(print.text)
    }

    /// Reads the replies of ``appendPlainClaims``: a notification claimed (its `HSETNX` wrote,
    /// its `HGET` of the generation before found nothing, or a released claim) gets ``ClaimReply/send``, or ``ClaimReply/unregistered`` and
    /// its time when its token is stored as unregistered; one that found a state is returned,
    /// for the script to decide. A slot whose commands failed gets ``ClaimReply/busy`` for its
    /// requests, and its error is returned.
    private static func readPlainClaims(
        _ plain: PlainClaims,
        replies: ArraySlice<RedisValue>,
        into codes: inout [[UInt8]?]
    ) throws(RedisError) -> (found: [Int], failures: [String]) {
        var found: [Int] = []
        var failures: [String] = []
        var reply = replies.startIndex
        for (claims, lookups, expiries) in plain.groups {
            var failure: String? = nil
            for index in claims {
                let (written, before) = (replies[reply], replies[reply + 1])
                reply += 2
                if let message = written.errorMessage ?? before.errorMessage {
                    failure = message
                } else if written.int == 1 && (before.isNull || before.bytes == releasedState) {
                    // Claimed, and nothing (or a released claim) in the generation before; the
                    // lookup below may find the token unregistered.
                    codes[index] = sendCode
                } else if written.int != nil && (before.isNull || before.bytes != nil) {
                    found.append(index)
                } else {
                    throw RedisError(.protocol, "a claim's HSETNX and HGET answered \(written), \(before)")
                }
            }
            for lookup in lookups {
                let answer = replies[reply]
                reply += 1
                if let message = answer.errorMessage {
                    failure = message
                    continue
                }
                guard let items = answer.array, items.count == lookup.count else {
                    throw RedisError(
                        .protocol,
                        "the unregistered tokens' HMGET answered \(answer) for \(lookup.count) tokens"
                    )
                }
                for (index, item) in zip(lookup, items) where codes[index] != nil {
                    if let since = item.bytes { codes[index] = [ClaimReply.unregistered.rawValue] + since }
                }
            }
            for _ in 0..<expiries {
                if let message = replies[reply].errorMessage { failure = message }
                reply += 1
            }
            if let failure {
                failures.append(failure)
                if !found.isEmpty { found.removeAll { claims.contains($0) } }
                for index in claims { codes[index] = [ClaimReply.busy.rawValue] }
            }
        }
        return (found, failures)
    }

    /// Appends a call of the claim script for the requests at `indices`: one call on a server,
    /// one per hash slot on a cluster. Returns the requests of each call.
    private func appendClaimScript<Request: ClaimSubject>(
        _ round: ClaimRound<Request>,
        _ indices: [Int],
        to commands: inout RedisCommands
    ) -> [[Int]] {
        let tags = round.tags
        let groups = redis.groupedBySlot(indices) { keys.claims(generation: 0, bucket: 0, tag: tags[$0]) }
        let deadOwners = round.dead.sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 }
        let legacyMark = Self.legacyTopicMark(round.topic)
        for group in groups {
            commands.beginEvalsha(Scripts.claim, keyCount: group.count * 4, argumentCount: 4 + group.count * 5)
            for index in group { appendScriptKeys(round, index, to: &commands) }
            commands.append(claimId)
            commands.append(round.place.layout.expiry(of: round.place.generation))
            commands.append(deadOwners)
            commands.append(legacyMark)
            for index in group { appendScriptArguments(round, index, to: &commands) }
        }
        return groups
    }

    /// The claim script's four keys for one request: its bucket of this generation and of the
    /// one before, its app's unregistered tokens, and its device counter (the bucket again
    /// without a device limit).
    private func appendScriptKeys<Request: ClaimSubject>(
        _ round: ClaimRound<Request>,
        _ index: Int,
        to commands: inout RedisCommands
    ) {
        // The requests are read in place (`round.requests[index].…`): a copy of one retains its strings.
        let tag = round.tags[index]
        let generation = round.place.generation
        let bucket = round.place.layout.bucket(of: round.requests[index].fingerprint)
        commands.appendKey { keys.appendClaims(generation: generation, bucket: bucket, tag: tag, to: &$0) }
        commands.appendKey { keys.appendClaims(generation: generation - 1, bucket: bucket, tag: tag, to: &$0) }
        commands.append {
            keys.appendUnregistered(
                app: round.requests[index].app,
                environment: round.requests[index].environment,
                generation: round.verdicts,
                tag: tag,
                to: &$0
            )
        }
        if round.requests[index].devicePerHour == 0 {
            // Without a device limit the counter is not touched: the bucket's key stands in for
            // it (the same slot).
            commands.append { keys.appendClaims(generation: generation, bucket: bucket, tag: tag, to: &$0) }
        } else {
            commands.append {
                keys.appendDeviceCounter(
                    app: round.requests[index].app,
                    token: round.requests[index].tokenHex,
                    hour: round.hour,
                    tag: tag,
                    to: &$0
                )
            }
        }
    }

    /// The claim script's five arguments for one request: its message, token, options
    /// (`<registeredAt>|<device limit>|<permit>`, empty when usual), fingerprint and place.
    private func appendScriptArguments<Request: ClaimSubject>(
        _ round: ClaimRound<Request>,
        _ index: Int,
        to commands: inout RedisCommands
    ) {
        commands.append(
            ClaimNames.message(
                topic: round.topic,
                partition: round.requests[index].partition,
                offset: round.requests[index].offset
            )
        )
        commands.append(round.requests[index].tokenHex)
        if round.hasUsualOptions(index) {
            commands.append([UInt8]())  // the usual options, in two bytes
        } else {
            commands.append { options in
                if let registeredAt = round.requests[index].registeredAt {
                    DecimalText.append(registeredAt, to: &options)
                }
                options.append(UInt8(ascii: "|"))
                DecimalText.append(Int64(round.requests[index].devicePerHour), to: &options)
                options.append(UInt8(ascii: "|"))
                options.append(round.permits[index] ? UInt8(ascii: "1") : UInt8(ascii: "0"))
            }
        }
        commands.append(round.requests[index].fingerprint.text)
        commands.append { place in
            DecimalText.append(Int64(round.requests[index].partition), to: &place)
            place.append(UInt8(ascii: "|"))
            DecimalText.append(round.requests[index].offset, to: &place)
        }
    }

    /// Reads the replies of ``appendClaimScript``'s calls into `codes`. A call that failed gets
    /// ``ClaimReply/busy`` for its requests, and its error is returned.
    private static func readClaimScript(
        _ groups: [[Int]],
        replies: ArraySlice<RedisValue>,
        into codes: inout [[UInt8]?]
    ) throws(RedisError) -> [String] {
        var failures: [String] = []
        for (group, reply) in zip(groups, replies) {
            if let message = reply.errorMessage {
                for index in group { codes[index] = [ClaimReply.busy.rawValue] }
                failures.append(message)
                continue
            }
            guard let items = reply.array, items.count == group.count else {
                throw RedisError(.protocol, "the claim script answered \(reply) for \(group.count) notifications")
            }
            for (index, item) in zip(group, items) {
                guard let bytes = item.bytes, !bytes.isEmpty else {
                    throw RedisError(.protocol, "the claim script answered \(item)")
                }
                codes[index] = bytes
            }
        }
        return failures
    }
}
