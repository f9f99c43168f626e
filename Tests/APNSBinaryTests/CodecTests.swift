import APNSCore
import NIOCore
import NIOEmbedded
import NIOTestUtils
import Testing

@testable import APNSBinary

private let token32 = [UInt8](0..<32)

private func payload(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

// MARK: - Encoding

@Test func framedNotificationHasTheDocumentedLayout() throws {
    var buffer = ByteBuffer()
    let body = Array(#"{"aps":{}}"#.utf8)
    let written = buffer.writeFramedNotification(
        token: token32,
        payload: body,
        identifier: 0x0102_0304,
        expiry: 7,
        priority: 5
    )
    // §1.2 worked size: 61 + n bytes on the wire with a 32-byte token.
    #expect(written == 61 + body.count)
    #expect(buffer.readableBytes == written)
    #expect(buffer.getInteger(at: 0, as: UInt8.self) == 2)
    #expect(buffer.getInteger(at: 1, as: UInt32.self) == UInt32(56 + body.count))
    #expect(buffer.getInteger(at: 5, as: UInt8.self) == 1)
    #expect(buffer.getInteger(at: 6, as: UInt16.self) == 32)
    #expect(buffer.getBytes(at: 8, length: 32) == token32)
    #expect(buffer.getInteger(at: 40, as: UInt8.self) == 2)
    #expect(buffer.getInteger(at: 41, as: UInt16.self) == UInt16(body.count))
    let afterPayload = 43 + body.count
    #expect(buffer.getInteger(at: afterPayload, as: UInt8.self) == 3)
    #expect(buffer.getInteger(at: afterPayload + 3, as: UInt32.self) == 0x0102_0304)
    #expect(buffer.getInteger(at: afterPayload + 7, as: UInt8.self) == 4)
    #expect(buffer.getInteger(at: afterPayload + 10, as: UInt32.self) == 7)
    #expect(buffer.getInteger(at: afterPayload + 14, as: UInt8.self) == 5)
    #expect(buffer.getInteger(at: afterPayload + 15, as: UInt16.self) == 1)
    #expect(buffer.getInteger(at: afterPayload + 17, as: UInt8.self) == 5)
    #expect(buffer.readableBytes == afterPayload + 18)
}

@Test func aPayloadWithoutContiguousStorageIsFramedAsAnArrayIs() {
    let body = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
    var fromArray = ByteBuffer()
    fromArray.writeFramedNotification(token: token32, payload: body, identifier: 9, expiry: 1, priority: 10)
    var fromLazy = ByteBuffer(bytes: [0xEE])  // after bytes already in the buffer
    let written = fromLazy.writeFramedNotification(
        token: token32,
        payload: body.indices.lazy.map { body[$0] },
        identifier: 9,
        expiry: 1,
        priority: 10
    )
    #expect(written == fromArray.readableBytes)
    #expect(fromLazy.readBytes(length: 1) == [0xEE])
    #expect(fromLazy == fromArray)
}

@Test func enhancedAndSimpleNotificationsHaveTheDocumentedLayout() {
    var enhanced = ByteBuffer()
    let n = enhanced.writeEnhancedNotification(token: token32, payload: Array("{}".utf8), identifier: 9, expiry: 10)
    #expect(n == 45 + 2)
    #expect(enhanced.getInteger(at: 0, as: UInt8.self) == 1)
    #expect(enhanced.getInteger(at: 1, as: UInt32.self) == 9)
    #expect(enhanced.getInteger(at: 5, as: UInt32.self) == 10)
    #expect(enhanced.getInteger(at: 9, as: UInt16.self) == 32)
    #expect(enhanced.getInteger(at: 43, as: UInt16.self) == 2)

    var simple = ByteBuffer()
    let m = simple.writeSimpleNotification(token: token32, payload: Array("{}".utf8))
    #expect(m == 37 + 2)
    #expect(simple.getInteger(at: 0, as: UInt8.self) == 0)
    #expect(simple.getInteger(at: 35, as: UInt16.self) == 2)
}

@Test func errorResponseAndFeedbackTupleLayouts() throws {
    var buffer = ByteBuffer()
    buffer.writeErrorResponse(ErrorResponse(status: .invalidToken, identifier: 0xDEAD_BEEF))
    #expect(Array(buffer.readableBytesView) == [8, 8, 0xDE, 0xAD, 0xBE, 0xEF])

    var feedback = ByteBuffer()
    feedback.writeFeedbackTuple(FeedbackTuple(timestamp: 1_700_000_000, token: try DeviceToken(bytes: token32)))
    #expect(feedback.readableBytes == 38)
    #expect(feedback.getInteger(at: 0, as: UInt32.self) == 1_700_000_000)
    #expect(feedback.getInteger(at: 4, as: UInt16.self) == 32)
}

// MARK: - Decoding, byte by byte and shuffled

private func frames() -> [(ByteBuffer, [InboundNotification])] {
    var out: [(ByteBuffer, [InboundNotification])] = []
    var b = ByteBuffer()
    b.writeFramedNotification(
        token: token32,
        payload: Array(#"{"aps":{"alert":"a"}}"#.utf8),
        identifier: 42,
        expiry: 99,
        priority: 10
    )
    out.append(
        (
            b,
            [
                .notification(
                    BinaryNotificationFrame(
                        command: .framed,
                        token: token32,
                        payload: payload(#"{"aps":{"alert":"a"}}"#),
                        identifier: 42,
                        expiry: 99,
                        priority: 10
                    )
                )
            ]
        )
    )

    var e = ByteBuffer()
    e.writeEnhancedNotification(token: token32, payload: Array("{}".utf8), identifier: 7, expiry: 0)
    out.append(
        (
            e,
            [
                .notification(
                    BinaryNotificationFrame(
                        command: .enhanced,
                        token: token32,
                        payload: payload("{}"),
                        identifier: 7,
                        expiry: 0
                    )
                )
            ]
        )
    )

    var s = ByteBuffer()
    s.writeSimpleNotification(token: token32, payload: Array("{}".utf8))
    out.append((s, [.notification(BinaryNotificationFrame(command: .simple, token: token32, payload: payload("{}")))]))

    // A command-2 frame with items in another order and some missing.
    var partial = ByteBuffer()
    let sparse = BinaryNotificationFrame(command: .framed, token: nil, payload: payload("{}"), identifier: 5)
    partial.writeNotificationFrame(sparse)
    out.append((partial, [.notification(sparse)]))

    // Two frames in one buffer.
    var two = ByteBuffer()
    two.writeSimpleNotification(token: [1, 2], payload: Array("{}".utf8))
    two.writeEnhancedNotification(token: [3], payload: Array("{\"x\":1}".utf8), identifier: 1, expiry: 2)
    out.append(
        (
            two,
            [
                .notification(BinaryNotificationFrame(command: .simple, token: [1, 2], payload: payload("{}"))),
                .notification(
                    BinaryNotificationFrame(
                        command: .enhanced,
                        token: [3],
                        payload: payload("{\"x\":1}"),
                        identifier: 1,
                        expiry: 2
                    )
                ),
            ]
        )
    )
    return out
}

@Test func notificationDecoderSurvivesAnySplitOfItsInput() throws {
    try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: frames()) {
        NotificationFrameDecoder()
    }
}

@Test func errorResponseDecoderSurvivesAnySplitOfItsInput() throws {
    var one = ByteBuffer()
    one.writeErrorResponse(ErrorResponse(status: .shutdown, identifier: 77))
    var two = ByteBuffer()
    two.writeErrorResponse(ErrorResponse(status: .protocolError, identifier: 1))
    two.writeErrorResponse(ErrorResponse(status: APNSStatus(rawValue: 200), identifier: .max))
    try ByteToMessageDecoderVerifier.verifyDecoder(
        inputOutputPairs: [
            (one, [ErrorResponse(status: .shutdown, identifier: 77)]),
            (
                two,
                [
                    ErrorResponse(status: .protocolError, identifier: 1),
                    ErrorResponse(status: APNSStatus(rawValue: 200), identifier: .max),
                ]
            ),
        ]
    ) { ErrorResponseDecoder() }
}

@Test func feedbackTuplesParseAcrossArbitraryReadBoundaries() throws {
    var tuples: [FeedbackTuple] = []
    var buffer = ByteBuffer()
    for i in 0..<20 {
        // Tokens of different lengths, so that tuples straddle reads at every offset.
        let token = try DeviceToken(bytes: (0..<(20 + i)).map { UInt8(($0 * 7 + i) & 0xff) })
        let tuple = FeedbackTuple(timestamp: UInt32(1_600_000_000 + i), token: token)
        tuples.append(tuple)
        buffer.writeFeedbackTuple(tuple)
    }
    try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: [(buffer, tuples)]) { FeedbackTupleDecoder() }

    // And explicitly: every split point of the stream into two reads.
    let bytes = Array(buffer.readableBytesView)
    for split in stride(from: 0, through: bytes.count, by: 13) {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FeedbackTupleDecoder()))
        try channel.writeInbound(ByteBuffer(bytes: bytes[..<split]))
        try channel.writeInbound(ByteBuffer(bytes: bytes[split...]))
        var decoded: [FeedbackTuple] = []
        while let t = try channel.readInbound(as: FeedbackTuple.self) { decoded.append(t) }
        #expect(decoded == tuples)
        _ = try channel.finish()
    }
}

