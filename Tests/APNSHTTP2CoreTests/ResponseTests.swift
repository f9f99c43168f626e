import APNSCore
import Foundation
import Testing

@testable import APNSHTTP2Core

@Test func reasonTableMatchesTheReference() {
    let expected: [(String, Int)] = [
        ("BadCollapseId", 400), ("BadDeviceToken", 400), ("BadExpirationDate", 400), ("BadMessageId", 400),
        ("BadPriority", 400), ("BadTopic", 400), ("DeviceTokenNotForTopic", 400), ("DuplicateHeaders", 400),
        ("IdleTimeout", 400), ("InvalidPushType", 400), ("MissingDeviceToken", 400), ("MissingTopic", 400),
        ("PayloadEmpty", 400), ("TopicDisallowed", 400),
        ("BadCertificate", 403), ("BadCertificateEnvironment", 403), ("ExpiredProviderToken", 403), ("Forbidden", 403),
        ("InvalidProviderToken", 403), ("MissingProviderToken", 403), ("UnrelatedKeyIdInToken", 403),
        ("BadEnvironmentKeyIdInToken", 403),
        ("BadPath", 404), ("MethodNotAllowed", 405), ("ExpiredToken", 410), ("Unregistered", 410),
        ("PayloadTooLarge", 413), ("TooManyProviderTokenUpdates", 429), ("TooManyRequests", 429),
        ("InternalServerError", 500), ("ServiceUnavailable", 503), ("Shutdown", 503),
        // §7.4: channel management and broadcasts.
        ("FeatureNotEnabled", 400), ("MissingChannelId", 400), ("BadChannelId", 400), ("ChannelNotRegistered", 400),
        ("BadRequestParams", 400), ("BadRequestPayload", 400), ("MissingPushType", 400),
        ("CannotCreateChannelConfig", 400), ("TopicMismatch", 403),
    ]
    #expect(APNSReason.documented.map(\.rawValue) == expected.map(\.0))
    for (name, status) in expected {
        #expect(APNSReason(rawValue: name).status == status, "\(name)")
    }
    #expect(APNSReason(rawValue: "SomethingNew").status == nil)
    #expect(!APNSReason(rawValue: "SomethingNew").isDocumented)
}

@Test func neverRetryListIsPermanent() {
    let never: Set<APNSReason> = [
        .badDeviceToken, .deviceTokenNotForTopic, .forbidden, .expiredToken, .unregistered, .payloadTooLarge,
    ]
    for reason in APNSReason.documented {
        let advice = reason.retryAdvice(status: reason.status ?? 0)
        #expect(advice.isPermanent == never.contains(reason), "\(reason)")
        if never.contains(reason) { #expect(!advice.isRetryable) }
    }
}

@Test func channelReasonsAreFixedNotRetriedAndCondemnNoToken() {
    let channel: [APNSReason] = [
        .featureNotEnabled, .missingChannelId, .badChannelId, .channelNotRegistered, .badRequestParams,
        .badRequestPayload, .missingPushType, .cannotCreateChannelConfig, .topicMismatch,
    ]
    for reason in channel {
        guard let entry = reason.entry else {
            Issue.record("\(reason) has no row in the reason table")
            continue
        }
        // §7.4: each names a request, a channel or an account setting to fix; sent again as it
        // was, it fails again.
        #expect(entry.retry == .afterFixingRequest, "\(reason)")
        #expect(!entry.invalidatesDeviceToken && !entry.replaceConnection, "\(reason)")
    }
    #expect(APNSReason.topicMismatch.status == 403)
}

@Test func serverErrorsAndThrottlingAreRetryable() {
    #expect(APNSReason.tooManyRequests.entry?.retry == .afterDelay)
    for reason in [APNSReason.internalServerError, .serviceUnavailable] {
        #expect(reason.entry?.retry == .withBackoff, "\(reason)")
        #expect(reason.retryAdvice(status: 503).isRetryable)
    }
    // A 503 Shutdown is about the connection: resent at once on another one (§3.4, §3.5).
    #expect(APNSReason.shutdown.entry?.retry == .onNewConnection)
    #expect(APNSReason.shutdown.entry?.replaceConnection == true)
    #expect(APNSReason.expiredProviderToken.entry?.retry == .onNewConnection)
    #expect(APNSReason.expiredProviderToken.entry?.replaceConnection == true)
    #expect(APNSReason.badTopic.entry?.retry == .afterFixingRequest)
    #expect(!APNSRetryAdvice.afterFixingRequest.isRetryable && !APNSRetryAdvice.afterFixingRequest.isPermanent)
    #expect(APNSReason.serverErrorRetryDelay == .seconds(900))
    // Unknown reasons fall back on the status.
    let unknown = APNSReason(rawValue: "SomethingNew")
    #expect(unknown.retryAdvice(status: 502) == .withBackoff)
    #expect(unknown.retryAdvice(status: 429) == .afterDelay)
    #expect(unknown.retryAdvice(status: 410) == .never)
    #expect(unknown.retryAdvice(status: 400) == .afterFixingRequest)
}

@Test func errorBodyParsesReasonAndMillisecondTimestamp() throws {
    let body = try #require(APNSErrorBody(bytes: Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8)))
    #expect(body.reason == .unregistered)
    #expect(body.timestamp == Date(timeIntervalSince1970: 1_700_000_000.123))
    #expect(
        String(decoding: body.serialized(), as: UTF8.self) == #"{"reason":"Unregistered","timestamp":1700000000123}"#
    )

    let plain = try #require(APNSErrorBody(bytes: Array(#"{"reason":"BadTopic"}"#.utf8)))
    #expect(plain == APNSErrorBody(reason: .badTopic))
    #expect(String(decoding: plain.serialized(), as: UTF8.self) == #"{"reason":"BadTopic"}"#)

    for bad in ["", "not json", "[]", #"{"reason":7}"#, #"{"other":"x"}"#] {
        #expect(APNSErrorBody(bytes: Array(bad.utf8)) == nil, "\(bad)")
    }
}

