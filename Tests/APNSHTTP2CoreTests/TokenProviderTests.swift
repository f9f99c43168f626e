import APNSCore
import Foundation
import Testing

@testable import APNSHTTP2Core

@Test func tokenIsSharedUntilTheRefreshIntervalThenReplaced() throws {
    let provider = try APNSTokenProvider(signingKey: Fixture.signingKey(), teamID: Fixture.teamID)
    #expect(provider.refreshInterval == .seconds(3000))

    let first = try provider.currentToken(now: Fixture.minutes(0))
    #expect(try provider.currentToken(now: Fixture.minutes(10)) == first)
    #expect(try provider.currentToken(now: Fixture.minutes(49.99)) == first)

    let second = try provider.currentToken(now: Fixture.minutes(50))
    #expect(second != first)
    #expect(second.issueDate == Fixture.minutes(50))
    #expect(try provider.currentToken(now: Fixture.minutes(99)) == second)
    #expect(try provider.currentToken(now: Fixture.minutes(100)) != second)
}

@Test func injectedClockDrivesTheProvider() throws {
    let clock = ManualClock(Fixture.minutes(0))
    let provider = try APNSTokenProvider(
        signingKey: Fixture.signingKey(),
        teamID: Fixture.teamID,
        refreshInterval: .seconds(20 * 60),
        clock: { [clock] in clock.now }
    )
    let first = try provider.currentToken()
    clock.now = Fixture.minutes(19)
    #expect(try provider.currentToken() == first)
    clock.now = Fixture.minutes(20)
    #expect(try provider.currentToken() != first)
}

@Test func forceRefreshNeverSignsTwiceWithinTwentyMinutes() throws {
    let provider = try APNSTokenProvider(signingKey: Fixture.signingKey(), teamID: Fixture.teamID)
    let first = try provider.currentToken(now: Fixture.minutes(0))

    let early = try provider.forceRefresh(rejected: first, now: Fixture.minutes(5))
    #expect(early == .tooSoon(first, retryAt: Fixture.minutes(20)))
    #expect(try provider.currentToken(now: Fixture.minutes(6)) == first)

    guard case .refreshed(let second) = try provider.forceRefresh(rejected: first, now: Fixture.minutes(20)) else {
        Issue.record("no refresh after 20 minutes")
        return
    }
    #expect(second != first)

    // Another connection reports the old token: it gets the newer one, nothing is signed.
    #expect(try provider.forceRefresh(rejected: first, now: Fixture.minutes(21)) == .alreadyNewer(second))
    // Forcing again right away is refused; so is the regular refresh before 20 minutes.
    #expect(try provider.forceRefresh(rejected: second, now: Fixture.minutes(39)).token == second)
    #expect(try provider.currentToken(now: Fixture.minutes(39)) == second)
    // The regular refresh comes 50 minutes after the forced one.
    #expect(try provider.currentToken(now: Fixture.minutes(69.9)) == second)
    #expect(try provider.currentToken(now: Fixture.minutes(70)) != second)
}

@Test func tokensAreNeverSignedLessThanTwentyMinutesApart() throws {
    let provider = try APNSTokenProvider(
        signingKey: Fixture.signingKey(),
        teamID: Fixture.teamID,
        refreshInterval: .seconds(20 * 60)
    )
    var signed: [Date] = []
    var last: APNSProviderToken?
    // Every 30 seconds for 3 hours, alternate regular and forced refreshes.
    for step in 0...360 {
        let now = Fixture.epoch.addingTimeInterval(Double(step) * 30 + 0.7)
        let token =
            step.isMultiple(of: 2)
            ? try provider.currentToken(now: now)
            : try provider.forceRefresh(rejected: last, now: now).token
        if token != last { signed.append(now) }
        last = token
    }
    #expect(signed.count >= 9)
    for (a, b) in zip(signed, signed.dropFirst()) {
        #expect(b.timeIntervalSince(a) >= 20 * 60)
    }
}

@Test(arguments: [0, 60, 19 * 60 + 59, 60 * 60 + 1, 24 * 3600])
func refreshIntervalsOutsideTwentyToSixtyMinutesAreRejected(seconds: Int) throws {
    let key = try Fixture.signingKey()
    do {
        _ = try APNSTokenProvider(signingKey: key, teamID: Fixture.teamID, refreshInterval: .seconds(seconds))
        Issue.record("accepted \(seconds) s")
    } catch {
        #expect(error.code == .invalidConfiguration)
        #expect(error.message.contains("20 to 60 minutes"), "\(error.message)")
    }
}

@Test(arguments: [20 * 60, 30 * 60, 60 * 60])
func refreshIntervalsFromTwentyToSixtyMinutesAreAccepted(seconds: Int) throws {
    let provider = try APNSTokenProvider(
        signingKey: Fixture.signingKey(),
        teamID: Fixture.teamID,
        refreshInterval: .seconds(seconds)
    )
    #expect(provider.refreshInterval == .seconds(seconds))
}

@Test func aConnectionSwitchesTokensAtMostOncePerTwentyMinutes() throws {
    let key = try Fixture.signingKey()
    let a = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(0))
    let b = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(30))
    let c = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(50))

    var guardian = APNSConnectionTokenGuard()
    // The connection opens at minute 25 with token a.
    #expect(guardian.token(offered: a, now: Fixture.minutes(25)) == .use(a))
    // b appears at minute 30; the connection keeps a until 20 minutes after adopting it.
    #expect(guardian.token(offered: b, now: Fixture.minutes(30)) == .use(a))
    #expect(guardian.token(offered: b, now: Fixture.minutes(44.9)) == .use(a))
    #expect(guardian.token(offered: b, now: Fixture.minutes(45)) == .use(b))
    #expect(guardian.adoptedAt == Fixture.minutes(45))
    // An older token is never switched back to.
    #expect(guardian.token(offered: a, now: Fixture.minutes(70)) == .use(b))
    // c at minute 50 is too soon after the switch at 45.
    #expect(guardian.token(offered: c, now: Fixture.minutes(50)) == .use(b))
    #expect(guardian.token(offered: c, now: Fixture.minutes(65)) == .use(c))
}

@Test func aConnectionWhoseTokenExpiredBeforeItMaySwitchMustReconnect() throws {
    let key = try Fixture.signingKey()
    let a = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(0))
    let b = try APNSProviderToken(signingKey: key, teamID: Fixture.teamID, issuedAt: Fixture.minutes(50))
    var guardian = APNSConnectionTokenGuard()
    #expect(guardian.token(offered: a, now: Fixture.minutes(49)) == .use(a))
    #expect(guardian.token(offered: b, now: Fixture.minutes(59.9)) == .use(a))
    #expect(guardian.token(offered: b, now: Fixture.minutes(60)) == .reconnect)
    #expect(guardian.token(offered: b, now: Fixture.minutes(69)) == .use(b))
}
