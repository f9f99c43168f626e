import APNSCore
import Foundation

/// A credential the worker presents to Apple that stops being valid at a known time: the client
/// certificate of an app's environment (binary, or HTTP/2 with certificate authentication). A
/// provider-token signing key (`.p8`) has no end of validity, so an environment that signs
/// provider tokens has none.
///
/// The worker exports each one's end as `apn_worker_credential_expiry_timestamp_seconds` and
/// logs a warning for those that end within ``warningPeriod``: when it starts, then every
/// ``warningInterval`` while it runs. A certificate already past its end never gets here: the
/// worker refuses to start with it (`APNSCredentials` checks the validity period).
struct CredentialExpiry: Sendable, Hashable {
    /// What the credential is; raw values are the metric's `kind` label.
    enum Kind: String, Sendable, Hashable {
        /// A TLS client certificate; its end is its `notAfter`.
        case certificate
    }

    var app: String
    var environment: APNSEnvironment
    var kind: Kind
    /// The certificate's subject, for the warning.
    var subject: String
    var notValidAfter: Date

    /// How long before its end a credential is warned about.
    static let warningPeriod: Duration = .seconds(30 * 86_400)
    /// How often the warnings are logged again while the worker runs.
    static let warningInterval: Duration = .seconds(86_400)

    /// The credentials of every configured (app, environment) that have an end, in the order
    /// of app and environment.
    static func all(in pools: [PoolKey: PoolSettings]) -> [CredentialExpiry] {
        pools.compactMap { key, pool in
            pool.certificate.map {
                CredentialExpiry(
                    app: key.app,
                    environment: key.environment,
                    kind: .certificate,
                    subject: $0.subject,
                    notValidAfter: $0.notValidAfter
                )
            }
        }
        .sorted { ($0.app, $0.environment.rawValue) < ($1.app, $1.environment.rawValue) }
    }

    /// The end, in whole seconds since 1970 (the metric's value).
    var timestamp: Int { Int(notValidAfter.timeIntervalSince1970.rounded(.down)) }

    /// Whole days left at `now`, rounded down: 0 in the last day, negative once it has passed.
    func daysLeft(at now: Date) -> Int {
        Int((notValidAfter.timeIntervalSince(now) / 86_400).rounded(.down))
    }

    /// The warning to log at `now`: one sentence with the app, the environment, the
    /// certificate and what to do; `nil` while more than ``warningPeriod`` is left.
    func warning(at now: Date) -> String? {
        let left = notValidAfter.timeIntervalSince(now)
        guard left <= Double(Self.warningPeriod.components.seconds) else { return nil }
        let end = notValidAfter.formatted(.iso8601)
        let what = "The \(kind.rawValue) of app \(app) for \(environment) (\(subject))"
        let renew =
            "renew it in the Apple Developer account, put the new certificate and key in the app's configuration and restart the workers"
        guard left > 0 else {
            return "\(what) expired on \(end) and Apple refuses connections made with it; \(renew)."
        }
        let days = daysLeft(at: now)
        let within = days == 0 ? "in less than a day" : days == 1 ? "in 1 day" : "in \(days) days"
        return "\(what) expires on \(end), \(within); \(renew) before then."
    }
}
