import Testing

@testable import APNSCore

private func json(_ notification: APNSNotification) throws -> JSONValue {
    try JSONValue.parse(notification.payload())
}

private func text(_ notification: APNSNotification) throws -> String {
    String(decoding: try notification.payload(), as: UTF8.self)
}

/// The `APNSPayloadError` thrown by `body`, or `nil` if it threw nothing (or something else).
private func payloadError(_ body: () throws -> Void) -> APNSPayloadError? {
    do {
        try body()
        return nil
    } catch {
        return error as? APNSPayloadError
    }
}

// MARK: - Field placement

@Test func everyFieldLandsInItsPlace() throws {
    var n = APNSNotification()
    n.alert = .text("Hi")
    n.badge = 0
    n.sound = .named("default")
    n.contentAvailable = true
    n.mutableContent = true
    n.category = "MESSAGE"
    n.threadId = "chat-7"
    n.targetContentId = "window-2"
    n.interruptionLevel = "time-sensitive"
    n.relevanceScore = 0.75
    n.urlArgs = ["boarding", "A998"]
    n.additionalAPSFields = ["event": "update", "timestamp": 1_700_000_000, "content-state": ["score": 3]]
    n.custom = ["orderId": "42", "meta": ["n": 1]]

    let value = try json(n)
    let aps = try #require(value["aps"]?.objectValue)
    #expect(aps["alert"] == "Hi")
    #expect(aps["badge"] == .int(0))
    #expect(aps["sound"] == "default")
    #expect(aps["content-available"] == .int(1))  // a number, not true (§5 check 6)
    #expect(aps["mutable-content"] == .int(1))
    #expect(aps["category"] == "MESSAGE")
    #expect(aps["thread-id"] == "chat-7")
    #expect(aps["target-content-id"] == "window-2")
    #expect(aps["interruption-level"] == "time-sensitive")
    #expect(aps["relevance-score"] == .double(0.75))
    #expect(aps["url-args"] == ["boarding", "A998"])
    #expect(aps["event"] == "update")
    #expect(aps["timestamp"] == 1_700_000_000)
    #expect(aps["content-state"] == ["score": 3])
    #expect(aps.count == 14)
    // Custom keys sit next to aps, never inside it (§5 check 7).
    #expect(value.objectValue?.keys.sorted() == ["aps", "meta", "orderId"])
    #expect(value["orderId"] == "42")
    #expect(value["meta"] == ["n": 1])
    #expect(aps["orderId"] == nil)

    // Documented key order, then additional keys sorted, then custom keys sorted.
    #expect(
        try text(n) == #"{"aps":{"alert":"Hi","badge":0,"sound":"default","content-available":1,"#
            + #""mutable-content":1,"category":"MESSAGE","thread-id":"chat-7","target-content-id":"window-2","#
            + #""interruption-level":"time-sensitive","relevance-score":0.75,"url-args":["boarding","A998"],"#
            + #""content-state":{"score":3},"event":"update","timestamp":1700000000},"#
            + #""meta":{"n":1},"orderId":"42"}"#
    )
}

@Test func goldenPayloads() throws {
    #expect(
        try text(APNSNotification(alert: "Hello", badge: 3, sound: "default"))
            == #"{"aps":{"alert":"Hello","badge":3,"sound":"default"}}"#
    )
    #expect(
        try text(APNSNotification(contentAvailable: true, priority: .powerConsiderate))
            == #"{"aps":{"content-available":1}}"#
    )
    #expect(try text(APNSNotification(custom: ["b": 2, "a": "x"])) == #"{"aps":{},"a":"x","b":2}"#)
    #expect(
        try text(APNSNotification(alert: "Ünïcødé 😀 / \"q\""))
            == #"{"aps":{"alert":"Ünïcødé 😀 / \"q\""}}"#
    )
}

