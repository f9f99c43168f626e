import Foundation
import PushSecrets
import Testing

/// Files holding secrets: their text without trailing line breaks, and who besides their owner
/// can read them.
@Suite struct SecretFileTests {
    /// A file in a fresh directory with `contents` and `mode`; removed by `cleanUp`.
    static func file(_ contents: [UInt8], mode: Int = 0o600) throws -> (path: String, cleanUp: () -> Void) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("secret-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/secret"
        _ = FileManager.default.createFile(
            atPath: path,
            contents: Data(contents),
            attributes: [.posixPermissions: mode]
        )
        return (path, { try? FileManager.default.removeItem(atPath: directory) })
    }

    @Test("The text is read without its trailing line breaks; empty, binary and missing files are refused")
    func text() throws {
        let (path, cleanUp) = try Self.file(Array("s3cret pass\r\n\n".utf8))
        defer { cleanUp() }
        #expect(try SecretFile.text(atPath: path) == "s3cret pass")
        #expect(throws: SecretFile.Problem.unreadable) { try SecretFile.text(atPath: path + ".missing") }
        let (empty, cleanUpEmpty) = try Self.file(Array("\n".utf8))
        defer { cleanUpEmpty() }
        #expect(throws: SecretFile.Problem.empty) { try SecretFile.text(atPath: empty) }
        let (binary, cleanUpBinary) = try Self.file([0xFF, 0xFE, 0x00])
        defer { cleanUpBinary() }
        #expect(throws: SecretFile.Problem.notText) { try SecretFile.text(atPath: binary) }
    }

    @Test("A file of mode 0644 is exposed, one of 0600 is not; symbolic links are followed")
    func exposureOfFiles() throws {
        let (path, cleanUp) = try Self.file(Array("key".utf8), mode: 0o644)
        defer { cleanUp() }
        #expect(SecretFile.exposure(atPath: path)?.mode == 0o644)
        #expect(SecretFile.exposure(atPath: path)?.description == "mode 0644")
        let link = path + ".link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        #expect(SecretFile.exposure(atPath: link)?.mode == 0o644)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        #expect(SecretFile.exposure(atPath: path) == nil)
        #expect(SecretFile.exposure(atPath: link) == nil)
        #expect(SecretFile.exposure(atPath: path + ".missing") == nil)
    }

    @Test("Others reading is exposure; the group reading is too, unless root owns the file (fsGroup, ssl-cert)")
    func exposureRule() {
        let user: UInt32 = 10001
        #expect(SecretFile.exposure(mode: 0o600, owner: user) == nil)
        #expect(SecretFile.exposure(mode: 0o400, owner: user) == nil)
        #expect(SecretFile.exposure(mode: 0o640, owner: user) == SecretFile.Exposure(mode: 0o640, owner: user))
        #expect(SecretFile.exposure(mode: 0o604, owner: user) != nil)
        #expect(SecretFile.exposure(mode: 0o440, owner: 0) == nil)
        #expect(SecretFile.exposure(mode: 0o640, owner: 0) == nil)
        #expect(SecretFile.exposure(mode: 0o644, owner: 0) != nil)
        #expect(SecretFile.exposure(mode: 0o620, owner: user) == nil, "writing is not reading")
        #expect(SecretFile.Exposure(mode: 0o40, owner: user).description == "mode 0040")
    }
}
