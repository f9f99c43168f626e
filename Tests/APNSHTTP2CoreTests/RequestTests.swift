import APNSCore
import Foundation
import Testing

@testable import APNSHTTP2Core

private let topic = "com.example.app"
private let fixedID = UUID(uuidString: "7A4E8F9C-1B2D-4E3F-8A9B-0C1D2E3F4A5B")!

private func tokenAuth() throws -> APNSAuthentication {
    .token(try APNSProviderToken(signingKey: Fixture.signingKey(), teamID: Fixture.teamID, issuedAt: Fixture.epoch))
}

private func expectRejected(
    _ text: String,
    code: APNSError.Code = .invalidRequest,
    _ build: () throws(APNSError) -> APNSHTTP2Request
) {
    do {
        let request = try build()
        Issue.record("accepted: \(request.headers)")
    } catch {
        #expect(error.code == code, "\(error)")
        #expect(error.message.contains(text), "\(error.message)")
    }
}

/// A payload of exactly `size` bytes: {"aps":{},"x":"aaa…"}.
private func payload(size: Int) -> [UInt8] {
    let fixed = #"{"aps":{},"x":""}"#.utf8.count
    return Array(#"{"aps":{},"x":"\#(String(repeating: "a", count: size - fixed))"}"#.utf8)
}

@Test func requestCarriesPathHeadersAndBody() throws {
    var notification = APNSNotification(alert: "Hello", badge: 3)
    notification.expiry = .at(unixSeconds: 1_700_003_600)
    notification.priority = .powerConsiderate
    let auth = try tokenAuth()
    let request = try APNSHTTP2Request(
        notification: notification,
        deviceToken: Fixture.token64,
        topic: topic,
        pushType: .alert,
        authentication: auth,
        collapseID: "score",
        apnsID: fixedID,
        now: Fixture.epoch
    )

    #expect(request.path == "/3/device/" + String(repeating: "ab", count: 32))
    #expect(
        request.pseudoHeaders == [.init(":method", "POST"), .init(":scheme", "https"), .init(":path", request.path)]
    )
    guard case .token(let token) = auth else { return }
    #expect(
        request.headers == [
            .init("apns-id", "7a4e8f9c-1b2d-4e3f-8a9b-0c1d2e3f4a5b"),
            .init("apns-push-type", "alert"),
            .init("apns-topic", topic),
            .init("apns-priority", "5"),
            .init("apns-expiration", "1700003600"),
            .init("apns-collapse-id", "score"),
            .init("authorization", "bearer " + token.jwt),
        ]
    )
    #expect(request.header("apns-id") == request.header("apns-id")?.lowercased())
    #expect(String(decoding: request.body, as: UTF8.self) == #"{"aps":{"alert":"Hello","badge":3}}"#)
    #expect(!request.headers.description.contains(token.jwt))
}

@Test func certificateRequestsHaveNoAuthorizationAndMayOmitTheTopic() throws {
    let request = try APNSHTTP2Request(
        notification: APNSNotification(alert: "Hi"),
        deviceToken: Fixture.token64,
        topic: nil,
        pushType: .alert,
        authentication: .certificate,
        now: Fixture.epoch
    )
    #expect(request.header("authorization") == nil)
    #expect(request.header("apns-topic") == nil)
    #expect(request.header("apns-expiration") == "0")
    #expect(request.header("apns-priority") == "10")
}

@Test func relativeExpiryIsResolvedAgainstNow() throws {
    var notification = APNSNotification(alert: "Hi")
    notification.expiry = .after(.seconds(3600))
    let request = try APNSHTTP2Request(
        notification: notification,
        deviceToken: Fixture.token64,
        topic: topic,
        pushType: .alert,
        authentication: .certificate,
        now: Fixture.epoch
    )
    #expect(request.header("apns-expiration") == "1700003600")
}

@Test func authorizeReplacesTheToken() throws {
    var request = try APNSHTTP2Request(
        notification: APNSNotification(alert: "Hi"),
        deviceToken: Fixture.token64,
        topic: topic,
        pushType: .alert,
        authentication: tokenAuth(),
        now: Fixture.epoch
    )
    let newer = try APNSProviderToken(
        signingKey: Fixture.signingKey(),
        teamID: Fixture.teamID,
        issuedAt: Fixture.minutes(50)
    )
    try request.authorize(with: newer)
    #expect(request.header("authorization") == newer.authorization)

    var untopical = try APNSHTTP2Request(
        notification: APNSNotification(alert: "Hi"),
        deviceToken: Fixture.token64,
        topic: nil,
        pushType: .alert,
        authentication: .certificate,
        now: Fixture.epoch
    )
    #expect(throws: APNSError.self) { try untopical.authorize(with: newer) }
}

