import Foundation
import PushConfiguration
import Testing

/// Secrets read from files (`redis.passwordFile`), and files holding secrets that users other
/// than their owner can read: a warning, or with `worker.strictFilePermissions` an error.
@Suite struct SecretFileSettingsTests {
    typealias Files = AppSettingsTests.Files

    // MARK: The Redis password from a file

    @Test("redis.passwordFile, its variable and its flag read the password; the higher source wins")
    func redisPasswordFile() throws {
        let files = try Files()
        let fileSetting = SecretSettings.write("redis-file", "from-file\n", in: files)
        let variable = SecretSettings.write("redis-variable", "from-variable\n", in: files)
        let flag = SecretSettings.write("redis-flag", "from-flag\n", in: files)
        let text = SecretSettings.yaml(
            files: files,
            redis: "  url: \"redis://127.0.0.1:6379/0\"\n  passwordFile: \(fileSetting)"
        )
        #expect(try SecretSettings.load(text).redis.password == "from-file")
        let environment = ["APN_WORKER_REDIS_PASSWORD_FILE": variable]
        #expect(try SecretSettings.load(text, environment: environment).redis.password == "from-variable")
        let overrides = ConfigurationOverrides([.redisPasswordFile: flag])
        #expect(
            try SecretSettings.load(text, environment: environment, overrides: overrides).redis.password == "from-flag"
        )
        // The plain password of a higher source wins over the file of a lower one, and back.
        #expect(
            try SecretSettings.load(text, environment: ["APN_WORKER_REDIS_PASSWORD": "plain"]).redis.password == "plain"
        )
        #expect(
            try SecretSettings.load(
                text,
                environment: ["APN_WORKER_REDIS_PASSWORD": "plain"],
                overrides: overrides
            ).redis.password == "from-flag"
        )
    }

    @Test("redis.password and redis.passwordFile from one source are refused; an empty file is named")
    func redisPasswordGivenTwice() throws {
        let files = try Files()
        let path = SecretSettings.write("redis-password", "secret\n", in: files)
        let both = SecretSettings.yaml(
            files: files,
            redis: "  url: \"redis://127.0.0.1:6379/0\"\n  password: other\n  passwordFile: \(path)"
        )
        #expect(
            SecretSettings.error(both)
                == "redis.password and redis.passwordFile cannot both be set; give the Redis password one way only."
        )
        let empty = SecretSettings.write("empty", "\n", in: files)
        #expect(
            SecretSettings.error(
                SecretSettings.yaml(files: files),
                overrides: ConfigurationOverrides([.redisPasswordFile: empty])
            )
                == "--redis-password-file: \(empty) is empty; it must hold the Redis password."
        )
    }

    // MARK: File permissions

    @Test("A private key others can read is a warning naming the setting, the file and its mode; 0600 is none")
    func exposedKeyIsAWarning() throws {
        let files = try Files()
        #expect(try SecretSettings.load(SecretSettings.yaml(files: files)).warnings.isEmpty)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: files.path("key.pem"))
        #expect(
            try SecretSettings.load(SecretSettings.yaml(files: files)).warnings == [
                "apps.a.environments.production.key: \(files.path("key.pem")) holds a secret but users other than its "
                    + "owner can read it (mode 0644); make it readable by its owner only (chmod 600), or set "
                    + "worker.strictFilePermissions to true to refuse such files."
            ]
        )
        // A certificate is no secret: whoever reads it learns nothing.
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: files.path("key.pem"))
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: files.path("cert.pem"))
        #expect(try SecretSettings.load(SecretSettings.yaml(files: files)).warnings.isEmpty)
    }

    @Test("A passphrase file and a Redis password file others can read are warned of too")
    func otherSecretFiles() throws {
        let files = try Files()
        let passphrase = SecretSettings.write("pass.txt", "pw\n", mode: 0o644, in: files)
        let password = SecretSettings.write("redis.txt", "pw\n", mode: 0o604, in: files)
        let config = try SecretSettings.load(
            SecretSettings.yaml(
                files: files,
                redis: "  url: \"redis://127.0.0.1:6379/0\"\n  passwordFile: \(password)",
                environmentLines: "passphraseFile: \(passphrase)"
            )
        )
        #expect(config.warnings.count == 2, "\(config.warnings)")
        #expect(
            config.warnings.contains { $0.hasPrefix("redis.passwordFile: \(password) ") && $0.contains("(mode 0604)") }
        )
        #expect(
            config.warnings.contains {
                $0.hasPrefix("apps.a.environments.production.passphraseFile: \(passphrase) ")
                    && $0.contains("(mode 0644)")
            }
        )
    }

    @Test("With worker.strictFilePermissions an exposed secret file stops the start with a sentence")
    func strictFilePermissions() throws {
        let files = try Files()
        let strict = "  strictFilePermissions: true"
        #expect(try SecretSettings.load(SecretSettings.yaml(files: files, worker: strict)).worker.strictFilePermissions)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: files.path("key.pem"))
        #expect(
            SecretSettings.error(SecretSettings.yaml(files: files, worker: strict))
                == "apps.a.environments.production.key: \(files.path("key.pem")) holds a secret but users other "
                + "than its owner can read it (mode 0644), and worker.strictFilePermissions refuses such files; make "
                + "it readable by its owner only (chmod 600)."
        )
        #expect(try !SecretSettings.load(SecretSettings.yaml(files: files)).worker.strictFilePermissions)
    }
}
