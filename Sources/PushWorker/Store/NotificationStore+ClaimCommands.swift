import APNSCore
import Foundation
import PushRedis

// The commands of a claim round trip and the reading of their replies.
extension NotificationStore {
    /// Claims the requests at `indices`, all in one pipeline, and returns their codes (a
    /// ``ClaimReply`` and its detail, as the claim script answers) in the order of `indices`.
    ///
    /// A usual notification (no `registeredAt`, no device limit, a permit to be sent) is claimed
    /// with plain commands: `SET … NX GET` for its record and, for each app's unregistered
    /// tokens, one `HMGET` of the tokens; Redis runs a command called from Lua at about twice
    /// the cost of the same command sent as it is (`docs/architecture.md#the-claim`). A usual
    /// notification whose `SET` finds a state (a claim or a record) is then decided by the
    /// script, in one more round trip, which reads that state as it reads every other. The
    /// other notifications go through the script at once.
    func runClaims<Request: ClaimSubject>(
        topic: String,
        _ requests: [Request],
        _ indices: [Int],
        tags: [UInt16?],
        hour: Int64,
        permits: [Bool],
        dead: Set<String>,
        ttlSeconds: Int
    ) async throws(RedisError) -> [[UInt8]] {
        var usual: [Int] = []
        var scripted: [Int] = []
        for index in indices {
            if dead.isEmpty && requests[index].registeredAt == nil && requests[index].devicePerHour == 0
                && permits[index]
            {
                usual.append(index)
            } else {
                scripted.append(index)
            }
        }
        var commands = RedisCommands(capacity: 256 + indices.count * (3 * keys.prefix.utf8.count + 320))
        let plain = appendPlainClaims(topic: topic, requests, usual, tags: tags, ttlSeconds: ttlSeconds, to: &commands)
        let groups = appendClaimScript(
            topic: topic,
            requests,
            scripted,
            tags: tags,
            hour: hour,
            permits: permits,
            dead: dead,
            ttlSeconds: ttlSeconds,
            to: &commands
        )
        let layout = fingerprintLayout(ttlSeconds: ttlSeconds)
        let generation = layout.generation(at: Int64(Date().timeIntervalSince1970))
        appendFingerprintLookups(requests, indices, tags: tags, layout: layout, generation: generation, to: &commands)
        let replies = try await claimRoundTrip(commands)
        var codes = [[UInt8]?](repeating: nil, count: requests.count)
        var settled = [Bool](repeating: false, count: requests.count)
        let (found, plainFailures) = try Self.readPlainClaims(plain, replies: replies[..<plain.commands], into: &codes)
        let scriptEnd = plain.commands + groups.count
        let scriptFailures = try Self.readClaimScript(
            groups,
            replies: replies[plain.commands..<scriptEnd],
            into: &codes
        )
        try checkFailures(plainFailures + scriptFailures, of: plain.groups.count + groups.count)
        try readFingerprintLookups(indices, replies: replies[scriptEnd...], settled: &settled, codes: &codes)
        if !found.isEmpty {
            // The script decides what they found, as it decides for every other notification;
            // their fingerprints are looked up again after it, since a record found in the first
            // round may have given way to its fingerprint since.
            var again = RedisCommands(capacity: 256 + found.count * (3 * keys.prefix.utf8.count + 320))
            let groups = appendClaimScript(
                topic: topic,
                requests,
                found,
                tags: tags,
                hour: hour,
                permits: permits,
                dead: dead,
                ttlSeconds: ttlSeconds,
                to: &again
            )
            appendFingerprintLookups(requests, found, tags: tags, layout: layout, generation: generation, to: &again)
            let replies = try await claimRoundTrip(again)
            try checkFailures(
                try Self.readClaimScript(groups, replies: replies[..<groups.count], into: &codes),
                of: groups.count
            )
            try readFingerprintLookups(found, replies: replies[groups.count...], settled: &settled, codes: &codes)
        }
        try await giveWayToFingerprints(indices, settled: settled, codes: &codes, requests, tags: tags)
        return indices.map { codes[$0]! }
    }

    /// Appends, after a round's claims, `SISMEMBER` of each request's fingerprint in its bucket
    /// of this generation and of the one before (``FingerprintLayout``). In the same slot as the
    /// request's record, so after its claim: a claim that found no record finds the fingerprint
    /// written before the record was deleted (``compact(_:ttlSeconds:to:)``).
    private func appendFingerprintLookups<Request: ClaimSubject>(
        _ requests: [Request],
        _ indices: [Int],
        tags: [UInt16?],
        layout: FingerprintLayout,
        generation: Int64,
        to commands: inout RedisCommands
    ) {
        for index in indices {
            let fingerprint = NotificationFingerprint(resultId: requests[index].resultId)
            let bucket = layout.bucket(of: fingerprint)
            for g in [generation, generation - 1] {
                commands.begin(argumentCount: 3)
                commands.append("SISMEMBER")
                commands.appendKey { keys.appendFingerprints(generation: g, bucket: bucket, tag: tags[index], to: &$0) }
                commands.append(fingerprint.member)
            }
        }
    }

