import PushKafka

/// The last line of defence against a message that stops every worker that reads it (a crash
/// in code that meets it, whatever the cause): `docs/operations.md`, "Messages that stop
/// workers".
///
/// Before intake processes messages of a partition, the worker leaves a *stop record* for it
/// in Redis (``NotificationStore/writeStopRecords(_:ttlSeconds:)``): the offsets it is about to
/// have in flight and how many stops they were in flight at already (``Record``). A worker
/// that stops by choice — a graceful stop (the SIGTERM of a rolling restart), a revocation —
/// removes its records first; one that dies (a trap, SIGKILL, the out-of-memory killer) leaves
/// them. The partition's next owner reads them when the partition is assigned (``learn(_:dead:written:)``):
/// a record whose owner is no longer alive says that every message in it not yet before the
/// partition's written position was in flight when a worker stopped — one more stop each
/// (``Suspects``).
///
/// What the suspects get (``plan(_:)``):
/// - charged one stop: processed as usual. One stop is what a SIGKILL at the end of a rolling
///   restart's grace period, an out-of-memory kill or a lost node look like, and costs nothing
///   more than the records;
/// - charged two or more: processed in *careful steps*, one step in flight at a time (intake
///   waits until the step's messages are done before it takes the next; ``Step/careful``): one
///   message per step when the suspects number at most ``singlesUpTo``, else groups of about
///   √n of the n suspects. A worker that stops during a step charges that step's messages, so
///   each further stop narrows the suspects down to one message;
/// - a message that was alone in its step when it was charged its last stop, and has been
///   charged ``limit`` stops in all, is answered with one `invalidJob` result and skipped
///   (``Step/skip``).
///
/// It does no I/O: intake reads and writes the records and carries out the steps.
struct StopGuard: Sendable {
    /// What a stop record says: the worker had this partition's messages `from...to` in flight
    /// (or about to be), and they had been in flight at `stops` stops before.
    struct Record: Sendable, Hashable {
        var from: Int64
        var to: Int64
        var stops: Int

        /// `<from>|<to>|<stops>`, as stored.
        var text: String { "\(from)|\(to)|\(stops)" }

        /// Whether this record says at least what a record of `from...last` charged `stops`
        /// stops would: a worker that dies with those messages in flight leaves them charged.
        func covers(_ from: Int64, _ last: Int64, _ stops: Int) -> Bool {
            self.from <= from && last <= to && self.stops >= stops
        }

        init(from: Int64, to: Int64, stops: Int) {
            self.from = from
            self.to = to
            self.stops = stops
        }

        /// Reads ``text``; `nil` for anything else (a record of another build, or damaged).
        init?(text: String) {
            let parts = text.split(separator: "|", omittingEmptySubsequences: false)
            guard parts.count == 3, let from = Int64(parts[0]), let to = Int64(parts[1]), let stops = Int(parts[2]),
                from >= 0, to >= from, stops >= 0, stops < 1_000_000
            else { return nil }
            self.init(from: from, to: to, stops: stops)
        }
    }

    /// A partition's messages `from...to` were in flight at `stops` stops.
    struct Suspects: Sendable, Hashable {
        var from: Int64
        var to: Int64
        var stops: Int

        func contains(_ offset: Int64) -> Bool { offset >= from && offset <= to }
        /// How many offsets the range spans (at least 1).
        var span: Int64 {
            let (difference, overflow) = to.subtractingReportingOverflow(from)
            return overflow || difference == .max ? .max : difference + 1
        }
    }

    /// What intake does with a batch's messages, in order.
    enum Step: Sendable {
        /// Processed together, as intake always does.
        case together([KafkaMessage])
        /// Processed as one careful step of `partition`: alone in flight, waited for.
        case careful(TopicPartition, [KafkaMessage], stops: Int)
        /// Charged ``StopGuard/limit`` stops while alone in flight: answered and skipped.
        case skip(KafkaMessage, stops: Int)
    }

    /// Suspects of at most this many offsets are taken one message per careful step.
    static let singlesUpTo: Int64 = 64

    /// The stops that make a message skipped (`worker.maxStopsPerMessage`, at least 2); 0 turns
    /// the guard off: no records, nothing skipped.
    let limit: Int
    var isEnabled: Bool { limit > 0 }
    /// The suspects of each partition, until intake passes them.
    private(set) var suspects: [TopicPartition: [Suspects]] = [:]
    /// The records read for each partition, by owner: removed from Redis once intake passed
    /// every suspect of the partition (``passed(_:committable:)``).
    private(set) var deadOwners: [TopicPartition: Set<String>] = [:]

    init(limit: Int) {
        self.limit = limit
    }

    // MARK: Learning

    /// The records of `partition` whose owners are gone (`dead`, by owner), and its written
    /// position (`written`: every message before it has all its results written; `nil`: none
    /// stored). Returns the suspects learned.
    @discardableResult
    mutating func learn(
        _ partition: TopicPartition,
        dead: [String: Record],
        written: Int64?
    ) -> [Suspects] {
        guard !dead.isEmpty else { return [] }
        deadOwners[partition, default: []].formUnion(dead.keys)
        var learned: [Suspects] = []
        for record in dead.values {
            let from = max(record.from, written ?? record.from)
            guard from <= record.to else { continue }
            learned.append(Suspects(from: from, to: record.to, stops: record.stops + 1))
        }
        if !learned.isEmpty { suspects[partition, default: []] += learned }
        return learned.sorted { ($0.from, $0.to) < ($1.from, $1.to) }
    }

