import APNSCore
import Foundation
import Synchronization

/// Limits on provider-token lifetime and refresh from §4.
public enum APNSTokenTiming {
    /// A token whose `iat` is older than this is answered with `ExpiredProviderToken` (§4).
    public static let maximumAge: Duration = .seconds(60 * 60)
    /// One connection may change its token at most once in this interval, or APNs answers
    /// `TooManyProviderTokenUpdates` (§4); it is also the shortest allowed refresh interval.
    public static let minimumChangeInterval: Duration = .seconds(20 * 60)
    /// The refresh interval used unless configured otherwise; pushy also uses 50 minutes (§4).
    public static let defaultRefreshInterval: Duration = .seconds(50 * 60)
    /// The range a refresh interval must fall in: "no more often than every 20 minutes and no
    /// less often than every 60 minutes" (§4).
    public static let refreshIntervalRange: ClosedRange<Duration> = minimumChangeInterval...maximumAge

    package static func describe(_ duration: Duration) -> String {
        let total = duration.timeInterval
        if total.truncatingRemainder(dividingBy: 60) == 0 { return "\(Int64(total / 60)) minutes" }
        return "\(total) seconds"
    }
}

/// The provider token of one app (one signing key and team), shared by all of the app's
/// connections (§4: "do not mint a token per request").
///
/// ``currentToken(now:)`` returns the cached token and signs a new one only when the cached
/// one is at least ``refreshInterval`` old. Because the interval is at least 20 minutes and
/// ``forceRefresh(rejected:now:)`` also waits 20 minutes, no two tokens are ever signed less
/// than 20 minutes apart. Time comes from the caller or from the injected clock; nothing
/// here waits.
public final class APNSTokenProvider: Sendable {
    public let signingKey: APNSSigningKey
    public let teamID: String
    /// How old the cached token may get before ``currentToken(now:)`` replaces it.
    public let refreshInterval: Duration

    private let clock: @Sendable () -> Date
    private let state = Mutex<State>(State())

    private struct State {
        var token: APNSProviderToken?
        /// The exact time the cached token was signed (`iat` is rounded down to seconds).
        var signedAt: Date?
    }

    /// Throws `invalidConfiguration` when `refreshInterval` is outside 20...60 minutes and
    /// `invalidCredentials` when `teamID` is not 10 letters or digits.
    public init(
        signingKey: APNSSigningKey,
        teamID: String,
        refreshInterval: Duration = APNSTokenTiming.defaultRefreshInterval,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) throws(APNSError) {
        // §4: refresh no more often than every 20 minutes and no less often than every 60.
        guard APNSTokenTiming.refreshIntervalRange.contains(refreshInterval) else {
            throw APNSError(
                .invalidConfiguration,
                "the provider token refresh interval is \(APNSTokenTiming.describe(refreshInterval)); APNs needs 20 to 60 minutes, so use a value such as 50 minutes"
            )
        }
        try APNSAccountIdentifier.validate(teamID, what: "team ID")
        self.signingKey = signingKey
        self.teamID = teamID
        self.refreshInterval = refreshInterval
        self.clock = clock
    }

    /// The injected clock's time, for decisions that go with the token (such as a
    /// connection's 20-minute change limit).
    public var now: Date { clock() }

    /// The shared token at the injected clock's time.
    public func currentToken() throws(APNSError) -> APNSProviderToken {
        try currentToken(now: clock())
    }

    /// The shared token at `now`: the cached one, or a newly signed one when there is none
    /// yet or the cached one is at least ``refreshInterval`` old (and was signed at least
    /// 20 minutes ago). A clock that moved backwards keeps the cached token.
    public func currentToken(now: Date) throws(APNSError) -> APNSProviderToken {
        try state.withLock { (state: inout State) throws(APNSError) -> APNSProviderToken in
            if let token = state.token, let signedAt = state.signedAt {
                let interval = refreshInterval.timeInterval
                let due =
                    token.age(at: now) >= interval
                    && now.timeIntervalSince(signedAt) >= APNSTokenTiming.minimumChangeInterval.timeInterval
                if !due { return token }
            }
            return try sign(into: &state, now: now)
        }
    }

