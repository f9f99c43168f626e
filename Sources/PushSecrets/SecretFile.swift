import Foundation

/// A file that holds a secret (a private key, a `.p8` signing key, a PKCS#12 bundle, a
/// password or passphrase): its text, and whether users other than its owner can read it.
public enum SecretFile {
    /// Why a secret file's text cannot be used, for a sentence that names the setting.
    public enum Problem: Error, Sendable, Hashable {
        /// It does not exist or cannot be read.
        case unreadable
        /// It is not UTF-8 text.
        case notText
        /// It holds nothing but line breaks.
        case empty
    }

    /// The text of the file at `path` without its trailing line breaks (`echo secret > file`
    /// writes one), as a password or passphrase file is read. The file is read through its
    /// symbolic links.
    public static func text(atPath path: String) throws(Problem) -> String {
        guard let data = FileManager.default.contents(atPath: path) else { throw .unreadable }
        guard var text = String(data: data, encoding: .utf8) else { throw .notText }
        while let last = text.unicodeScalars.last, last == "\n" || last == "\r" {
            text.unicodeScalars.removeLast()
        }
        if text.isEmpty { throw .empty }
        return text
    }

    /// Who can read a file besides its owner, when someone can.
    public struct Exposure: Sendable, Hashable, CustomStringConvertible {
        /// The permission bits, `0o644` for `-rw-r--r--`.
        public var mode: UInt32
        /// The owner's user id.
        public var owner: UInt32

        public init(mode: UInt32, owner: UInt32) {
            self.mode = mode
            self.owner = owner
        }

        /// `mode 0644`, as `ls -l` and `chmod` write it.
        public var description: String {
            let octal = String(mode & 0o7777, radix: 8)
            return "mode " + String(repeating: "0", count: max(0, 4 - octal.count)) + octal
        }
    }

    /// Who besides its owner can read the file at `path` (through its symbolic links), or `nil`
    /// when no one can (``exposure(mode:owner:)``), or when it cannot be examined.
    public static func exposure(atPath path: String) -> Exposure? {
        var information = stat()
        guard stat(path, &information) == 0 else { return nil }
        return exposure(mode: UInt32(information.st_mode) & 0o7777, owner: UInt32(information.st_uid))
    }

    /// Whether a file of `mode` owned by user `owner` can be read by users other than its owner.
    ///
    /// A file others can read is exposed. So is one its group can read, unless root owns it: a
    /// file root owns and shares with one group is how a system hands a key to a service, as
    /// Kubernetes does with a Secret volume and `fsGroup` (owner root, `defaultMode: 0440`), and
    /// Debian with its `ssl-cert` group; PostgreSQL allows its key file the same way.
    public static func exposure(mode: UInt32, owner: UInt32) -> Exposure? {
        let readByOthers = mode & 0o004 != 0
        let readByGroup = mode & 0o040 != 0 && owner != 0
        return readByOthers || readByGroup ? Exposure(mode: mode, owner: owner) : nil
    }
}
