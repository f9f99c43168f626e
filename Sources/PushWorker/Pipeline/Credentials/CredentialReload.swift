import APNSCore
import Crypto
import Foundation
import PushConfiguration
import Synchronization

/// The settings of each (app, environment)'s pool as the worker delivers with them now: those
/// of the start, then those of each credential reload that passed the checks of the start.
/// The stages read them here when they open a pool, poll the feedback service or manage
/// channels, so that all of them follow a reload.
final class PoolSettingsStore: Sendable {
    private let settings: Mutex<[PoolKey: PoolSettings]>

    init(_ settings: [PoolKey: PoolSettings]) {
        self.settings = Mutex(settings)
    }

    /// Every (app, environment)'s settings.
    var all: [PoolKey: PoolSettings] { settings.withLock { $0 } }

    subscript(key: PoolKey) -> PoolSettings? { settings.withLock { $0[key] } }

    /// Puts `new` in force for `key`.
    func replace(_ key: PoolKey, with new: PoolSettings) {
        settings.withLock { $0[key] = new }
    }
}

/// What the credentials of one app environment are made of, read now: the credential settings
/// (sources, key ID, team ID, passphrase, CA file) and the SHA-256 of each file they name, read
/// through symbolic links, so a Kubernetes Secret whose `..data` link was swapped reads as its
/// new version. Equal fingerprints load equal credentials.
///
/// Only digests are kept, never a copy of a file's bytes: a private key stays in memory once,
/// in the credentials loaded from it.
struct CredentialFingerprint: Sendable, Hashable {
    var credentials: WorkerConfiguration.Credentials
    var passphrase: String?
    var ca: String?
    /// The SHA-256 of each credential file's contents, by path; `nil`: it cannot be read.
    var files: [String: SHA256Digest?]

    init(_ environment: WorkerConfiguration.AppEnvironment) {
        credentials = environment.credentials
        passphrase = environment.passphrase
        ca = environment.ca
        var files: [String: SHA256Digest?] = [:]
        for path in Self.paths(of: environment) {
            files[path] = Self.digest(ofFileAt: path)
        }
        self.files = files
    }

    /// The SHA-256 of the contents of the file at `path`, read through its symbolic links;
    /// `nil` when it cannot be read. The contents are dropped as soon as they are hashed.
    static func digest(ofFileAt path: String) -> SHA256Digest? {
        FileManager.default.contents(atPath: path).map { SHA256.hash(data: $0) }
    }

    /// The files an app environment's credentials are read from: certificate and key, PKCS#12
    /// bundle, signing key, CA bundle. Credentials given as text or in environment variables
    /// name none: they cannot change while the worker runs.
    static func paths(of environment: WorkerConfiguration.AppEnvironment) -> [String] {
        var sources: [CredentialSource] = []
        switch environment.credentials {
        case .pem(let certificate, let key): sources = [certificate, key]
        case .pkcs12(let bundle): sources = [bundle]
        case .token(let signingKey, _, _): sources = [signingKey]
        }
        var paths: [String] = []
        for case .file(let path) in sources { paths.append(path) }
        if let ca = environment.ca { paths.append(ca) }
        return paths
    }
}

/// What the credential reload remembers between checks (``Worker/checkCredentials(forced:delivery:)``).
struct CredentialReloadState: Sendable {
    /// Each (app, environment)'s configuration with the credential settings in use.
    var apps: [PoolKey: WorkerConfiguration.App]
    /// The fingerprint of the credentials each pool uses.
    var inUse: [PoolKey: CredentialFingerprint]
    /// The fingerprint of files that failed their checks, so that they are logged once, not at
    /// every check (a SIGHUP checks them again).
    var failed: [PoolKey: CredentialFingerprint] = [:]
    /// The SHA-256 of the config file's contents as last read (it may hold credentials as
    /// text), and whether they failed to load.
    var configFile: SHA256Digest?
    var configFileFailed = false

    init(configuration: WorkerConfiguration) {
        var apps: [PoolKey: WorkerConfiguration.App] = [:]
        var inUse: [PoolKey: CredentialFingerprint] = [:]
        for (name, app) in configuration.apps {
            for (environment, settings) in app.environments {
                let key = PoolKey(app: name, environment: environment)
                apps[key] = app
                inUse[key] = CredentialFingerprint(settings)
            }
        }
        self.apps = apps
        self.inUse = inUse
        configFile = configuration.configFile.flatMap(CredentialFingerprint.digest(ofFileAt:))
    }

    /// `current` (an app in use) with the credential settings of `reloaded`'s `environment`:
    /// certificate and key, PKCS#12 bundle or signing key with its key and team IDs,
    /// passphrase and CA. Nothing else of a reloaded configuration is applied.
    static func app(
        _ current: WorkerConfiguration.App,
        withCredentialsOf reloaded: WorkerConfiguration.AppEnvironment
    ) -> WorkerConfiguration.App {
        var app = current
        guard var environment = app.environments[reloaded.name] else { return app }
        environment.credentials = reloaded.credentials
        environment.passphrase = reloaded.passphrase
        environment.ca = reloaded.ca
        app.environments[reloaded.name] = environment
        return app
    }
}