    /// Forgets a partition no longer this worker's (its records stay for its next owner).
    mutating func forget(_ partition: TopicPartition) {
        suspects[partition] = nil
        deadOwners[partition] = nil
    }

    /// Intake's messages of `partition` before `committable` have their results written: the
    /// suspects before it are passed. Returns the dead owners whose records can go once every
    /// suspect of the partition is passed (then only once).
    mutating func passed(_ partition: TopicPartition, committable: Int64) -> Set<String> {
        if var list = suspects[partition] {
            list.removeAll { $0.to < committable }
            suspects[partition] = list.isEmpty ? nil : list
        }
        guard suspects[partition] == nil, let owners = deadOwners.removeValue(forKey: partition) else { return [] }
        return owners
    }

    // MARK: Queries

    /// The suspects that charge the message at `offset` the most stops (the narrowest of
    /// them, when several do); `nil` if it is no suspect.
    func charge(_ partition: TopicPartition, _ offset: Int64) -> Suspects? {
        guard let list = suspects[partition] else { return nil }
        var best: Suspects? = nil
        for s in list where s.contains(offset) {
            if let b = best, b.stops > s.stops || (b.stops == s.stops && b.span <= s.span) { continue }
            best = s
        }
        return best
    }

    /// The most stops charged to any message of `partition` in `from...to`: what a record of
    /// that range carries.
    func stops(_ partition: TopicPartition, from: Int64, to: Int64) -> Int {
        guard let list = suspects[partition] else { return 0 }
        return list.lazy.filter { $0.from <= to && $0.to >= from }.map(\.stops).max() ?? 0
    }

    /// Whether any message of `partition` is to be processed carefully.
    func isCareful(_ partition: TopicPartition) -> Bool {
        suspects[partition]?.contains { $0.stops >= 2 } ?? false
    }

    /// The messages of a careful step of `suspects`: one when they span at most
    /// ``singlesUpTo`` offsets, else about √n.
    static func stepSize(_ suspects: Suspects) -> Int64 {
        let span = suspects.span
        guard span > singlesUpTo else { return 1 }
        return max(1, Int64(Double(span).squareRoot().rounded(.up)))
    }

    // MARK: Planning

    /// What intake does with `messages` (one poll, in order): the messages of partitions
    /// without careful suspects together, first; then, partition by partition, the careful
    /// steps, and after them, together, that partition's messages that follow its suspects.
    func plan(_ messages: [KafkaMessage]) -> [Step] {
        guard isEnabled, !suspects.isEmpty, suspects.keys.contains(where: isCareful) else {
            return messages.isEmpty ? [] : [.together(messages)]
        }
        var together: [KafkaMessage] = []
        var deferred: [TopicPartition: [KafkaMessage]] = [:]
        var order: [TopicPartition] = []
        for message in messages {
            let partition = TopicPartition(topic: message.topic, partition: message.partition)
            if deferred[partition] != nil {
                deferred[partition]!.append(message)
            } else if isCareful(partition), let charge = charge(partition, message.offset), charge.stops >= 2 {
                deferred[partition] = [message]
                order.append(partition)
            } else {
                together.append(message)
            }
        }
        var steps: [Step] = together.isEmpty ? [] : [.together(together)]
        for partition in order { steps += carefulSteps(partition, deferred[partition] ?? []) }
        return steps
    }

    /// The steps for a partition's messages from its first careful suspect on.
    private func carefulSteps(_ partition: TopicPartition, _ messages: [KafkaMessage]) -> [Step] {
        var steps: [Step] = []
        var run: [KafkaMessage] = []
        var runKey: (Suspects, Int64)? = nil
        var plain: [KafkaMessage] = []
        func flushRun() {
            guard let (suspects, _) = runKey, !run.isEmpty else { return }
            if run.count == 1, suspects.from == suspects.to, suspects.stops >= limit {
                steps.append(.skip(run[0], stops: suspects.stops))
            } else {
                steps.append(.careful(partition, run, stops: suspects.stops))
            }
            run = []
            runKey = nil
        }
        func flushPlain() {
            if !plain.isEmpty { steps.append(.together(plain)) }
            plain = []
        }
        for message in messages {
            guard let charge = charge(partition, message.offset), charge.stops >= 2 else {
                flushRun()
                plain.append(message)
                continue
            }
            flushPlain()
            let group = (message.offset - charge.from) / Self.stepSize(charge)
            if let (suspects, key) = runKey, suspects == charge, key == group {
                run.append(message)
            } else {
                flushRun()
                run = [message]
                runKey = (charge, group)
            }
        }
        flushRun()
        flushPlain()
        return steps
    }

    /// The record to leave for `partition` before processing its messages `first...last`, its
    /// oldest message with results outstanding being `committable` (`nil`: none registered):
    /// the record covers whatever of the partition is still in flight.
    func record(_ partition: TopicPartition, first: Int64, last: Int64, committable: Int64?) -> Record {
        let from = min(first, committable ?? first)
        return Record(from: from, to: last, stops: stops(partition, from: from, to: last))
    }
}
