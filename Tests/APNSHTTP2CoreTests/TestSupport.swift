import APNSCore
import Crypto
import Foundation

@testable import APNSHTTP2Core

enum Fixture {
    static let keyID = "ABCDE12345"
    static let teamID = "TEAM123456"
    /// 2023-11-14T22:13:20Z
    static let epoch = Date(timeIntervalSince1970: 1_700_000_000)

    static func signingKey(_ keyID: String = keyID) throws -> APNSSigningKey {
        try APNSSigningKey(keyID: keyID, privateKey: P256.Signing.PrivateKey())
    }

    static func minutes(_ m: Double) -> Date { epoch.addingTimeInterval(m * 60) }

    static let token64 = try! DeviceToken(hex: String(repeating: "ab", count: 32))
}

/// A clock the test moves by hand.
final class ManualClock: @unchecked Sendable {
    // Only touched from the test's own task.
    var now: Date
    init(_ now: Date) { self.now = now }
}