    /// Replaces the token after APNs answered `ExpiredProviderToken` (§6.10), but never signs
    /// more than one token per 20 minutes (§4).
    ///
    /// - `rejected`: the token APNs refused. When the cached token is already a different,
    ///   newer one (another connection refreshed it), that one is returned unchanged.
    ///
    /// Returns ``APNSTokenRefresh/refreshed(_:)`` with a new token, ``APNSTokenRefresh/alreadyNewer(_:)``,
    /// or ``APNSTokenRefresh/tooSoon(_:retryAt:)`` when the cached token is less than 20 minutes
    /// old. Whatever the answer, close the connection that got `ExpiredProviderToken`: it
    /// keeps failing even with a fresh token (§6.10).
    public func forceRefresh(rejected: APNSProviderToken? = nil, now: Date) throws(APNSError) -> APNSTokenRefresh {
        try state.withLock { (state: inout State) throws(APNSError) -> APNSTokenRefresh in
            guard let token = state.token, let signedAt = state.signedAt else {
                return .refreshed(try sign(into: &state, now: now))
            }
            if let rejected, rejected != token, token.issuedAt >= rejected.issuedAt {
                return .alreadyNewer(token)
            }
            let minimum = APNSTokenTiming.minimumChangeInterval.timeInterval
            if now.timeIntervalSince(signedAt) >= minimum {
                return .refreshed(try sign(into: &state, now: now))
            }
            return .tooSoon(token, retryAt: signedAt.addingTimeInterval(minimum))
        }
    }

    /// Forces a refresh at the injected clock's time.
    public func forceRefresh(rejected: APNSProviderToken? = nil) throws(APNSError) -> APNSTokenRefresh {
        try forceRefresh(rejected: rejected, now: clock())
    }

    private func sign(into state: inout State, now: Date) throws(APNSError) -> APNSProviderToken {
        let token = try APNSProviderToken(signingKey: signingKey, teamID: teamID, issuedAt: now)
        state.token = token
        state.signedAt = now
        return token
    }
}

/// The answer of ``APNSTokenProvider/forceRefresh(rejected:now:)``.
public enum APNSTokenRefresh: Sendable, Hashable {
    /// A new token was signed.
    case refreshed(APNSProviderToken)
    /// The cached token is already newer than the rejected one.
    case alreadyNewer(APNSProviderToken)
    /// The cached token is less than 20 minutes old; no new token before `retryAt`.
    case tooSoon(APNSProviderToken, retryAt: Date)

    /// The token to use from now on.
    public var token: APNSProviderToken {
        switch self {
        case .refreshed(let token), .alreadyNewer(let token), .tooSoon(let token, _): token
        }
    }
}

/// The provider-token state of one client connection: a connection may change its token at
/// most once per 20 minutes (§4), counting from the moment it started using its current
/// token (the first token included).
///
/// Keep one per connection, next to the connection's other state, and ask it for the token
/// of every request.
public struct APNSConnectionTokenGuard: Sendable, Hashable {
    /// The token the connection uses now.
    public private(set) var token: APNSProviderToken?
    /// When the connection started using ``token``.
    public private(set) var adoptedAt: Date?

    public init() {}

    /// What to put in the next request's `authorization` header.
    public enum Decision: Sendable, Hashable {
        /// Send this token.
        case use(APNSProviderToken)
        /// The connection's token is expired and it may not switch yet: open a new
        /// connection (which starts with the offered token) and close this one.
        case reconnect
    }

    /// Picks the token for the next request, given the provider's `offered` token.
    ///
    /// The offered token is adopted when the connection has none yet, or when it is newer and
    /// the current one was adopted at least 20 minutes ago. Otherwise the current token is
    /// kept while it is younger than an hour (§4); after that the answer is ``Decision/reconnect``.
    public mutating func token(offered: APNSProviderToken, now: Date) -> Decision {
        guard let current = token, let adoptedAt else {
            adopt(offered, now: now)
            return .use(offered)
        }
        if offered == current || offered.issuedAt < current.issuedAt { return .use(current) }
        let elapsed = now.timeIntervalSince(adoptedAt)
        if elapsed >= APNSTokenTiming.minimumChangeInterval.timeInterval {
            adopt(offered, now: now)
            return .use(offered)
        }
        if current.age(at: now) < APNSTokenTiming.maximumAge.timeInterval {
            return .use(current)
        }
        return .reconnect
    }

    private mutating func adopt(_ token: APNSProviderToken, now: Date) {
        self.token = token
        self.adoptedAt = now
    }
}
