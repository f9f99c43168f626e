import Foundation
import Logging

/// The end of validity of the credentials the worker presents to Apple (``CredentialExpiry``):
/// a gauge per credential, and warnings ahead of the end.
extension Worker {
    /// The configured credentials that have an end of validity.
    var expiringCredentials: [CredentialExpiry] { CredentialExpiry.all(in: pools) }

    /// Sets `apn_worker_credential_expiry_timestamp_seconds` for every configured credential
    /// with an end of validity.
    func exportCredentialExpiry() {
        let metrics = control.metrics
        for credential in expiringCredentials {
            metrics.set(
                MetricCatalogue.credentialExpiry,
                [credential.app, credential.environment.rawValue, credential.kind.rawValue],
                to: credential.timestamp
            )
        }
    }

    /// Logs a warning for each credential that ends within ``CredentialExpiry/warningPeriod`` of
    /// `now`; returns how many it logged.
    @discardableResult
    func warnOfExpiringCredentials(at now: Date = Date()) -> Int {
        var warned = 0
        for credential in expiringCredentials {
            guard let warning = credential.warning(at: now) else { continue }
            logger.warning(
                "\(warning)",
                metadata: [
                    "app": "\(credential.app)", "env": "\(credential.environment)",
                    "credential.kind": "\(credential.kind.rawValue)", "credential.subject": "\(credential.subject)",
                    "credential.notAfter": "\(credential.notValidAfter.formatted(.iso8601))",
                    "credential.daysLeft": "\(credential.daysLeft(at: now))",
                ]
            )
            warned += 1
        }
        return warned
    }

    /// Repeats ``warnOfExpiringCredentials(at:)`` every ``CredentialExpiry/warningInterval``
    /// until cancelled (the start's warnings are logged by ``run()`` itself).
    func warnOfExpiringCredentialsDaily() async {
        guard !expiringCredentials.isEmpty else { return }
        while !Task.isCancelled {
            do { try await Task.sleep(for: CredentialExpiry.warningInterval) } catch { return }
            warnOfExpiringCredentials()
        }
    }
}
