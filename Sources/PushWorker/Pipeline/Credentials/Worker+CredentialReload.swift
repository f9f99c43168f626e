import APNSCore
import Foundation
import Logging
import PushConfiguration

/// What one check of an app environment's credentials found.
enum CredentialCheck: Sendable, Hashable {
    /// The credential files are those in use.
    case unchanged
    /// They changed and passed the checks of the start: new connections use them.
    case applied
    /// They changed and fail the checks of the start (the sentence says why): the pool goes
    /// on with the credentials it has.
    case failed(String)
}

/// Credentials reloaded without a restart (`docs/operations.md`, "Rotating credentials"): every
/// ``credentialCheckInterval``, and at once when asked (``reloadCredentials()``, SIGHUP), the
/// worker reads the credential files of every app environment (and the config file, when it
/// was given a loader); those that changed are checked as at start and, if they pass, the
/// environment's pool is replaced: a new pool opens its connections with them while the old one
/// finishes what it holds (``DeliveryStage/replacePool(_:)``).
extension Worker {
    /// How often the credential files and the config file are read for changes.
    public static let credentialCheckInterval: Duration = .seconds(5)

    /// Asks the worker to check its credentials now, as `apn-worker run` does on SIGHUP: files
    /// that failed their checks before are checked (and logged) again.
    public func reloadCredentials() {
        reloadRequests.continuation.yield(true)
    }

    /// Checks the credentials every ``credentialCheckInterval`` and when asked, until cancelled.
    func watchCredentials(_ delivery: DeliveryStage) async {
        for key in pools.keys {
            control.metrics.set(MetricCatalogue.credentialReloadFailed, [key.app, key.environment.rawValue], to: 0)
        }
        let ticks = reloadRequests.continuation
        await withDiscardingTaskGroup { group in
            group.addTask {
                while (try? await Task.sleep(for: Worker.credentialCheckInterval)) != nil {
                    ticks.yield(false)
                }
            }
            for await forced in reloadRequests.stream {
                checkCredentials(forced: forced, delivery: delivery)
            }
            group.cancelAll()
        }
    }

    /// Reads the credentials of every app environment (after the config file, when the worker
    /// has a loader and the file changed or `forced`) and reloads those that changed. Files
    /// that failed their checks are checked again only once they change again, or when
    /// `forced`. Returns what it found for each app environment it checked.
    @discardableResult
    func checkCredentials(forced: Bool, delivery: DeliveryStage?) -> [PoolKey: CredentialCheck] {
        var state = reload.withLock { $0 }
        defer { reload.withLock { $0 = state } }
        let metrics = control.metrics
        if case .failing(let message) = reloadConfigurationFile(forced: forced, into: &state) {
            for key in state.apps.keys {
                metrics.set(MetricCatalogue.credentialReloadFailed, [key.app, key.environment.rawValue], to: 1)
            }
            return message.map { message in state.apps.mapValues { _ in .failed(message) } } ?? [:]
        }
        var checks: [PoolKey: CredentialCheck] = [:]
        let keys = state.apps.keys.sorted { ($0.app, $0.environment.rawValue) < ($1.app, $1.environment.rawValue) }
        for key in keys {
            guard let app = state.apps[key], let environment = app.environments[key.environment] else { continue }
            let labels = [key.app, key.environment.rawValue]
            let fingerprint = CredentialFingerprint(environment)
            if fingerprint == state.inUse[key] {
                // Unchanged, or back to the files in use after a failed change.
                state.failed[key] = nil
                metrics.set(MetricCatalogue.credentialReloadFailed, labels, to: 0)
                checks[key] = .unchanged
                continue
            }
            if !forced, fingerprint == state.failed[key] { continue }
            do throws(ConfigurationError) {
                try checkPermissions(of: environment, key: key)
                let settings = try PoolSettings(
                    app: app,
                    environment: environment,
                    maxPending: configuration.worker.maxInFlight
                )
                self.settings.replace(key, with: settings)
                state.inUse[key] = fingerprint
                state.failed[key] = nil
                metrics.set(MetricCatalogue.credentialReloadFailed, labels, to: 0)
                metrics.increment(MetricCatalogue.credentialReloads, labels + ["applied"])
                var metadata: Logger.Metadata = ["app": "\(key.app)", "env": "\(key.environmentName)"]
                if let certificate = settings.certificate {
                    metadata["credential.subject"] = "\(certificate.subject)"
                    metadata["credential.notAfter"] = "\(certificate.notValidAfter.formatted(.iso8601))"
                }
                logger.notice(
                    "Credentials reloaded: new connections use them, the old ones finish what they hold",
                    metadata: metadata
                )
                delivery?.replacePool(key)
                if let broadcasts = settings.broadcastPool(at: environment) {
                    // The pool of the environment's broadcasts presents the same credentials.
                    let broadcastKey = PoolKey(app: key.app, environment: key.environment, broadcasts: true)
                    self.settings.replace(broadcastKey, with: broadcasts)
                    delivery?.replacePool(broadcastKey)
                }
                checks[key] = .applied
            } catch {
                state.failed[key] = fingerprint
                metrics.set(MetricCatalogue.credentialReloadFailed, labels, to: 1)
                metrics.increment(MetricCatalogue.credentialReloads, labels + ["failed"])
                logger.error(
                    "\(error.message)",
                    metadata: [
                        "app": "\(key.app)", "env": "\(key.environmentName)",
                        "credential.reload": "failed; the worker goes on with the credentials it has",
                    ]
                )
                checks[key] = .failed(error.message)
            }
        }
        if checks.values.contains(.applied) { exportCredentialExpiry() }
        return checks
    }