// MARK: Collapse ID (§3.3: at most 64 bytes)

@Test func collapseIDsAreLimitedTo64UTF8Bytes() throws {
    let ok = [String(repeating: "c", count: 64), String(repeating: "é", count: 32)]
    for id in ok {
        _ = try APNSHTTP2Request(
            notification: APNSNotification(alert: "Hi"),
            deviceToken: Fixture.token64,
            topic: topic,
            pushType: .alert,
            authentication: .certificate,
            collapseID: id,
            now: Fixture.epoch
        )
    }
    for (id, text) in [
        (String(repeating: "c", count: 65), "65 bytes"), (String(repeating: "é", count: 33), "66 bytes"),
        ("", "empty"), ("a\r\nb", "control character"),
    ] {
        expectRejected(text) { () throws(APNSError) in
            try APNSHTTP2Request(
                notification: APNSNotification(alert: "Hi"),
                deviceToken: Fixture.token64,
                topic: topic,
                pushType: .alert,
                authentication: .certificate,
                collapseID: id,
                now: Fixture.epoch
            )
        }
    }
}

// MARK: Priority (§3.3: 10, 5 or 1; background is 5 only)

@Test func prioritiesAre10Or5Or1() throws {
    #expect(try APNSPriority(validating: 10) == .immediate)
    #expect(try APNSPriority(validating: 5) == .powerConsiderate)
    #expect(try APNSPriority(validating: 1) == .low)
    for value in [0, 2, 7, 11] {
        #expect(throws: APNSPayloadError.self) { try APNSPriority(validating: value) }
    }
    // Priority 1 is allowed on HTTP/2.
    var notification = APNSNotification(alert: "Hi")
    notification.priority = .low
    let request = try APNSHTTP2Request(
        notification: notification,
        deviceToken: Fixture.token64,
        topic: topic,
        pushType: .alert,
        authentication: .certificate,
        now: Fixture.epoch
    )
    #expect(request.header("apns-priority") == "1")
}

