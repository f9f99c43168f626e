import APNSCore
import Foundation

/// Where each credential comes from (a file, the text in the config file, or an environment
/// variable), and the files and passphrases settings name.
extension ConfigurationBuilder {
    // MARK: - Credentials

    /// The three settings that can give one credential: a file, the text itself, or an
    /// environment variable holding the text. PKCS#12 text is base64.
    struct CredentialKeys {
        var file: String
        var inline: String
        var variable: String
        var what: String
        var base64 = false
        /// Whether the credential is a secret (a key), whose file's permissions are checked.
        var secret = true
    }

    static let certificateKeys = CredentialKeys(
        file: "certificate",
        inline: "certificatePem",
        variable: "certificatePemEnv",
        what: "the PEM certificate",
        secret: false
    )
    static let keyKeys = CredentialKeys(
        file: "key",
        inline: "keyPem",
        variable: "keyPemEnv",
        what: "the PEM private key"
    )
    static let pfxKeys = CredentialKeys(
        file: "pfx",
        inline: "pkcs12Base64",
        variable: "pkcs12Base64Env",
        what: "the PKCS#12 bundle",
        base64: true
    )
    static let signingKeyKeys = CredentialKeys(
        file: "signingKey",
        inline: "signingKeyPem",
        variable: "signingKeyPemEnv",
        what: "the .p8 signing key"
    )
    /// Every credential's settings, in the order unknown-setting messages list them.
    static let credentialKeys = [certificateKeys, keyKeys, pfxKeys, signingKeyKeys]

    /// Which one of `keys` is set, with its value; an error naming both when more than one is.
    static func oneOf(
        _ keys: [String],
        in section: ConfigSection,
        what: String
    ) throws(ConfigurationError) -> (key: String, value: SettingValue)? {
        let given = keys.compactMap { key in section.value(key).map { (key, $0) } }
        if given.count > 1 {
            throw ConfigurationError(
                "\(section.label(given[0].0)) and \(given[1].0) cannot both be set; give \(what) one way only: "
                    + keys.dropLast().joined(separator: ", ") + " or " + keys[keys.count - 1] + "."
            )
        }
        return given.first
    }

    /// A credential from its file, its inline text or its environment variable; `nil` when none
    /// is set. Inline and environment values are held as data labelled with where they came from,
    /// so that messages name the setting and never show the secret.
    func credential(_ keys: CredentialKeys, in section: ConfigSection) throws(ConfigurationError) -> CredentialSource? {
        guard let (key, value) = try Self.oneOf([keys.file, keys.inline, keys.variable], in: section, what: keys.what)
        else {
            return nil
        }
        let text: [UInt8]
        let label: String
        var variableName: String?
        switch key {
        case keys.file:
            return .file(try keys.secret ? readableSecretFile(value) : readableFile(value))
        case keys.inline:
            text = Array(try SettingParsing.string(value).utf8)
            label = "given in \(value.label)"
        default:
            let name: String
            (name, text) = try variable(value)
            label = "from \(name) (\(value.label))"
            variableName = name
        }
        guard keys.base64 else { return .data(text, label: label) }
        let compact = text.filter { !($0 == 0x20 || (0x09...0x0D).contains($0)) }
        guard let decoded = Data(base64Encoded: Data(compact)), !decoded.isEmpty else {
            throw ConfigurationError(
                "\(value.label) must give \(keys.what) in base64 (for example the output of base64 -w0 app.p12); "
                    + "\(variableName.map { "the value of \($0)" } ?? "the value") is not base64 and is not shown."
            )
        }
        return .data(Array(decoded), label: label)
    }

    /// The value of the environment variable a `…Env` setting names. The name is checked before
    /// anything is said about it, and a value that is not a variable name is never repeated: it
    /// may be the secret itself, set there by mistake.
    func variable(_ value: SettingValue) throws(ConfigurationError) -> (name: String, value: [UInt8]) {
        let name = try SettingParsing.string(value).trimmingCharacters(in: .whitespaces)
        let valid =
            name.unicodeScalars.count <= 255 && name.first.map { !$0.isNumber } == true
            && name.unicodeScalars.allSatisfy { $0.isASCII && ($0 == "_" || CharacterSet.alphanumerics.contains($0)) }
        guard valid else {
            throw ConfigurationError(
                "\(value.label) must name an environment variable (letters, digits and _, such as APNS_KEY); "
                    + "what is set there is not a name, and is not shown in case it is the secret itself."
            )
        }
        guard let text = environment[name], !text.isEmpty else {
            throw ConfigurationError(
                "\(value.label) names the environment variable \(name), which is not set or is empty; set it to the "
                    + "credential, or give the credential another way."
            )
        }
        return (name, Array(text.utf8))
    }

    /// The variables the apps' `…Env` settings name.
    func credentialVariables() -> Set<String> {
        var names = Set<String>()
        guard let apps = try? root.section("apps") else { return names }
        for app in apps.entries {
            guard let environments = try? apps.section(app.key).section("environments") else { continue }
            for environment in environments.entries {
                guard let section = try? environments.section(environment.key) else { continue }
                for entry in section.entries where entry.key.hasSuffix("Env") {
                    if case .scalar(let scalar) = entry.value {
                        names.insert(scalar.text.trimmingCharacters(in: .whitespaces))
                    }
                }
            }
        }
        return names
    }

    // MARK: - Files

    /// The absolute path of a file setting, checked to be a readable file. Relative paths are
    /// taken relative to the config file's directory.
    func readableFile(_ value: SettingValue) throws(ConfigurationError) -> String {
        let raw = try SettingParsing.string(value)
        let path = absolutePath(raw)
        var isDirectory: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
        if exists && isDirectory.boolValue {
            throw ConfigurationError("\(value.label): \(path) is a directory; name a file.")
        }
        guard exists, let handle = FileHandle(forReadingAtPath: path) else {
            throw ConfigurationError(
                "\(value.label): cannot read \(path); check that the file exists and is readable."
            )
        }
        try? handle.close()
        return path
    }

    func absolutePath(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let base = fileDirectory ?? FileManager.default.currentDirectoryPath
        return URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: base, isDirectory: true))
            .standardizedFileURL.path
    }
}