    /// The files of `environment` that hold secrets and that users other than their owner can
    /// read, as at start: with `worker.strictFilePermissions` the first is the error that keeps
    /// the credentials in use; otherwise each is logged as a warning.
    private func checkPermissions(
        of environment: WorkerConfiguration.AppEnvironment,
        key: PoolKey
    ) throws(ConfigurationError) {
        let strict = configuration.worker.strictFilePermissions
        let exposed = environment.exposedSecretFiles(app: key.app, strict: strict)
        if strict, let first = exposed.first { throw ConfigurationError(first) }
        for sentence in exposed {
            logger.warning("\(sentence)", metadata: ["app": "\(key.app)", "env": "\(key.environmentName)"])
        }
    }

    /// What reading the config file again found.
    private enum ConfigFileCheck {
        /// The credential settings can be checked.
        case usable
        /// The config file fails to load: the sentence, or `nil` when it failed before and has
        /// not changed since.
        case failing(String?)
    }

    /// Loads the config file again when the worker has a loader and the file changed (or
    /// `forced`), and takes each app environment's credential settings from it.
    private func reloadConfigurationFile(forced: Bool, into state: inout CredentialReloadState) -> ConfigFileCheck {
        guard let load = loadConfiguration, let path = configuration.configFile else { return .usable }
        let digest = CredentialFingerprint.digest(ofFileAt: path)
        guard forced || digest != state.configFile else { return state.configFileFailed ? .failing(nil) : .usable }
        state.configFile = digest
        do throws(ConfigurationError) {
            let reloaded = try load()
            state.configFileFailed = false
            for (key, app) in state.apps {
                guard let environment = reloaded.apps[key.app]?.environments[key.environment] else {
                    logger.warning(
                        "The config file no longer has the \(key.environment) environment of app \(key.app): the worker goes on with its credentials until it is restarted"
                    )
                    continue
                }
                state.apps[key] = CredentialReloadState.app(app, withCredentialsOf: environment)
            }
            return .usable
        } catch {
            state.configFileFailed = true
            for key in state.apps.keys {
                control.metrics.increment(
                    MetricCatalogue.credentialReloads,
                    [key.app, key.environment.rawValue, "failed"]
                )
            }
            logger.error(
                "\(error.message)",
                metadata: [
                    "config": "\(path)", "credential.reload": "failed; the worker goes on with the credentials it has",
                ]
            )
            return .failing(error.message)
        }
    }
}