@Test func stringAndDictionaryAlerts() throws {
    #expect(try json(APNSNotification(alert: .text("plain")))["aps"]?["alert"] == "plain")

    let fields = APNSAlertFields(
        title: "T",
        subtitle: "S",
        body: "B",
        launchImage: "L.png",
        locKey: "LK",
        locArgs: ["a1"],
        titleLocKey: "TLK",
        titleLocArgs: ["t1", "t2"],
        subtitleLocKey: "SLK",
        subtitleLocArgs: ["s1"],
        actionLocKey: "ALK",
        action: "View"
    )
    let alert = try #require(try json(APNSNotification(alert: .fields(fields)))["aps"]?["alert"]?.objectValue)
    #expect(
        alert == [
            "title": "T", "subtitle": "S", "body": "B", "launch-image": "L.png",
            "loc-key": "LK", "loc-args": ["a1"], "title-loc-key": "TLK", "title-loc-args": ["t1", "t2"],
            "subtitle-loc-key": "SLK", "subtitle-loc-args": ["s1"], "action-loc-key": "ALK", "action": "View",
        ]
    )

    // Only set fields are written, in the documented order.
    let partial = APNSNotification(alert: .fields(APNSAlertFields(title: "Hi", body: "There", locArgs: ["x"])))
    #expect(try text(partial) == #"{"aps":{"alert":{"title":"Hi","body":"There","loc-args":["x"]}}}"#)
}

@Test func criticalSound() throws {
    let n = APNSNotification(alert: "Fire", sound: .critical(name: "alarm.caf", volume: 0.5))
    #expect(try text(n) == #"{"aps":{"alert":"Fire","sound":{"critical":1,"name":"alarm.caf","volume":0.5}}}"#)
    let loud = APNSNotification(sound: .critical(name: "a", volume: 1))
    #expect(try json(loud)["aps"]?["sound"]?["volume"] == .double(1.0))
}

@Test func mdmPayload() throws {
    let n = APNSNotification(mdm: "A1B2-PushMagic")
    #expect(try text(n) == #"{"mdm":"A1B2-PushMagic"}"#)
    #expect(
        try n.validatedPayload(limit: APNSNotification.binaryPayloadLimit) == Array(#"{"mdm":"A1B2-PushMagic"}"#.utf8)
    )
}

@Test func defaults() {
    let n = APNSNotification()
    #expect(n.expiry == .immediately)
    #expect(n.priority == .immediate)
    #expect(n.encoding == .utf8)
    #expect(n.retryLimit == nil)
    #expect(!n.truncateAtWordEnd)
    #expect(!n.hasAPSFields)
    #expect(APNSNotification.binaryPayloadLimit == 2048)
}

