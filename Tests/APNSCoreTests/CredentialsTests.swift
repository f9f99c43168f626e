import APNSSimulator
import Foundation
import Testing

@testable import APNSCore

private let certificates = try! TestCertificates()

private func bytes(_ s: String) -> CredentialSource { .data(Array(s.utf8)) }

private func credentialsError(_ body: () throws -> Void) -> APNSError? {
    do {
        try body()
        return nil
    } catch {
        return error as? APNSError
    }
}

/// Runs `openssl` with `arguments`; fails the test when it fails.
private func openssl(_ arguments: [String]) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["openssl"] + arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    #expect(process.terminationStatus == 0, "openssl \(arguments.joined(separator: " ")) failed")
}

private func temporaryDirectory() throws -> String {
    let dir = NSTemporaryDirectory() + "apn-worker-tests-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

@Test func validPEMCredentialsLoadForBothEnvironments() throws {
    for environment in APNSEnvironment.allCases {
        let credentials = try APNSCredentials(
            certificate: bytes(certificates.client.certificatePEM),
            key: bytes(certificates.client.keyPEM),
            ca: [bytes(certificates.ca.certificatePEM)],
            environment: environment
        )
        #expect(credentials.environments == [.sandbox, .production])
        #expect(credentials.subject.contains("com.example.app"))
        #expect(credentials.trustRoots?.count == 1)
    }
}

@Test func keyThatDoesNotMatchTheCertificateIsRejected() {
    let error = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes(certificates.client.certificatePEM),
            key: bytes(TestCertificates.unrelatedKeyPEM()),
            environment: .sandbox
        )
    }
    #expect(error?.code == .keyDoesNotMatchCertificate)
    #expect(error?.message.contains("does not match") == true)
}

@Test func expiredCertificateIsRejected() throws {
    let expired = try certificates.makeClient(
        notValidBefore: Date().addingTimeInterval(-7200),
        notValidAfter: Date().addingTimeInterval(-3600)
    )
    let error = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes(expired.certificatePEM),
            key: bytes(expired.keyPEM),
            environment: .sandbox
        )
    }
    #expect(error?.code == .certificateExpired)
    #expect(error?.message.contains("expired on") == true)
}

@Test func certificateNotYetValidIsRejected() throws {
    let future = try certificates.makeClient(
        notValidBefore: Date().addingTimeInterval(86400),
        notValidAfter: Date().addingTimeInterval(2 * 86400)
    )
    let error = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes(future.certificatePEM),
            key: bytes(future.keyPEM),
            environment: .sandbox
        )
    }
    #expect(error?.code == .certificateNotYetValid)
}

@Test func certificateForTheOtherEnvironmentIsRejected() throws {
    let sandboxOnly = try certificates.makeClient(environments: [.sandbox])
    let error = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes(sandboxOnly.certificatePEM),
            key: bytes(sandboxOnly.keyPEM),
            environment: .production
        )
    }
    #expect(error?.code == .wrongEnvironment)
    #expect(error?.message.contains("sandbox only") == true)
    #expect(error?.message.contains("1.2.840.113635.100.6.3.2") == true)
    // The same certificate is fine for sandbox.
    _ = try APNSCredentials(
        certificate: bytes(sandboxOnly.certificatePEM),
        key: bytes(sandboxOnly.keyPEM),
        environment: .sandbox
    )
}

@Test func certificateWithoutAnyAPNsExtensionIsRejected() throws {
    let plain = try certificates.makeClient(environments: [])
    let error = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes(plain.certificatePEM),
            key: bytes(plain.keyPEM),
            environment: .sandbox
        )
    }
    #expect(error?.code == .wrongEnvironment)
    #expect(error?.message.contains("no APNs environment extension") == true)
}

