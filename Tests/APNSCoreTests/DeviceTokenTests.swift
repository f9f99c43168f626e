import Testing

@testable import APNSCore

@Test func hexTokensTolerateSpacesAndAngleBrackets() throws {
    let plain = try DeviceToken(hex: "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad")
    let described = try DeviceToken(hex: "<740f4707 bebcf74f 9b7c25d4 8e335894 5f6aa01d a5ddb387 462c7eaf 61bb78ad>")
    let upper = try DeviceToken(hex: "740F4707BEBCF74F9B7C25D48E3358945F6AA01DA5DDB387462C7EAF61BB78AD")
    #expect(plain == described)
    #expect(plain == upper)
    #expect(plain.bytes.count == 32)
    #expect(plain.bytes.first == 0x74)
    #expect(plain.hex == "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad")
}

@Test func tokensFromBytesRoundTripThroughHex() throws {
    let token = try DeviceToken(bytes: [0x00, 0xff, 0x10])
    #expect(token.hex == "00ff10")
    #expect(try DeviceToken(hex: token.hex) == token)
}

@Test(arguments: [
    ("", "empty"),
    ("abc", "odd number of hex digits"),
    ("12zz", "not a hex digit at position 3"),
    (String(repeating: "ab", count: 101), "at most 100"),
])
func malformedTokensAreRejectedWithAReason(text: String, reason: String) {
    do {
        _ = try DeviceToken(hex: text)
        Issue.record("\(text) was accepted")
    } catch {
        #expect(error.code == .invalidDeviceToken)
        #expect(error.message.contains(reason), "\(error.message)")
    }
}

@Test func redactedFormKeepsFullTokensOutOfLogs() throws {
    let token = try DeviceToken(hex: "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad")
    #expect(token.redacted == "740f4707…(32B)")
    #expect(!"\(token)".contains(token.hex))
}

@Test func statusTableCoversAppleAndClientCodes() {
    #expect(APNSStatus(rawValue: 8) == .invalidToken)
    #expect(APNSStatus.invalidToken.name == "invalidToken")
    #expect(APNSStatus.shutdown.reason == "Shutdown")
    #expect(APNSStatus.protocolError.rawValue == 128)
    #expect(APNSStatus.unknown.rawValue == 255)
    #expect(APNSStatus.shutdown.isFromApple)
    #expect(!APNSStatus.indeterminate.isFromApple)
    #expect(APNSStatus(rawValue: 42).name == "status42")
    for code in [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 128, 255] {
        #expect(!APNSStatus(rawValue: code).reason.hasPrefix("Undocumented"), "status \(code)")
    }
}

@Test func hexCanFollowAPrefix() throws {
    let token = try DeviceToken(bytes: [0x00, 0x0f, 0xa5, 0xff])
    let path = token.bytes.withUnsafeBufferPointer { DeviceToken.lowercaseHex($0, prefix: "/3/device/") }
    #expect(path == "/3/device/000fa5ff")
    #expect(token.bytes.withUnsafeBufferPointer { DeviceToken.lowercaseHex($0) } == token.hex)
    #expect(token.hex == "000fa5ff")
}