// MARK: - Malformed input

@Test func unknownCommandIsMalformedAndStopsDecoding() throws {
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(NotificationFrameDecoder()))
    var buffer = ByteBuffer(bytes: [9, 1, 2, 3])
    buffer.writeSimpleNotification(token: token32, payload: Array("{}".utf8))
    try channel.writeInbound(buffer)
    let first = try channel.readInbound(as: InboundNotification.self)
    guard case .malformed(let reason, nil) = first else {
        Issue.record("expected a malformed frame, got \(String(describing: first))")
        return
    }
    #expect(reason.contains("unknown command 9"))
    // Framing is lost: the valid frame after it is not decoded.
    #expect(try channel.readInbound(as: InboundNotification.self) == nil)
    _ = try channel.finish()
}

@Test func oversizedFrameLengthIsMalformed() throws {
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(NotificationFrameDecoder(maximumFrameLength: 1000)))
    var buffer = ByteBuffer()
    buffer.writeInteger(UInt8(2))
    buffer.writeInteger(UInt32(5000))
    try channel.writeInbound(buffer)
    let result = try channel.readInbound(as: InboundNotification.self)
    guard case .malformed(let reason, _) = result else {
        Issue.record("expected malformed, got \(String(describing: result))")
        return
    }
    #expect(reason.contains("5000"))
    _ = try channel.finish()
}