    /// Reads ``appendFingerprintLookups``' replies: whether each request's fingerprint was found.
    /// A lookup that failed fails the claim on a server and makes its request busy on a cluster
    /// (its slot has no primary), as a failed claim does.
    private func readFingerprintLookups(
        _ indices: [Int],
        replies: ArraySlice<RedisValue>,
        settled: inout [Bool],
        codes: inout [[UInt8]?]
    ) throws(RedisError) {
        guard replies.count == indices.count * 2 else {
            throw RedisError(.protocol, "the fingerprint lookups got \(replies.count) replies for \(indices.count)")
        }
        var reply = replies.startIndex
        for index in indices {
            var found = false
            for _ in 0..<2 {
                if let message = replies[reply].errorMessage {
                    guard redis.isCluster else { throw RedisError(.server("ERR"), "the claim failed: \(message)") }
                    codes[index] = [ClaimReply.busy.rawValue]
                }
                if replies[reply].int == 1 { found = true }
                reply += 1
            }
            settled[index] = found
        }
    }

    /// Requests whose fingerprint was found are settled notifications whose records were
    /// deleted: a claim this round made for one of them (send, unregistered, over the device
    /// limit) is deleted again, and each becomes ``ClaimReply/settled``. A request decided on a
    /// record it found (recorded, another message's, another owner's) keeps its decision: the
    /// record says more.
    private func giveWayToFingerprints<Request: ClaimSubject>(
        _ indices: [Int],
        settled: [Bool],
        codes: inout [[UInt8]?],
        _ requests: [Request],
        tags: [UInt16?]
    ) async throws(RedisError) {
        var claimed: [Int] = []
        for index in indices where settled[index] {
            guard let code = codes[index], let reply = ClaimReply(code: code) else { continue }
            switch reply {
            case .send, .unregistered, .rateLimited:
                claimed.append(index)
                codes[index] = [ClaimReply.settled.rawValue]
            case .throttled:
                codes[index] = [ClaimReply.settled.rawValue]
            case .resend, .recorded, .duplicate, .otherOwner, .busy, .settled:
                continue
            }
        }
        guard !claimed.isEmpty else { return }
        let commands = claimed.map { [Array("DEL".utf8), keys.record(resultId: requests[$0].resultId, tag: tags[$0])] }
        let replies = try await measured { () throws(RedisError) in try await redis.pipeline(commands) }
        if let failure = replies.first(where: { $0.errorMessage != nil }) {
            throw RedisError(.server("ERR"), "Redis refused to delete a claim: \(failure.errorMessage ?? "")")
        }
    }

    /// A claim's commands that failed, one error message per slot: on a cluster, a slot
    /// without a primary answers ``ClaimReply/busy`` for its requests, and the claim fails only when
    /// every slot did; on a server, any failure fails the claim.
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

    private func checkFailures(_ failures: [String], of groups: Int) throws(RedisError) {
        guard let first = failures.first, !redis.isCluster || failures.count == groups else { return }
        throw RedisError(.server("ERR"), "the claim failed: \(first)")
    }

    /// The code of a usual notification claimed with plain commands and not unregistered.
    private static let sendCode = [ClaimReply.send.rawValue]

    /// The plain commands of a pipeline's usual claims: which requests each slot's commands
    /// cover, and how many commands there are.
    private struct PlainClaims {
        /// Per slot (one on a server): the requests, whose `SET`s come first in that order, and
        /// the requests of each app's `HMGET` after them.
        var groups: [(sets: [Int], lookups: [[Int]])] = []
        var commands = 0
    }

    /// Appends, per slot, a `SET <record> P|<owner>|<topic>|<partition>|<offset> NX GET EX
    /// <ttl>` for each request, then an `HMGET <app's unregistered tokens> <tokens…>` for each
    /// app and environment among them.
    private func appendPlainClaims<Request: ClaimSubject>(
        topic: String,
        _ requests: [Request],
        _ indices: [Int],
        tags: [UInt16?],
        ttlSeconds: Int,
        to commands: inout RedisCommands
    ) -> PlainClaims {
        var plain = PlainClaims()
        let generation = keys.verdictGeneration(at: Int64(Date().timeIntervalSince1970))
        for group in redis.groupedBySlot(indices, key: { keys.record(resultId: requests[$0].resultId, tag: tags[$0]) })
        {
            var lookups: [[Int]] = []
            for index in group {
                commands.begin(argumentCount: 7)
                commands.append("SET")
                commands.appendKey { keys.appendRecord(resultId: requests[index].resultId, tag: tags[index], to: &$0) }
                commands.append { value in
                    value += "P|".utf8
                    value += owner.utf8
                    value.append(UInt8(ascii: "|"))
                    value += topic.utf8
                    value.append(UInt8(ascii: "|"))
                    DecimalText.append(Int64(requests[index].partition), to: &value)
                    value.append(UInt8(ascii: "|"))
                    DecimalText.append(requests[index].offset, to: &value)
                }
                commands.append("NX")
                commands.append("GET")
                commands.append("EX")
                commands.append(Int64(ttlSeconds))
                // Most batches are of one app: the last lookup is tried first.
                if let place = lookups.lastIndex(where: {
                    requests[$0[0]].app == requests[index].app
                        && requests[$0[0]].environment == requests[index].environment
                }) {
                    lookups[place].append(index)
                } else {
                    lookups.append([index])
                }
            }
            for lookup in lookups {
                let first = requests[lookup[0]]
                commands.begin(argumentCount: 2 + lookup.count)
                commands.append("HMGET")
                commands.appendKey {
                    keys.appendUnregistered(
                        app: first.app,
                        environment: first.environment,
                        generation: generation,
                        tag: tags[lookup[0]],
                        to: &$0
                    )
                }
                for index in lookup { commands.append(requests[index].tokenHex) }
            }
            plain.groups.append((group, lookups))
            plain.commands += group.count + lookups.count
        }
        return plain
    }

