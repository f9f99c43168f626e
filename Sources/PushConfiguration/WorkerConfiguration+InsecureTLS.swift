import APNSCore

extension WorkerConfiguration {
    /// The app environments whose gateway certificate is not verified (`verifyServer: false`).
    public var insecureEnvironments: [(app: String, environment: APNSEnvironment)] {
        apps.sorted { $0.key < $1.key }.flatMap { name, app in
            app.environments.keys.sorted { $0.rawValue < $1.rawValue }.compactMap { environment in
                app.environments[environment]?.verifyServer == false ? (name, environment) : nil
            }
        }
    }

    /// The sentence logged when an app environment does not verify Apple's certificate: at
    /// start, and each time the worker opens a pool for it.
    public static func insecureTLSWarning(app: String, environment: APNSEnvironment) -> String {
        "apps.\(app).environments.\(environment.rawValue).verifyServer is false: the worker accepts any certificate "
            + "for Apple's servers, so an impostor on the network could read every notification and collect the "
            + "credentials presented to it (with a signing key, a provider token valid for an hour for every topic of "
            + "the team); use it only in tests."
    }
}