@Test func unreadableOrMalformedInputsGetClearErrors() {
    let missing = credentialsError {
        _ = try APNSCredentials(
            certificate: .file("/nonexistent/cert.pem"),
            key: .file("/nonexistent/key.pem"),
            environment: .sandbox
        )
    }
    #expect(missing?.code == .invalidCredentials)
    #expect(missing?.message.contains("/nonexistent/cert.pem") == true)

    let garbage = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes("not a certificate"),
            key: bytes(certificates.client.keyPEM),
            environment: .sandbox
        )
    }
    #expect(garbage?.code == .invalidCredentials)

    let badKey = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes(certificates.client.certificatePEM),
            key: bytes("nope"),
            environment: .sandbox
        )
    }
    #expect(badKey?.code == .invalidCredentials)
    #expect(badKey?.message.contains("private key") == true)

    let badCA = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes(certificates.client.certificatePEM),
            key: bytes(certificates.client.keyPEM),
            ca: [bytes("junk")],
            environment: .sandbox
        )
    }
    #expect(badCA?.code == .invalidCredentials)
    #expect(badCA?.message.contains("CA") == true)
}

@Test func pkcs12WithPassphraseLoadsAndAWrongPassphraseIsNamed() throws {
    let dir = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(atPath: dir) }
    try certificates.client.certificatePEM.write(toFile: dir + "/c.pem", atomically: false, encoding: .utf8)
    try certificates.client.keyPEM.write(toFile: dir + "/k.pem", atomically: false, encoding: .utf8)
    try openssl([
        "pkcs12", "-export", "-in", dir + "/c.pem", "-inkey", dir + "/k.pem", "-out", dir + "/c.p12", "-passout",
        "pass:s3cret",
    ])

    let loaded = try APNSCredentials(pkcs12: .file(dir + "/c.p12"), passphrase: "s3cret", environment: .production)
    #expect(loaded.subject.contains("com.example.app"))

    let wrong = credentialsError {
        _ = try APNSCredentials(pkcs12: .file(dir + "/c.p12"), passphrase: "wrong", environment: .production)
    }
    #expect(wrong?.code == .invalidCredentials)
    #expect(wrong?.message.contains("passphrase") == true)
}

@Test func encryptedPEMKeyNeedsItsPassphrase() throws {
    let dir = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(atPath: dir) }
    try certificates.client.keyPEM.write(toFile: dir + "/k.pem", atomically: false, encoding: .utf8)
    try openssl([
        "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", dir + "/k.pem", "-out", dir + "/enc.pem", "-passout",
        "pass:open sesame",
    ])

    let loaded = try APNSCredentials(
        certificate: bytes(certificates.client.certificatePEM),
        key: .file(dir + "/enc.pem"),
        passphrase: "open sesame",
        environment: .sandbox
    )
    #expect(loaded.environments.contains(.sandbox))

    let missing = credentialsError {
        _ = try APNSCredentials(
            certificate: bytes(certificates.client.certificatePEM),
            key: .file(dir + "/enc.pem"),
            environment: .sandbox
        )
    }
    #expect(missing?.code == .invalidCredentials)
    #expect(missing?.message.contains("passphrase") == true)
}

@Test func rsaCredentialsFromTheCertificateScriptLoad() throws {
    let dir = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/gen-test-certs").path
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/bash")
    process.arguments = [script, dir]
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    #expect(process.terminationStatus == 0)

    let pem = try APNSCredentials(
        certificate: .file(dir + "/client.pem"),
        key: .file(dir + "/client-key.pem"),
        ca: [.file(dir + "/ca.pem")],
        environment: .production
    )
    #expect(pem.environments == [.sandbox, .production])
    let p12 = try APNSCredentials(pkcs12: .file(dir + "/client.p12"), passphrase: "apn-worker", environment: .sandbox)
    #expect(p12.subject == pem.subject)
    // The RSA key of the server certificate does not belong to the client certificate.
    let mismatch = credentialsError {
        _ = try APNSCredentials(
            certificate: .file(dir + "/client.pem"),
            key: .file(dir + "/server-key.pem"),
            environment: .sandbox
        )
    }
    #expect(mismatch?.code == .keyDoesNotMatchCertificate)
}