    /// Reads the replies of ``appendPlainClaims``: a notification claimed (its `SET` found
    /// nothing) gets ``ClaimReply/send``, or ``ClaimReply/unregistered`` and its time when its
    /// token is stored as unregistered; one whose `SET` found a state is returned, for the
    /// script to decide. A slot whose commands failed gets ``ClaimReply/busy`` for its
    /// requests, and its error is returned.
    private static func readPlainClaims(
        _ plain: PlainClaims,
        replies: ArraySlice<RedisValue>,
        into codes: inout [[UInt8]?]
    ) throws(RedisError) -> (found: [Int], failures: [String]) {
        var found: [Int] = []
        var failures: [String] = []
        var reply = replies.startIndex
        for (sets, lookups) in plain.groups {
            var failure: String? = nil
            for index in sets {
                let answer = replies[reply]
                reply += 1
                if let message = answer.errorMessage {
                    failure = message
                } else if answer.isNull {
                    codes[index] = sendCode  // claimed; the lookup below may find it unregistered
                } else if answer.bytes != nil {
                    found.append(index)
                } else {
                    throw RedisError(.protocol, "a claim's SET answered \(answer)")
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
            if let failure {
                failures.append(failure)
                if !found.isEmpty { found.removeAll { sets.contains($0) } }
                for index in sets { codes[index] = [ClaimReply.busy.rawValue] }
            }
        }
        return (found, failures)
    }

    /// Appends a call of the claim script for the requests at `indices`: one call on a server,
    /// one per hash slot on a cluster. Returns the requests of each call.
    private func appendClaimScript<Request: ClaimSubject>(
        topic: String,
        _ requests: [Request],
        _ indices: [Int],
        tags: [UInt16?],
        hour: Int64,
        permits: [Bool],
        dead: Set<String>,
        ttlSeconds: Int,
        to commands: inout RedisCommands
    ) -> [[Int]] {
        let groups = redis.groupedBySlot(indices) { keys.record(resultId: requests[$0].resultId, tag: tags[$0]) }
        let deadOwners = dead.sorted().joined(separator: "\n")
        let generation = keys.verdictGeneration(at: Int64(Date().timeIntervalSince1970))
        for group in groups {
            commands.beginEvalsha(Scripts.claim, keyCount: group.count * 3, argumentCount: 4 + group.count * 3)
            // The requests are read in place (`requests[index].…`): a copy of one retains its strings.
            for index in group {
                let tag = tags[index]
                commands.appendKey { keys.appendRecord(resultId: requests[index].resultId, tag: tag, to: &$0) }
                commands.append {
                    keys.appendUnregistered(
                        app: requests[index].app,
                        environment: requests[index].environment,
                        generation: generation,
                        tag: tag,
                        to: &$0
                    )
                }
                if requests[index].devicePerHour == 0 {
                    // Without a device limit the counter is not touched: the record's key
                    // stands in for it (the same slot).
                    commands.append { keys.appendRecord(resultId: requests[index].resultId, tag: tag, to: &$0) }
                } else {
                    commands.append {
                        keys.appendDeviceCounter(
                            app: requests[index].app,
                            token: requests[index].tokenHex,
                            hour: hour,
                            tag: tag,
                            to: &$0
                        )
                    }
                }
            }
            commands.append(owner)
            commands.append(topic)
            commands.append(Int64(ttlSeconds))
            commands.append(deadOwners)
            for index in group {
                commands.append { place in
                    DecimalText.append(Int64(requests[index].partition), to: &place)
                    place.append(UInt8(ascii: "|"))
                    DecimalText.append(requests[index].offset, to: &place)
                }
                commands.append(requests[index].tokenHex)
                if requests[index].registeredAt == nil && requests[index].devicePerHour == 0 && permits[index] {
                    commands.append([UInt8]())  // the usual options, in two bytes
                } else {
                    commands.append { options in
                        if let registeredAt = requests[index].registeredAt {
                            DecimalText.append(registeredAt, to: &options)
                        }
                        options.append(UInt8(ascii: "|"))
                        DecimalText.append(Int64(requests[index].devicePerHour), to: &options)
                        options.append(UInt8(ascii: "|"))
                        options.append(permits[index] ? UInt8(ascii: "1") : UInt8(ascii: "0"))
                    }
                }
            }
        }
        return groups
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
