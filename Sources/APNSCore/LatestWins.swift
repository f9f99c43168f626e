import Synchronization

/// Where a Live Activity update stands among the updates of its activity: `end` above every
/// `update`, then the newer `timestamp`. Two updates of the same rank and timestamp are equal:
/// neither replaces the other (a job consumed twice is one of them).
public struct APNSActivityMark: Sendable, Hashable, Comparable {
    /// 1 for `end`, 0 for `update`: an end always wins.
    public var rank: UInt8
    /// The update's `aps.timestamp` (UNIX seconds).
    public var timestamp: Int64

    public init(end: Bool, timestamp: Int64) {
        rank = end ? 1 : 0
        self.timestamp = timestamp
    }

    public static func < (a: Self, b: Self) -> Bool { (a.rank, a.timestamp) < (b.rank, b.timestamp) }
}

/// Latest wins for Live Activities (`docs/delivery.md`, "Latest wins"): of the updates of one
/// activity (the same push token, or the same channel) waiting in a process, only the newest
/// is sent. Each update in the process holds an ``APNSActivityTicket`` from ``enter(_:mark:jobID:)``
/// until it is answered; a ticket whose activity has a newer update waiting is superseded.
///
/// The table holds one entry per activity with an update in the process, and forgets it when
/// the last such update is answered (its ticket released): it is bounded by what the process
/// holds.
public final class APNSLatestWins: Sendable {
    struct Entry {
        var newest: APNSActivityMark
        var newestJob: String
        var tickets: Int
    }

    private let state = Mutex<[String: Entry]>([:])

    public init() {}

    /// A ticket for an update of `activity` (any key naming it in this process), from job
    /// `jobID`; it becomes the activity's newest when its mark is.
    public func enter(_ activity: String, mark: APNSActivityMark, jobID: String) -> APNSActivityTicket {
        state.withLock { entries in
            if var entry = entries[activity] {
                entry.tickets += 1
                if entry.newest < mark {
                    entry.newest = mark
                    entry.newestJob = jobID
                }
                entries[activity] = entry
            } else {
                entries[activity] = Entry(newest: mark, newestJob: jobID, tickets: 1)
            }
        }
        return APNSActivityTicket(table: self, activity: activity, mark: mark, jobID: jobID)
    }

    /// The job whose update replaced the one of `ticket`, or `nil` while it is the newest.
    func replacement(of ticket: APNSActivityTicket) -> String? {
        state.withLock { entries in
            guard let entry = entries[ticket.activity], ticket.mark < entry.newest else { return nil }
            return entry.newestJob
        }
    }

    fileprivate func release(_ activity: String) {
        state.withLock { entries in
            guard var entry = entries[activity] else { return }
            entry.tickets -= 1
            entries[activity] = entry.tickets > 0 ? entry : nil
        }
    }

    /// Activities with an update in the process.
    public var activities: Int { state.withLock { $0.count } }
}

/// One Live Activity update's place in ``APNSLatestWins``, and the priority and expiration
/// chosen for it. Held
/// by the update while the process has it (its submission, its queued request); released when
/// the last reference goes.
public final class APNSActivityTicket: Sendable {
    let table: APNSLatestWins
    /// The activity's key in the table.
    public let activity: String
    public let mark: APNSActivityMark
    /// The job the update belongs to.
    public let jobID: String
    /// `apns-priority` chosen by the worker (`"priority": "auto"`), 0 while none was: the
    /// job's own priority is sent.
    private let chosen = Atomic<UInt8>(0)
    /// `apns-expiration` chosen by the worker (a broadcast, by its channel's storage policy),
    /// plus one; 0 while none was: the job's own expiration is sent.
    private let chosenExpiration = Atomic<UInt64>(0)

    init(table: APNSLatestWins, activity: String, mark: APNSActivityMark, jobID: String) {
        self.table = table
        self.activity = activity
        self.mark = mark
        self.jobID = jobID
    }

    deinit { table.release(activity) }

    /// The job whose newer update of the same activity replaced this one, or `nil` while this
    /// one is the newest the process has.
    public var replacement: String? { table.replacement(of: self) }

    /// The priority to send instead of the job's (10 or 5), once chosen.
    public var priority: UInt8? {
        get {
            let value = chosen.load(ordering: .relaxed)
            return value == 0 ? nil : value
        }
        set { chosen.store(newValue ?? 0, ordering: .relaxed) }
    }

    /// The `apns-expiration` (UNIX seconds, 0: do not store) to send instead of the job's, once
    /// chosen.
    public var expiration: UInt32? {
        get {
            let value = chosenExpiration.load(ordering: .relaxed)
            return value == 0 ? nil : UInt32(value - 1)
        }
        set { chosenExpiration.store(newValue.map { UInt64($0) + 1 } ?? 0, ordering: .relaxed) }
    }
}