@Test func priorityAndEncoding() throws {
    #expect(APNSPriority(rawValue: 10) == .immediate)
    #expect(APNSPriority(rawValue: 5) == .powerConsiderate)
    #expect(APNSPriority(rawValue: 1) == .low)
    #expect(APNSPriority(rawValue: 7) == nil)
    #expect([APNSPriority.immediate, .powerConsiderate, .low].map(\.rawValue) == [10, 5, 1])
    #expect(try APNSPriority(validating: 5) == .powerConsiderate)

    for name in ["utf8", "utf-8", "UTF-8", "Utf8"] { #expect(APNSPayloadEncoding(name: name) == .utf8) }
    for name in ["utf16", "latin1", "", "utf 8"] { #expect(APNSPayloadEncoding(name: name) == nil) }
}

// MARK: - Errors (one test per code)

@Test func errorTooLarge() throws {
    let n = APNSNotification(alert: .text(String(repeating: "x", count: 2100)))
    let error = payloadError { _ = try n.validatedPayload(limit: APNSNotification.binaryPayloadLimit) }
    #expect(error?.code == .tooLarge)
    #expect(error?.message == "payload is 2120 bytes, over the 2048-byte limit; shorten the alert or set truncation")
    #expect(error?.description == error?.message)
    // The same payload fits the HTTP/2 limit (§1.3).
    #expect(try n.validatedPayload(limit: 4096).count == 2120)
}

@Test func errorCannotTrim() {
    // No body to shorten.
    var noBody = APNSNotification(
        alert: .fields(APNSAlertFields(title: "T")),
        custom: ["blob": .string(String(repeating: "z", count: 300))]
    )
    var error = payloadError { _ = try noBody.trim(toFit: 256) }
    #expect(error?.code == .cannotTrim)
    #expect(error?.message.contains("no alert body") == true)

    // Even an empty body is too large.
    var crowded = APNSNotification(alert: "short", custom: ["blob": .string(String(repeating: "z", count: 300))])
    error = payloadError { _ = try crowded.trim(toFit: 256) }
    #expect(error?.code == .cannotTrim)
    #expect(error?.message.contains("330 bytes even with an empty alert body, over the 256-byte limit") == true)
    #expect(crowded.alertBody == "short")  // unchanged on failure
}

@Test func errorEmptyPayload() {
    let error = payloadError { _ = try APNSNotification().validatedPayload(limit: 2048) }
    #expect(error?.code == .emptyPayload)
}

@Test func errorInvalidPriority() throws {
    let n = APNSNotification(alert: "hi", priority: .low)
    let error = payloadError { _ = try n.validatedPayload(limit: 2048) }
    #expect(error?.code == .invalidPriority)
    #expect(try n.validatedPayload(limit: 4096, allowLowPriority: true).isEmpty == false)
    #expect(payloadError { _ = try APNSPriority(validating: 7) }?.code == .invalidPriority)
}

@Test func errorContentAvailableWithImmediatePriority() throws {
    let silent = APNSNotification(contentAvailable: true, custom: ["sync": true])
    let error = payloadError { _ = try silent.validatedPayload(limit: 2048) }
    #expect(error?.code == .contentAvailableWithImmediatePriority)
    // Fine at priority 5, or at 10 when the notification also shows something (§1.2 item 5).
    var fixed = silent
    fixed.priority = .powerConsiderate
    #expect(throws: Never.self) { try fixed.validatedPayload(limit: 2048) }
    var visible = silent
    visible.badge = 1
    #expect(throws: Never.self) { try visible.validatedPayload(limit: 2048) }
}

@Test func errorInvalidValue() {
    let cases: [APNSNotification] = [
        APNSNotification(alert: "x", custom: ["aps": ["alert": "sneaky"]]),
        APNSNotification(badge: -1),
        APNSNotification(sound: .critical(name: "a", volume: 1.5)),
        APNSNotification(relevanceScore: .nan),
        APNSNotification(alert: "x", additionalAPSFields: ["alert": "again"]),
        APNSNotification(mdm: ""),
    ]
    for n in cases {
        let error = payloadError { _ = try n.payload() }
        #expect(error?.code == .invalidValue, "\(n)")
    }
    let level = APNSNotification(alert: "x", interruptionLevel: "urgent")
    let error = payloadError { _ = try level.validatedPayload(limit: 2048) }
    #expect(error?.code == .invalidValue)
    #expect(error?.message.contains("\"urgent\"") == true)
    // An additional key that no model property sets is fine.
    #expect(throws: Never.self) { try APNSNotification(additionalAPSFields: ["alert": "raw"]).payload() }
}

@Test func errorMDMWithAPS() {
    let withAlert = APNSNotification(alert: "x", mdm: "magic")
    #expect(payloadError { _ = try withAlert.payload() }?.code == .mdmWithAPS)
    let withFlag = APNSNotification(contentAvailable: true, mdm: "magic")
    #expect(payloadError { _ = try withFlag.payload() }?.code == .mdmWithAPS)
    let withCustom = APNSNotification(mdm: "magic", custom: ["k": 1])
    let error = payloadError { _ = try withCustom.payload() }
    #expect(error?.code == .mdmWithAPS)
    #expect(error?.message.contains("k") == true)
}

@Test func errorUnsupportedEncoding() throws {
    let error = payloadError { _ = try APNSPayloadEncoding(parsing: "latin1") }
    #expect(error?.code == .unsupportedEncoding)
    #expect(error?.message.contains("\"latin1\"") == true)
    #expect(try APNSPayloadEncoding(parsing: "UTF-8") == .utf8)
}

// MARK: - Trimming

/// Asserts that a trimmed payload parses, fits, and its body is a whole-character prefix of `original`.
private func checkTrimmed(_ n: APNSNotification, original: String, limit: Int, slack: Int) throws -> String {
    let bytes = try n.payload()
    #expect(bytes.count <= limit)
    #expect(bytes.count > limit - slack, "cut more than needed: \(bytes.count) of \(limit)")
    let parsed = try JSONValue.parse(bytes)  // valid UTF-8 and valid JSON
    let body = try #require(parsed["aps"]?["alert"]?.stringValue ?? parsed["aps"]?["alert"]?["body"]?.stringValue)
    #expect(body == n.alertBody)
    // Same characters as the start of the original: no half grapheme at the end.
    #expect(Array(body) == Array(Array(original).prefix(body.count)))
    return body
}

@Test func trimAlreadyFits() throws {
    var n = APNSNotification(alert: "short")
    #expect(try n.trim(toFit: 2048) == 0)
    #expect(n.alertBody == "short")
}

@Test func trimASCII() throws {
    let original = String(repeating: "abcdefghij", count: 300)
    var n = APNSNotification(alert: .text(original))
    let before = try n.payload().count
    let removed = try n.trim(toFit: 2048)
    #expect(try n.payload().count == 2048)  // single-byte characters fit exactly
    #expect(removed == before - 2048)
    _ = try checkTrimmed(n, original: original, limit: 2048, slack: 1)
}

@Test func trimDictionaryBodyLeavesOtherFields() throws {
    let original = String(repeating: "word ", count: 200)
    var n = APNSNotification(alert: .fields(APNSAlertFields(title: "Title", body: original)), badge: 2)
    try n.trim(toFit: 256)
    _ = try checkTrimmed(n, original: original, limit: 256, slack: 1)
    guard case .fields(let fields) = n.alert else {
        Issue.record("alert form changed")
        return
    }
    #expect(fields.title == "Title")
    #expect(n.badge == 2)
}

@Test(arguments: [
    ("é", 2), ("漢字", 3), ("👨‍👩‍👧‍👦", 25), ("🇯🇵🇫🇷", 8), ("e\u{301}", 3), ("a👍🏽", 8),
])
func trimMultiByte(unit: String, largestCharacterBytes: Int) throws {
    let original = String(repeating: unit, count: 3000 / unit.utf8.count + 1)
    for limit in [256, 257, 258, 2047, 2048] {
        var n = APNSNotification(alert: .text(original))
        let removed = try n.trim(toFit: limit)
        #expect(removed > 0)
        let body = try checkTrimmed(n, original: original, limit: limit, slack: largestCharacterBytes)
        #expect(!body.isEmpty)
    }
}

@Test func trimEscapedCharacters() throws {
    // Each `"` and `\n` is 2 bytes once escaped, `\u{1}` is 6; no cut may split an escape.
    for unit in ["\"\n", "a\"", "\u{1}b", "\\"] {
        let original = String(repeating: unit, count: 1500)
        for limit in [100, 101, 102, 103, 2048] {
            var n = APNSNotification(alert: .text(original))
            try n.trim(toFit: limit)
            _ = try checkTrimmed(n, original: original, limit: limit, slack: 6)
        }
    }
}

@Test func trimWordEnd() throws {
    let original = "alpha beta gamma delta epsilon"
    let fixed = try APNSNotification(alert: "").payload().count  // {"aps":{"alert":""}}

    // The cut falls inside "gamma": back up to "alpha beta".
    var n = APNSNotification(alert: .text(original), truncateAtWordEnd: true)
    try n.trim(toFit: fixed + 13)
    #expect(n.alertBody == "alpha beta")

    // The cut falls just before a space: the whole word is kept.
    n = APNSNotification(alert: .text(original), truncateAtWordEnd: true)
    try n.trim(toFit: fixed + 16)
    #expect(n.alertBody == "alpha beta gamma")

    // Without word-end mode the cut is exact.
    n = APNSNotification(alert: .text(original))
    try n.trim(toFit: fixed + 13)
    #expect(n.alertBody == "alpha beta ga")

    // No whitespace before the cut: cut mid-word.
    n = APNSNotification(alert: "incomprehensibilities everywhere", truncateAtWordEnd: true)
    try n.trim(toFit: fixed + 10)
    #expect(n.alertBody == "incomprehe")
}

@Test func trimLongBodyOnlyWalksTheBudget() throws {
    let original = String(repeating: "Ω", count: 500_000)
    var n = APNSNotification(alert: .text(original))
    let removed = try n.trim(toFit: 2048)
    #expect(removed == 1_000_000 + 20 - 2048)
    _ = try checkTrimmed(n, original: original, limit: 2048, slack: 2)
}

@Test func trimmedPayloadPassesValidation() throws {
    var n = APNSNotification(alert: .text(String(repeating: "ü", count: 5000)), sound: "default")
    #expect(payloadError { _ = try n.validatedPayload(limit: 2048) }?.code == .tooLarge)
    try n.trim(toFit: APNSNotification.binaryPayloadLimit)
    #expect(try n.validatedPayload(limit: APNSNotification.binaryPayloadLimit).count <= 2048)
}
