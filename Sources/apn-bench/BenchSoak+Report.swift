import APNSCore
import Foundation
import PushLocalStack

/// The workers of `apn-bench soak`, by slot: a killed worker started again and a stopped
/// worker's replacement are new processes in the slot of the one they follow.
final class Fleet: @unchecked Sendable {
    private let lock = NSLock()
    /// Every process of each slot, the current one last.
    private var slots: [[LocalWorker]]

    init(_ workers: [LocalWorker]) { slots = workers.map { [$0] } }

    func worker(in slot: Int) -> LocalWorker { lock.withLock { slots[slot].last! } }
    func replace(_ slot: Int, with worker: LocalWorker) { lock.withLock { slots[slot].append(worker) } }
    var current: [LocalWorker] { lock.withLock { slots.map { $0.last! } } }

    /// Each slot's current worker's resident memory. A slot whose worker does not run (killed,
    /// not started again yet) is looked at again a second later, up to 15 times.
    func sampleMemory(_ name: String, at seconds: Double) async -> [MemorySample] {
        let count = lock.withLock { slots.count }
        var samples: [MemorySample] = []
        for slot in 0..<count {
            var sample = MemorySample(name: name, slot: slot, seconds: seconds)
            for attempt in 0..<15 {
                if attempt > 0 { try? await Task.sleep(for: .seconds(1)) }
                let (worker, process) = lock.withLock { (slots[slot].last!, slots[slot].count - 1) }
                sample.worker = worker.id
                sample.pid = worker.processIdentifier
                sample.process = process
                if worker.isRunning, let bytes = residentMemory(of: worker.processIdentifier) {
                    sample.rss = bytes
                    break
                }
            }
            samples.append(sample)
        }
        return samples
    }
}

/// A worker slot's resident memory (VmRSS) at a point of the soak.
struct MemorySample {
    /// start (after the warm-up), middle or end (of the load), or drained (every result read).
    var name: String
    var slot: Int
    /// When, in seconds since the load started.
    var seconds: Double
    var worker = ""
    var pid: Int32 = 0
    /// Which process of the slot: 0 the first, 1 its first restart or replacement, ...
    var process = 0
    var rss: Int?

    var mebibytes: Double? { rss.map { (Double($0) / 1_048_576 * 10).rounded() / 10 } }

    /// One slot's samples: each one, and the growth of the process sampled last from its first
    /// sample to its last (from start to end when one process ran throughout).
    static func json(_ samples: [MemorySample]) -> JSONValue {
        var growth: JSONValue = .null
        var since: JSONValue = .null
        let last = samples.last
        if let last, let first = samples.first(where: { $0.pid == last.pid }), first.name != last.name,
            let from = first.rss, let to = last.rss
        {
            growth = .double((Double(to - from) / 1_048_576 * 10).rounded() / 10)
            since = .string(first.name)
        }
        return .object([
            "slot": .int(Int64((samples.first?.slot ?? 0) + 1)),
            "growthMiB": growth,
            "growthSince": since,
            "samples": .array(
                samples.map { sample in
                    .object([
                        "at": .string(sample.name),
                        "atS": .double((sample.seconds * 10).rounded() / 10),
                        "worker": .string(sample.worker),
                        "pid": .int(Int64(sample.pid)),
                        "replacement": .bool(sample.process > 0),
                        "rssMiB": sample.mebibytes.map(JSONValue.double) ?? .null,
                    ])
                }
            ),
        ])
    }
}

/// A fault of the soak: which, when it began and ended (seconds since the load started), and
/// what it did.
struct FaultRecord {
    var fault: BenchSoak.Fault
    var at: Double
    var ended: Double = 0
    var details: [String: JSONValue] = [:]

    func json(healSeconds: Int, healedBeforeNext: Bool) -> JSONValue {
        .object(
            details.merging([
                "fault": .string(fault.rawValue),
                "atS": .double((at * 10).rounded() / 10),
                "endedAtS": .double((ended * 10).rounded() / 10),
                "healSeconds": .int(Int64(healSeconds)),
                "healedBeforeNext": .bool(healedBeforeNext),
            ]) { _, given in given }
        )
    }
}

extension BenchSoak {
    /// The report in a few lines, for people.
    static func summary(
        faults: [(record: FaultRecord, heal: Int, healed: Bool)],
        tally: ResultTally,
        accepted: FleetLoad.Accepted,
        lostBeforeTheWorkers: Int,
        jobsDeletedUnread: Int,
        samples: [MemorySample],
        redisUsedMemory: Int
    ) -> String {
        func mib(_ bytes: Int) -> String { String(format: "%.1f MiB", Double(bytes) / 1_048_576) }
        var lines = ["soak: \(tally.total) notifications, \(tally.received) results"]
        for (record, heal, healed) in faults {
            let worker = record.details["worker"]?.stringValue.map { " \($0)" } ?? ""
            let back =
                healed
                ? "back to 80% of the load in \(heal) s"
                : "not back to 80% of the load within the \(heal) s before the next fault or the end of the load"
            lines.append("  \(record.fault.rawValue)\(worker) at \(String(format: "%.0f", record.at)) s: \(back)")
        }
        lines.append(
            "  lost \(tally.total - tally.received) (\(lostBeforeTheWorkers) by the broker), "
                + "unflagged duplicates \(accepted.unflagged), written twice \(tally.writtenTwice), "
                + "jobs deleted unread \(jobsDeletedUnread)"
        )
        let largest = tally.gaps.map { $0.to - $0.from }.max() ?? 0
        lines.append(
            "  result offsets the reader skipped: \(tally.skippedOffsets) in \(tally.gaps.count) gaps (the largest "
                + "\(largest); a gap of one is usually an offset without a message, a deleted backlog a large one)"
        )
        let slots = Set(samples.map(\.slot)).sorted()
        lines.append("  worker RSS, start / middle / end / drained (* a restarted or replacement process):")
        for slot in slots {
            let row = samples.filter { $0.slot == slot }.map { sample in
                (sample.rss.map(mib) ?? "?") + (sample.process > 0 ? "*" : "") + " (\(sample.worker))"
            }
            lines.append("    slot \(slot + 1): \(row.joined(separator: " / "))")
        }
        lines.append("  Redis used_memory at the end: \(mib(redisUsedMemory))")
        return lines.joined(separator: "\n")
    }
}