@Test func backgroundPushesNeedPriority5() throws {
    var silent = APNSNotification(contentAvailable: true)
    silent.priority = .powerConsiderate
    _ = try APNSHTTP2Request(
        notification: silent,
        deviceToken: Fixture.token64,
        topic: topic,
        pushType: .background,
        authentication: .certificate,
        now: Fixture.epoch
    )
    for priority in [APNSPriority.immediate, .low] {
        silent.priority = priority
        expectRejected("allows only priority 5") { () throws(APNSError) in
            try APNSHTTP2Request(
                notification: silent,
                deviceToken: Fixture.token64,
                topic: topic,
                pushType: .background,
                authentication: .certificate,
                now: Fixture.epoch
            )
        }
        expectRejected("allows only priority 5") { () throws(APNSError) in
            try APNSHTTP2Request(
                payload: Array(#"{"aps":{"content-available":1}}"#.utf8),
                deviceToken: Fixture.token64,
                topic: topic,
                pushType: .background,
                priority: priority,
                authentication: .certificate,
                now: Fixture.epoch
            )
        }
    }
}

@Test func liveActivityPushesTakePriority10Or5() throws {
    // §5.1, §7.3: Apple asks for 10 or 5 on a Live Activity push, to a token or a channel.
    let update = Array(#"{"aps":{"event":"update","timestamp":1700000000,"content-state":{}}}"#.utf8)
    for priority in [APNSPriority.immediate, .powerConsiderate] {
        let request = try APNSHTTP2Request(
            payload: update,
            deviceToken: Fixture.token64,
            topic: topic + ".push-type.liveactivity",
            pushType: .liveactivity,
            priority: priority,
            authentication: .certificate,
            now: Fixture.epoch
        )
        #expect(request.priority == priority)
    }
    expectRejected("allows only priority 10 (immediate) or 5 (power-considerate), not 1") { () throws(APNSError) in
        try APNSHTTP2Request(
            payload: update,
            deviceToken: Fixture.token64,
            topic: topic + ".push-type.liveactivity",
            pushType: .liveactivity,
            priority: .low,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
}

@Test func pushTypeMustMatchThePayload() throws {
    var loud = APNSNotification(alert: "Hi", contentAvailable: true)
    loud.priority = .powerConsiderate
    expectRejected("must not carry an alert") { () throws(APNSError) in
        try APNSHTTP2Request(
            notification: loud,
            deviceToken: Fixture.token64,
            topic: topic,
            pushType: .background,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
    var quiet = APNSNotification(custom: ["k": 1])
    quiet.priority = .powerConsiderate
    expectRejected("needs content-available") { () throws(APNSError) in
        try APNSHTTP2Request(
            notification: quiet,
            deviceToken: Fixture.token64,
            topic: topic,
            pushType: .background,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
    var silent = APNSNotification(contentAvailable: true)
    silent.priority = .powerConsiderate
    expectRejected("push type background") { () throws(APNSError) in
        try APNSHTTP2Request(
            notification: silent,
            deviceToken: Fixture.token64,
            topic: topic,
            pushType: .alert,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
    expectRejected("push type mdm") { () throws(APNSError) in
        try APNSHTTP2Request(
            notification: APNSNotification(mdm: "magic"),
            deviceToken: Fixture.token64,
            topic: "com.apple.mgmt.External.1234",
            pushType: .alert,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
    expectRejected("needs an MDM notification") { () throws(APNSError) in
        try APNSHTTP2Request(
            notification: APNSNotification(alert: "Hi"),
            deviceToken: Fixture.token64,
            topic: "com.apple.mgmt.External.1234",
            pushType: .mdm,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
    let mdm = try APNSHTTP2Request(
        notification: APNSNotification(mdm: "magic"),
        deviceToken: Fixture.token64,
        topic: "com.apple.mgmt.External.1234",
        pushType: .mdm,
        authentication: .certificate,
        now: Fixture.epoch
    )
    #expect(String(decoding: mdm.body, as: UTF8.self) == #"{"mdm":"magic"}"#)
}

// MARK: Topic (§3.3 table)

@Test(arguments: [
    (APNSPushType.alert, "com.example.app"),
    (.background, "com.example.app"),
    (.voip, "com.example.app.voip"),
    (.complication, "com.example.app.complication"),
    (.fileprovider, "com.example.app.pushkit.fileprovider"),
    (.location, "com.example.app.location-query"),
    (.liveactivity, "com.example.app.push-type.liveactivity"),
    (.pushtotalk, "com.example.app.voip-ptt"),
    (.widgets, "com.example.app.push-type.widgets"),
    (.controls, "com.example.app.push-type.controls"),
    (.mdm, "com.apple.mgmt.External.1234"),
])
func topicSuffixFollowsThePushType(type: APNSPushType, expected: String) throws {
    #expect(type.topic(bundleID: "com.example.app") == expected || type == .mdm)
    try type.validate(topic: expected)
    if type.topicSuffix != nil {
        #expect(throws: APNSError.self) { try type.validate(topic: "com.example.app") }
        #expect(throws: APNSError.self) { try type.validate(topic: type.topicSuffix ?? "") }
        let auth = try tokenAuth()
        expectRejected("does not fit push type \(type.rawValue)") { () throws(APNSError) in
            try APNSHTTP2Request(
                payload: payload(size: 100),
                deviceToken: Fixture.token64,
                topic: "com.example.app",
                pushType: type,
                priority: .powerConsiderate,
                authentication: auth,
                now: Fixture.epoch
            )
        }
    }
    let request = try APNSHTTP2Request(
        payload: payload(size: 100),
        deviceToken: Fixture.token64,
        topic: expected,
        pushType: type,
        priority: .powerConsiderate,
        authentication: tokenAuth(),
        now: Fixture.epoch
    )
    #expect(request.header("apns-push-type") == type.rawValue)
    #expect(request.header("apns-topic") == expected)
}

@Test func tokenAuthenticationNeedsATopic() throws {
    let auth = try tokenAuth()
    expectRejected("no apns-topic") { () throws(APNSError) in
        try APNSHTTP2Request(
            notification: APNSNotification(alert: "Hi"),
            deviceToken: Fixture.token64,
            topic: nil,
            pushType: .alert,
            authentication: auth,
            now: Fixture.epoch
        )
    }
    for bad in ["", "com.example app", "com.example.app\n"] {
        expectRejected("topic") { () throws(APNSError) in
            try APNSHTTP2Request(
                notification: APNSNotification(alert: "Hi"),
                deviceToken: Fixture.token64,
                topic: bad,
                pushType: .alert,
                authentication: auth,
                now: Fixture.epoch
            )
        }
    }
}

@Test func locationPushesNeedTokenAuthentication() throws {
    expectRejected("only with token authentication") { () throws(APNSError) in
        try APNSHTTP2Request(
            payload: payload(size: 50),
            deviceToken: Fixture.token64,
            topic: "com.example.app.location-query",
            pushType: .location,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
}

// MARK: Payload size (§1.3: 4096, 5120 for VoIP)

@Test func payloadLimitIs4096And5120ForVoIP() throws {
    #expect(APNSPushType.alert.payloadLimit == 4096)
    #expect(APNSPushType.voip.payloadLimit == 5120)
    for (type, topic, limit) in [(APNSPushType.alert, topic, 4096), (.voip, topic + ".voip", 5120)] {
        _ = try APNSHTTP2Request(
            payload: payload(size: limit),
            deviceToken: Fixture.token64,
            topic: topic,
            pushType: type,
            authentication: .certificate,
            now: Fixture.epoch
        )
        expectRejected("over the \(limit)-byte limit", code: .invalidPayload) { () throws(APNSError) in
            try APNSHTTP2Request(
                payload: payload(size: limit + 1),
                deviceToken: Fixture.token64,
                topic: topic,
                pushType: type,
                authentication: .certificate,
                now: Fixture.epoch
            )
        }

        // The same limits through the notification model.
        let fixed = try APNSNotification(custom: ["x": ""]).payload().count
        let fits = APNSNotification(custom: ["x": .string(String(repeating: "a", count: limit - fixed))])
        _ = try APNSHTTP2Request(
            notification: fits,
            deviceToken: Fixture.token64,
            topic: topic,
            pushType: type,
            authentication: .certificate,
            now: Fixture.epoch
        )
        let over = APNSNotification(custom: ["x": .string(String(repeating: "a", count: limit - fixed + 1))])
        do {
            _ = try APNSHTTP2Request(
                notification: over,
                deviceToken: Fixture.token64,
                topic: topic,
                pushType: type,
                authentication: .certificate,
                now: Fixture.epoch
            )
            Issue.record("accepted \(limit + 1) bytes")
        } catch {
            #expect(error.code == .invalidPayload)
            #expect((error.underlying as? APNSPayloadError)?.code == .tooLarge)
        }
    }
}

@Test func payloadMustBeANonEmptyJSONObject() throws {
    expectRejected("empty", code: .invalidPayload) { () throws(APNSError) in
        try APNSHTTP2Request(
            payload: [],
            deviceToken: Fixture.token64,
            topic: topic,
            pushType: .alert,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
    for text in ["[1]", "\"aps\"", "{\"aps\":", "{} x"] {
        expectRejected("not a JSON object", code: .invalidPayload) { () throws(APNSError) in
            try APNSHTTP2Request(
                payload: Array(text.utf8),
                deviceToken: Fixture.token64,
                topic: topic,
                pushType: .alert,
                authentication: .certificate,
                now: Fixture.epoch
            )
        }
    }
    expectRejected("payload is empty", code: .invalidPayload) { () throws(APNSError) in
        try APNSHTTP2Request(
            notification: APNSNotification(),
            deviceToken: Fixture.token64,
            topic: topic,
            pushType: .alert,
            authentication: .certificate,
            now: Fixture.epoch
        )
    }
}

@Test func topicsWithWhitespaceOrControlCharactersAreRejectedOthersPass() throws {
    for topic in ["com.example.app", "com.example.app.voip", "com.exämple.app", "com.example_app-1"] {
        try APNSHTTP2Request.validate(topic: topic)
    }
    for topic in [
        "com.example app", "com.example.app\t", "com.example\u{7}.app", "com.example\u{00A0}app",
        "com.example\u{2028}app",
    ] {
        #expect(throws: APNSError.self, "\(topic.debugDescription)") { try APNSHTTP2Request.validate(topic: topic) }
    }
    #expect(throws: APNSError.self) { try APNSHTTP2Request.validate(topic: "") }
}
