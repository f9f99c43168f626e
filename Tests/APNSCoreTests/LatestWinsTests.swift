import APNSCore
import Testing

/// ``APNSLatestWins``: of the updates of one activity in a process, only the newest is not
/// superseded; an end wins over every update; the table forgets an activity with its last update.
@Suite struct LatestWinsTests {
    @Test("The newest update by timestamp replaces the older ones, whatever order they came in")
    func newestByTimestamp() {
        let table = APNSLatestWins()
        let middle = table.enter("a", mark: APNSActivityMark(end: false, timestamp: 20), jobID: "middle")
        let newest = table.enter("a", mark: APNSActivityMark(end: false, timestamp: 30), jobID: "newest")
        let oldest = table.enter("a", mark: APNSActivityMark(end: false, timestamp: 10), jobID: "oldest")
        let other = table.enter("b", mark: APNSActivityMark(end: false, timestamp: 1), jobID: "other")
        #expect(middle.replacement == "newest")
        #expect(oldest.replacement == "newest")
        #expect(newest.replacement == nil)
        #expect(other.replacement == nil)
        #expect(table.activities == 2)
    }

    @Test("An end wins over every update, even a later one; of equal marks neither replaces the other")
    func endWinsAndTiesStand() {
        let table = APNSLatestWins()
        let end = table.enter("a", mark: APNSActivityMark(end: true, timestamp: 5), jobID: "end")
        let later = table.enter("a", mark: APNSActivityMark(end: false, timestamp: 50), jobID: "later")
        #expect(later.replacement == "end")
        #expect(end.replacement == nil)
        // The same job consumed twice, or two updates of the same second: both are sent.
        let first = table.enter("t", mark: APNSActivityMark(end: false, timestamp: 7), jobID: "first")
        let second = table.enter("t", mark: APNSActivityMark(end: false, timestamp: 7), jobID: "second")
        #expect(first.replacement == nil)
        #expect(second.replacement == nil)
        let newer = table.enter("t", mark: APNSActivityMark(end: false, timestamp: 8), jobID: "newer")
        #expect(first.replacement == "newer")
        #expect(second.replacement == "newer")
        #expect(newer.replacement == nil)
    }

    @Test("An activity is forgotten when its last ticket goes; the newest stays while an older one waits")
    func forgottenWithTheLastTicket() {
        let table = APNSLatestWins()
        var older: APNSActivityTicket? = table.enter("a", mark: APNSActivityMark(end: false, timestamp: 1), jobID: "o")
        var newer: APNSActivityTicket? = table.enter("a", mark: APNSActivityMark(end: false, timestamp: 2), jobID: "n")
        #expect(newer?.replacement == nil)
        newer = nil
        // The newest was answered; the older one waiting still loses to it.
        #expect(older?.replacement == "n")
        #expect(table.activities == 1)
        older = nil
        #expect(table.activities == 0)
        let again = table.enter("a", mark: APNSActivityMark(end: false, timestamp: 1), jobID: "again")
        #expect(again.replacement == nil)
    }

    @Test("Marks compare by event, then timestamp")
    func marks() {
        let update = APNSActivityMark(end: false, timestamp: 100)
        let end = APNSActivityMark(end: true, timestamp: 1)
        #expect(update < end)
        #expect(!(APNSActivityMark(end: false, timestamp: 100) < update))
        #expect(update < APNSActivityMark(end: false, timestamp: 101))
    }

    @Test("Status 522 is the worker's superseded, not Apple's")
    func status() {
        #expect(APNSStatus.superseded.rawValue == 522)
        #expect(APNSStatus.superseded.name == "superseded")
        #expect(!APNSStatus.superseded.isFromApple)
        #expect(APNSStatus(rawValue: 523).isFromApple)
    }
}
