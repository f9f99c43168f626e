import APNSSimulator
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Testing

@testable import APNSHTTP2

/// The simulator's server frame layer (``HTTP2ServerFrameCodec``), in an `EmbeddedChannel`: the preface,
/// the stream limit the client has acknowledged, receive windows, GOAWAY, and the events the
/// simulator's handler relies on. Header blocks are built with NIOHPACK's encoder.
@Suite struct ServerFrameCodecTests {
    typealias Frame = FrameCodecTests.Frame
    typealias F = FrameCodecTests

    /// Collects what the codec passes up: frames, user events and errors.
    final class Recorder: ChannelInboundHandler {
        typealias InboundIn = HTTP2Frame
        var frames: [HTTP2Frame] = []
        var events: [Any] = []
        var errors: [any Error] = []
        func channelRead(context: ChannelHandlerContext, data: NIOAny) { frames.append(unwrapInboundIn(data)) }
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) { events.append(event) }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { errors.append(error) }
    }

    final class GoAwayDelegate: NIOHTTP2FrameDelegate {
        var goAways: [HTTP2Frame] = []
        func wroteFrame(_ frame: HTTP2Frame) { goAways.append(frame) }
    }

    static let settings = [
        HTTP2Setting(parameter: .maxConcurrentStreams, value: 1),
        HTTP2Setting(parameter: .initialWindowSize, value: 100),
        HTTP2Setting(parameter: .maxHeaderListSize, value: 8000),
    ]

    /// A connected server channel; the server's SETTINGS are read, the client's preface and
    /// empty SETTINGS written, and (unless `acknowledge` is false) the server's SETTINGS acknowledged.
    static func server(acknowledge: Bool = true, delegate: GoAwayDelegate? = nil) throws -> (EmbeddedChannel, Recorder)
    {
        let recorder = Recorder()
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        try channel.pipeline.syncOperations.addHandler(
            HTTP2ServerFrameCodec(settings: settings, frameDelegate: delegate)
        )
        try channel.pipeline.syncOperations.addHandler(recorder)
        let first = try F.written(channel)
        #expect(first.count == 1 && first[0].type == 0x4 && first[0].flags == 0, "the server's SETTINGS come first")
        #expect(first.first?.payload == [0, 3, 0, 0, 0, 1, 0, 4, 0, 0, 0, 100, 0, 6, 0, 0, 0x1F, 0x40])
        var bytes = ByteBuffer(string: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        var settings = F.bytes(
            [F.settings([])] + (acknowledge ? [Frame(type: 0x4, flags: 0x1, streamID: 0, payload: [])] : [])
        )
        bytes.writeBuffer(&settings)
        try channel.writeInbound(bytes)
        #expect(
            try F.written(channel) == [Frame(type: 0x4, flags: 0x1, streamID: 0, payload: [])],
            "the client's SETTINGS acknowledged"
        )
        recorder.frames.removeAll()
        return (channel, recorder)
    }

    static func headers(_ stream: Int32, encoder: inout HPACKEncoder, endStream: Bool = false) throws -> Frame {
        var block = ByteBuffer()
        try encoder.encode(
            headers: [":method": "POST", ":path": "/3/device/\(stream)", "apns-topic": "com.example.app"],
            to: &block
        )
        return Frame(
            type: 0x1,
            flags: endStream ? 0x5 : 0x4,
            streamID: stream,
            payload: block.readBytes(length: block.readableBytes)!
        )
    }

    @Test func aConnectionWithoutThePrefaceGetsGoAway() throws {
        let delegate = GoAwayDelegate()
        let recorder = Recorder()
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        try channel.pipeline.syncOperations.addHandler(
            HTTP2ServerFrameCodec(settings: Self.settings, frameDelegate: delegate)
        )
        try channel.pipeline.syncOperations.addHandler(recorder)
        _ = try F.written(channel)
        try channel.writeInbound(ByteBuffer(string: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
        let written = try F.written(channel)
        #expect(written.map(\.type) == [0x7])
        #expect(written.first?.payload == [0, 0, 0, 0, 0, 0, 0, 1], "GOAWAY, last stream 0, PROTOCOL_ERROR")
        #expect(recorder.errors.count == 1 && delegate.goAways.count == 1)
    }

    @Test func streamsOverTheAcknowledgedLimitAreRefusedAndReported() throws {
        let (channel, recorder) = try Self.server()
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        try channel.writeInbound(
            F.bytes([try Self.headers(1, encoder: &encoder), try Self.headers(3, encoder: &encoder)])
        )
        // Stream 1 is open; stream 3 is one over the limit of 1.
        #expect(recorder.frames.map(\.streamID) == [HTTP2StreamID(1)])
        #expect(
            try F.written(channel) == [Frame(type: 0x3, flags: 0, streamID: 3, payload: [0, 0, 0, 7])],
            "RST_STREAM REFUSED_STREAM"
        )
        #expect(recorder.errors.count == 1 && recorder.errors.first is NIOHTTP2Errors.MaxStreamsViolation)
        // Once stream 1 is answered with END_STREAM, a new stream fits, and its block still
        // decodes: the refused stream's block went through the HPACK decoder too.
        channel.write(
            HTTP2Frame(streamID: 1, payload: .headers(.init(headers: [":status": "200"], endStream: true))),
            promise: nil
        )
        channel.flush()
        #expect(try F.written(channel).map(\.type) == [0x1])
        try channel.writeInbound(F.bytes([try Self.headers(5, encoder: &encoder, endStream: true)]))
        let frame = try #require(recorder.frames.last)
        guard case .headers(let h) = frame.payload else {
            Issue.record("got \(frame)")
            return
        }
        #expect(frame.streamID == 5 && h.headers[":path"] == ["/3/device/5"] && h.endStream)
        #expect(recorder.errors.count == 1)
    }

    @Test func untilTheClientAcknowledgesItsSettingsTheLimitIsNotApplied() throws {
        let (channel, recorder) = try Self.server(acknowledge: false)
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        try channel.writeInbound(
            F.bytes([try Self.headers(1, encoder: &encoder), try Self.headers(3, encoder: &encoder)])
        )
        #expect(recorder.frames.count == 2 && recorder.errors.isEmpty)
        // A lower limit sent later applies from its acknowledgement on.
        try channel.writeInbound(F.bytes([Frame(type: 0x4, flags: 0x1, streamID: 0, payload: [])]))
        channel.write(
            HTTP2Frame(
                streamID: .rootStream,
                payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: 3)]))
            ),
            promise: nil
        )
        channel.flush()
        #expect(try F.written(channel) == [F.settings([(3, 3)])])
        try channel.writeInbound(F.bytes([try Self.headers(5, encoder: &encoder)]))
        #expect(recorder.errors.count == 1, "the first SETTINGS (limit 1) is in force: 2 streams are open")
        try channel.writeInbound(F.bytes([Frame(type: 0x4, flags: 0x1, streamID: 0, payload: [])]))
        try channel.writeInbound(F.bytes([try Self.headers(7, encoder: &encoder)]))
        #expect(recorder.frames.last?.streamID == 7 && recorder.errors.count == 1)
    }

    @Test func receiveWindowsAreEnforcedAndReportedWhenHalfUsed() throws {
        let delegate = GoAwayDelegate()
        let (channel, recorder) = try Self.server(delegate: delegate)
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        try channel.writeInbound(F.bytes([try Self.headers(1, encoder: &encoder)]))
        // 60 of the stream's 100 bytes: the window is below half, as NIOHTTP2Handler reports.
        try channel.writeInbound(
            F.bytes([Frame(type: 0x0, flags: 0, streamID: 1, payload: Array(repeating: 1, count: 60))])
        )
        let updates = recorder.events.compactMap { $0 as? NIOHTTP2WindowUpdatedEvent }
        #expect(updates.map(\.streamID) == [1] && updates.first?.inboundWindowSize == 40)
        // Giving 60 back makes room for 100 more; 101 is one byte too many.
        channel.write(HTTP2Frame(streamID: 1, payload: .windowUpdate(windowSizeIncrement: 60)), promise: nil)
        channel.flush()
        _ = try F.written(channel)
        try channel.writeInbound(
            F.bytes([Frame(type: 0x0, flags: 0, streamID: 1, payload: Array(repeating: 1, count: 100))])
        )
        #expect(recorder.errors.isEmpty)
        try channel.writeInbound(F.bytes([Frame(type: 0x0, flags: 0, streamID: 1, payload: [1])]))
        #expect((recorder.errors.first as? HTTP2ProtocolError)?.code == .flowControlError)
        let goAway = try F.written(channel)
        #expect(
            goAway.map(\.type) == [0x7] && goAway.first?.payload == [0, 0, 0, 1, 0, 0, 0, 3],
            "GOAWAY, last stream 1, FLOW_CONTROL_ERROR"
        )
        #expect(delegate.goAways.count == 1)
    }

    @Test func aResetStreamIsReportedAndStreamsAboveAGoAwayAreRefused() throws {
        let (channel, recorder) = try Self.server()
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        try channel.writeInbound(
            F.bytes([
                try Self.headers(1, encoder: &encoder), Frame(type: 0x3, flags: 0, streamID: 1, payload: [0, 0, 0, 8]),
            ])
        )
        let closed = recorder.events.compactMap { $0 as? StreamClosedEvent }
        #expect(closed.map(\.streamID) == [1] && closed.first?.reason == .cancel)
        channel.write(
            HTTP2Frame(
                streamID: .rootStream,
                payload: .goAway(lastStreamID: 1, errorCode: .noError, opaqueData: ByteBuffer(string: "bye"))
            ),
            promise: nil
        )
        channel.flush()
        #expect(
            try F.written(channel) == [
                Frame(type: 0x7, flags: 0, streamID: 0, payload: [0, 0, 0, 1, 0, 0, 0, 0] + Array("bye".utf8))
            ]
        )
        recorder.frames.removeAll()
        try channel.writeInbound(F.bytes([try Self.headers(3, encoder: &encoder, endStream: true)]))
        #expect(recorder.frames.isEmpty && recorder.errors.isEmpty)
        #expect(
            try F.written(channel) == [Frame(type: 0x3, flags: 0, streamID: 3, payload: [0, 0, 0, 7])],
            "RST_STREAM REFUSED_STREAM"
        )
    }
}