@Test(arguments: [
    // (items, expected reason fragment, identifier the error can name)
    ([UInt8]([3, 0, 4, 0, 0, 0, 9, 7, 0, 1, 0]), "unknown item id 7", UInt32?.some(9)),
    ([UInt8]([3, 0, 4, 0, 0, 0, 9, 3, 0, 4, 0, 0, 0, 9]), "appears twice", UInt32?.some(9)),
    ([UInt8]([3, 0, 2, 0, 9]), "identifier item is 2 bytes", UInt32?.none),
    ([UInt8]([3, 0, 4, 0, 0, 0, 1, 5, 0, 2, 10, 10]), "priority item is 2 bytes", UInt32?.some(1)),
    ([UInt8]([3, 0, 4, 0, 0, 0, 1, 4, 0, 3, 0, 0, 0]), "expiration item is 3 bytes", UInt32?.some(1)),
    ([UInt8]([3, 0, 4, 0, 0, 0, 1, 2, 0, 50, 1]), "overruns", UInt32?.some(1)),
])
func malformedItemsAreReportedWithTheIdentifierWhenKnown(items: [UInt8], reason: String, identifier: UInt32?) throws {
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(NotificationFrameDecoder()))
    var buffer = ByteBuffer()
    buffer.writeInteger(UInt8(2))
    buffer.writeInteger(UInt32(items.count))
    buffer.writeBytes(items)
    try channel.writeInbound(buffer)
    let result = try channel.readInbound(as: InboundNotification.self)
    guard case .malformed(let got, let id) = result else {
        Issue.record("expected malformed, got \(String(describing: result))")
        return
    }
    #expect(got.contains(reason))
    #expect(id == identifier)
    _ = try channel.finish()
}

@Test func errorResponseDecoderRejectsOtherCommands() throws {
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(ErrorResponseDecoder()))
    #expect(throws: APNSError.self) {
        try channel.writeInbound(ByteBuffer(bytes: [7, 8, 0, 0, 0, 1]))
    }
    _ = try? channel.finish()
}

@Test func feedbackDecoderRejectsAnEmptyToken() throws {
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(FeedbackTupleDecoder()))
    #expect(throws: APNSError.self) {
        try channel.writeInbound(ByteBuffer(bytes: [0, 0, 0, 1, 0, 0]))
    }
    _ = try? channel.finish()
}

@Test func partialFrameAtEndOfStreamIsDropped() throws {
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(NotificationFrameDecoder()))
    var buffer = ByteBuffer()
    buffer.writeFramedNotification(token: token32, payload: Array("{}".utf8), identifier: 1, expiry: 0, priority: 10)
    try channel.writeInbound(buffer.getSlice(at: 0, length: buffer.readableBytes - 3)!)
    #expect(try channel.readInbound(as: InboundNotification.self) == nil)
    // Closing with a partial frame buffered is not an error; the fragment is dropped.
    _ = try? channel.finish()
}
