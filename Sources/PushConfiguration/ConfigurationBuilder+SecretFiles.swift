import PushSecrets

/// The files the settings name that hold secrets: private keys (`key`, `redis.keyFile`), `.p8`
/// signing keys, PKCS#12 bundles, and the files passwords and passphrases are read from. Once
/// the rest of the configuration is read, each one users other than its owner can read
/// (``PushSecrets/SecretFile/exposure(atPath:)``) is a warning, or with
/// `worker.strictFilePermissions` an error.
final class SecretFileList {
    /// Each file's setting (as messages name it) and absolute path, in the order read.
    private(set) var files: [(label: String, path: String)] = []

    func append(label: String, path: String) {
        files.append((label, path))
    }
}

extension ConfigurationBuilder {
    /// The absolute path of a file setting that holds a secret, checked to be a readable file,
    /// and remembered for ``checkSecretFiles(strict:)``.
    func readableSecretFile(_ value: SettingValue) throws(ConfigurationError) -> String {
        let path = try readableFile(value)
        secretFiles.append(label: value.label, path: path)
        return path
    }

    /// The text of a file that holds a password or passphrase (`what`), without trailing line
    /// breaks. Its contents are never repeated in a message.
    func secretText(_ value: SettingValue, what: String) throws(ConfigurationError) -> String {
        let path = try readableSecretFile(value)
        do {
            return try SecretFile.text(atPath: path)
        } catch {
            switch error {
            case .unreadable:
                throw ConfigurationError(
                    "\(value.label): cannot read \(path); check that the file exists and is readable."
                )
            case .notText:
                throw ConfigurationError("\(value.label): \(path) is not UTF-8 text.")
            case .empty:
                throw ConfigurationError("\(value.label): \(path) is empty; it must hold \(what).")
            }
        }
    }

    /// Warns of each secret file that users other than its owner can read; with `strict`
    /// (`worker.strictFilePermissions`), the first one is an error instead.
    mutating func checkSecretFiles(strict: Bool) throws(ConfigurationError) {
        var seen = Set<String>()
        for (label, path) in secretFiles.files where seen.insert(label + "\u{0}" + path).inserted {
            guard let exposure = SecretFile.exposure(atPath: path) else { continue }
            let sentence = WorkerConfiguration.exposedSecretFile(label: label, path: path, exposure, strict: strict)
            if strict { throw ConfigurationError(sentence) }
            warnings.append(sentence)
        }
    }
}

extension WorkerConfiguration {
    /// The sentence about a file holding a secret (`label`'s, at `path`) that users other than
    /// its owner can read: a warning, or with `strict` (`worker.strictFilePermissions`) the
    /// error that stops the start or a credential reload.
    public static func exposedSecretFile(
        label: String,
        path: String,
        _ exposure: SecretFile.Exposure,
        strict: Bool
    ) -> String {
        let finding = "\(label): \(path) holds a secret but users other than its owner can read it (\(exposure))"
        if strict {
            return "\(finding), and worker.strictFilePermissions refuses such files; make it readable by its owner "
                + "only (chmod 600)."
        }
        return "\(finding); make it readable by its owner only (chmod 600), or set worker.strictFilePermissions to "
            + "true to refuse such files."
    }
}

extension WorkerConfiguration.AppEnvironment {
    /// The files of its credentials that hold secrets (a private key, a PKCS#12 bundle, a `.p8`
    /// key), each with its setting's name: `key`, `pfx` or `signingKey`. The passphrase file is
    /// read once and not named here.
    public var secretFiles: [(key: String, path: String)] {
        switch credentials {
        case .pem(_, .file(let path)): [("key", path)]
        case .pkcs12(.file(let path)): [("pfx", path)]
        case .token(.file(let path), _, _): [("signingKey", path)]
        default: []
        }
    }

    /// The sentence about each of ``secretFiles`` that users other than its owner can read, as
    /// app `app`'s environment (``WorkerConfiguration/exposedSecretFile(label:path:_:strict:)``):
    /// what a credential reload checks of the files it loads.
    public func exposedSecretFiles(app: String, strict: Bool) -> [String] {
        secretFiles.compactMap { key, path in
            SecretFile.exposure(atPath: path).map { exposure in
                WorkerConfiguration.exposedSecretFile(
                    label: "apps.\(app).environments.\(name.rawValue).\(key)",
                    path: path,
                    exposure,
                    strict: strict
                )
            }
        }
    }
}
