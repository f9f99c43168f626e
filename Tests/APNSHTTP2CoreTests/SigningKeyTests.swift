import APNSCore
import Crypto
import Foundation
import Testing

@testable import APNSHTTP2Core

@Test func loadsAP8KeyFromTextAndFile() throws {
    let key = P256.Signing.PrivateKey()
    let pem = key.pemRepresentation
    #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))

    let fromText = try APNSSigningKey(keyID: Fixture.keyID, pem: pem)
    #expect(fromText.publicKey.rawRepresentation == key.publicKey.rawRepresentation)

    let crlf = try APNSSigningKey(
        keyID: Fixture.keyID,
        pem: "\n" + pem.replacingOccurrences(of: "\n", with: "\r\n") + "\n\n"
    )
    #expect(crlf.publicKey.rawRepresentation == key.publicKey.rawRepresentation)

    let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("AuthKey_\(Fixture.keyID)-\(UUID().uuidString).p8").path
    try Data(pem.utf8).write(to: URL(fileURLWithPath: path))
    defer { try? FileManager.default.removeItem(atPath: path) }
    let fromFile = try APNSSigningKey(keyID: Fixture.keyID, file: path)
    #expect(fromFile.keyID == Fixture.keyID)
    #expect(fromFile.publicKey.rawRepresentation == key.publicKey.rawRepresentation)

    let fromData = try APNSSigningKey(keyID: Fixture.keyID, source: .data(Array(pem.utf8)))
    #expect(fromData.publicKey.rawRepresentation == key.publicKey.rawRepresentation)
}

@Test(arguments: [
    ("", "is empty"),
    ("   \n", "is empty"),
    ("MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg", "has no PEM block"),
    ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----", "is encrypted"),
    ("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----", "is not a PKCS#8 P-256 private key"),
    (P384.Signing.PrivateKey().pemRepresentation, "is a P-384 key"),
    (P521.Signing.PrivateKey().pemRepresentation, "is a P-521 key"),
])
func badKeyTextIsRejectedWithASentence(pem: String, expected: String) {
    do {
        _ = try APNSSigningKey(keyID: Fixture.keyID, pem: pem)
        Issue.record("accepted \(pem.prefix(30))")
    } catch {
        #expect(error.code == .invalidCredentials)
        #expect(error.message.contains(expected), "\(error.message)")
    }
}

@Test func missingKeyFileIsNamed() {
    do {
        _ = try APNSSigningKey(keyID: Fixture.keyID, file: "/nonexistent/AuthKey_X.p8")
        Issue.record("accepted a missing file")
    } catch {
        #expect(error.code == .invalidCredentials)
        #expect(error.message.contains("/nonexistent/AuthKey_X.p8"))
    }
}

@Test(arguments: ["", "ABCDE1234", "ABCDE123456", "ABCDE-1234", "ABCDE 1234"])
func keyIDsMustBeTenLettersOrDigits(keyID: String) {
    #expect(throws: APNSError.self) {
        try APNSSigningKey(keyID: keyID, privateKey: P256.Signing.PrivateKey())
    }
}
