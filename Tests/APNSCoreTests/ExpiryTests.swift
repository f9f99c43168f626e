import Foundation
import Testing

@testable import APNSCore

@Test(arguments: [
    ("0", APNSExpiry.immediately),
    ("1700000000", .at(unixSeconds: 1_700_000_000)),
    ("4294967295", .at(unixSeconds: .max)),
    ("30s", .after(.seconds(30))),
    ("15m", .after(.seconds(900))),
    ("1h", .after(.seconds(3600))),
    ("1d", .after(.seconds(86_400))),
    ("2w", .after(.seconds(1_209_600))),
    ("0s", .after(.zero)),
    (" 1h\t", .after(.seconds(3600))),
])
func parsesExpiry(text: String, expected: APNSExpiry) throws {
    #expect(try APNSExpiry(parsing: text) == expected)
}

@Test(arguments: [
    "", " ", "abc", "-5", "+5", "1.5h", "10y", "h", "1 h", "1H", "30ss", "0x10", "4294967296", "99999999999999w",
])
func rejectsBadExpiry(text: String) {
    do throws(APNSPayloadError) {
        let value = try APNSExpiry(parsing: text)
        Issue.record("\"\(text)\" parsed as \(value)")
    } catch {
        #expect(error.code == .invalidExpiry)
        #expect(error.message.contains("\"\(text)\""))
    }
}

@Test func badExpiryMessageNamesTheAcceptedForms() {
    do throws(APNSPayloadError) {
        _ = try APNSExpiry(parsing: "tomorrow")
        Issue.record("parsed")
    } catch {
        #expect(
            error.message == "expiry \"tomorrow\" is not valid; use 0 (do not store), a UNIX time in seconds "
                + "such as 1700000000, or a number followed by s, m, h, d or w such as 30s, 15m, 1h, 1d or 2w"
        )
    }
}

@Test func wireValues() {
    let now = Date(timeIntervalSince1970: 1_700_000_000.9)
    #expect(APNSExpiry.immediately.unixSeconds(now: now) == 0)
    #expect(APNSExpiry.at(unixSeconds: 1_234).unixSeconds(now: now) == 1_234)
    #expect(APNSExpiry.after(.seconds(30)).unixSeconds(now: now) == 1_700_000_030)
    #expect(APNSExpiry.after(.milliseconds(200)).unixSeconds(now: now) == 1_700_000_001)
    #expect(APNSExpiry.after(.seconds(Int64(UInt32.max))).unixSeconds(now: now) == .max)
    // Never 0 for a relative expiry: 0 would mean "do not store" (§1.2).
    #expect(APNSExpiry.after(.seconds(-10)).unixSeconds(now: Date(timeIntervalSince1970: 5)) == 1)
}