@Test func responsesMapToOutcomes() throws {
    let id = UUID(uuidString: "7a4e8f9c-1b2d-4e3f-8a9b-0c1d2e3f4a5b")!
    let ok = APNSHTTP2Response(
        status: 200,
        headers: [.init("apns-id", "7a4e8f9c-1b2d-4e3f-8a9b-0c1d2e3f4a5b"), .init("apns-unique-id", "u-1")],
        body: [UInt8]()
    )
    #expect(ok.outcome == .delivered(apnsID: id))
    #expect(ok.apnsUniqueID == "u-1")

    func outcome(_ status: Int, _ body: String) -> APNSHTTP2Outcome {
        APNSHTTP2Response(status: status, headers: [.init("content-type", "application/json")], body: Array(body.utf8))
            .outcome
    }
    let gone = outcome(410, #"{"reason":"Unregistered","timestamp":1700000000000}"#)
    #expect(gone == .deviceTokenInvalid(APNSHTTP2Failure(status: 410, reason: .unregistered, timestamp: Fixture.epoch)))
    #expect(
        outcome(400, #"{"reason":"BadDeviceToken"}"#)
            == .deviceTokenInvalid(.init(status: 400, reason: .badDeviceToken))
    )
    #expect(
        outcome(400, #"{"reason":"DeviceTokenNotForTopic"}"#)
            == .deviceTokenInvalid(.init(status: 400, reason: .deviceTokenNotForTopic))
    )
    #expect(outcome(413, #"{"reason":"PayloadTooLarge"}"#) == .rejected(.init(status: 413, reason: .payloadTooLarge)))
    #expect(outcome(400, #"{"reason":"BadTopic"}"#) == .rejected(.init(status: 400, reason: .badTopic)))
    #expect(outcome(429, #"{"reason":"TooManyRequests"}"#) == .retry(.init(status: 429, reason: .tooManyRequests)))
    #expect(outcome(503, #"{"reason":"Shutdown"}"#).failure?.replaceConnection == true)
    #expect(outcome(500, #"{"reason":"InternalServerError"}"#).failure?.retry == .withBackoff)
    #expect(
        outcome(403, #"{"reason":"ExpiredProviderToken"}"#) == .retry(.init(status: 403, reason: .expiredProviderToken))
    )
    // No readable reason: decided by the status.
    #expect(outcome(502, "") == .retry(.init(status: 502, reason: nil)))
    #expect(outcome(410, "garbage") == .deviceTokenInvalid(.init(status: 410, reason: nil)))
    #expect(outcome(400, "") == .rejected(.init(status: 400, reason: nil)))
}

@Test func goAwayDebugDataMayBeJSONTextOrEmpty() {
    #expect(APNSGoAwayDebugData(bytes: [UInt8]()) == .empty)
    #expect(APNSGoAwayDebugData(bytes: Array(#"{"reason":"Shutdown"}"#.utf8)) == .reason(.shutdown))
    let text = "Maximum active streams violated for this endpoint."
    #expect(APNSGoAwayDebugData(bytes: Array(text.utf8)) == .text(text))
}
