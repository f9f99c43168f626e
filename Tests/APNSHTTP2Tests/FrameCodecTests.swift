import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Testing

@testable import APNSHTTP2

/// The client's frame layer on its own, in an `EmbeddedChannel`: what it writes for the frames
/// the connection handler hands it, and what it makes of the bytes a server sends. The rules
/// are RFC 9113's; the end-to-end behaviour is covered against the simulator and the Python
/// `h2` peer.
@Suite struct FrameCodecTests {
    struct Frame: Equatable {
        var type: UInt8
        var flags: UInt8
        var streamID: Int32
        var payload: [UInt8]
    }

    /// A connected channel with the codec, the client preface already read.
    static func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel(handler: HTTP2FrameCodec())
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        var preface = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(preface.readString(length: 24) == "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        let frames = Self.frames(in: preface)
        #expect(frames.map(\.type) == [0x4, 0x8], "SETTINGS, then a connection WINDOW_UPDATE")
        return channel
    }

    static func frames(in buffer: ByteBuffer) -> [Frame] {
        var buffer = buffer
        var out: [Frame] = []
        while buffer.readableBytes >= 9 {
            let length = Int(buffer.readInteger(as: UInt8.self)!) << 16 | Int(buffer.readInteger(as: UInt16.self)!)
            let type = buffer.readInteger(as: UInt8.self)!
            let flags = buffer.readInteger(as: UInt8.self)!
            let stream = Int32(bitPattern: buffer.readInteger(as: UInt32.self)! & 0x7FFF_FFFF)
            out.append(Frame(type: type, flags: flags, streamID: stream, payload: buffer.readBytes(length: length)!))
        }
        return out
    }

    static func written(_ channel: EmbeddedChannel) throws -> [Frame] {
        var out: [Frame] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { out += frames(in: buffer) }
        return out
    }

    static func bytes(_ frames: [Frame]) -> ByteBuffer {
        var buffer = ByteBuffer()
        for f in frames {
            buffer.writeInteger(UInt8(f.payload.count >> 16))
            buffer.writeInteger(UInt16(truncatingIfNeeded: f.payload.count))
            buffer.writeInteger(f.type)
            buffer.writeInteger(f.flags)
            buffer.writeInteger(UInt32(bitPattern: f.streamID))
            buffer.writeBytes(f.payload)
        }
        return buffer
    }

    static func settings(_ pairs: [(UInt16, UInt32)]) -> Frame {
        var payload: [UInt8] = []
        for (parameter, value) in pairs {
            payload += [UInt8(parameter >> 8), UInt8(parameter & 0xFF)]
            payload += [
                UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF),
            ]
        }
        return Frame(type: 0x4, flags: 0, streamID: 0, payload: payload)
    }

    static func windowUpdate(_ stream: Int32, _ increment: UInt32) -> Frame {
        Frame(
            type: 0x8,
            flags: 0,
            streamID: stream,
            payload: [
                UInt8(increment >> 24), UInt8((increment >> 16) & 0xFF), UInt8((increment >> 8) & 0xFF),
                UInt8(increment & 0xFF),
            ]
        )
    }

    static func request(_ channel: EmbeddedChannel, stream: Int32, body: Int) throws {
        var headers = HPACKHeaders()
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":path", value: "/3/device/abcd")
        channel.write(
            HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: headers))),
            promise: nil
        )
        let data = ByteBuffer(repeating: 0x7B, count: body)
        channel.write(
            HTTP2Frame(
                streamID: HTTP2StreamID(stream),
                payload: .data(.init(data: .byteBuffer(data), endStream: true))
            ),
            promise: nil
        )
        channel.flush()
    }

    @Test func serverSettingsAreAcknowledgedAndPassedOnAndPingsAnswered() throws {
        let channel = try Self.channel()
        try channel.writeInbound(
            Self.bytes([
                Self.settings([(3, 7)]), Frame(type: 0x6, flags: 0, streamID: 0, payload: [1, 2, 3, 4, 5, 6, 7, 8]),
            ])
        )
        let frame = try #require(try channel.readInbound(as: HTTP2Frame.self))
        guard case .settings(.settings(let settings)) = frame.payload else {
            Issue.record("got \(frame)")
            return
        }
        #expect(settings.first?.parameter == .maxConcurrentStreams && settings.first?.value == 7)
        let replies = try Self.written(channel)
        #expect(
            replies == [
                Frame(type: 0x4, flags: 0x1, streamID: 0, payload: []),
                Frame(type: 0x6, flags: 0x1, streamID: 0, payload: [1, 2, 3, 4, 5, 6, 7, 8]),
            ]
        )
    }

    @Test func requestsGoOutAsHeadersAndDataInOneWrite() throws {
        let channel = try Self.channel()
        try Self.request(channel, stream: 1, body: 100)
        let buffer = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil, "one buffer per flush")
        let frames = Self.frames(in: buffer)
        #expect(frames.map(\.type) == [0x1, 0x0])
        #expect(frames[0].flags == 0x4 && frames[1].flags == 0x1 && frames[1].payload.count == 100)
        // The header block decodes back to what was sent.
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        var block = ByteBuffer(bytes: frames[0].payload)
        let headers = try decoder.decodeHeaders(from: &block)
        #expect(headers[":path"] == ["/3/device/abcd"])
    }

    @Test func dataWaitsForTheStreamAndConnectionWindows() throws {
        let channel = try Self.channel()
        // The server allows 50 bytes per stream.
        try channel.writeInbound(Self.bytes([Self.settings([(4, 50)])]))
        _ = try channel.readInbound(as: HTTP2Frame.self)
        _ = try Self.written(channel)
        try Self.request(channel, stream: 1, body: 80)
        try Self.request(channel, stream: 3, body: 10)
        // Stream 1 sends the 50 bytes its window allows, without END_STREAM; stream 3's DATA
        // waits behind the rest.
        let first = try Self.written(channel)
        #expect(first.map(\.type) == [0x1, 0x0, 0x1])
        #expect(first[1].streamID == 1 && first[1].payload.count == 50 && first[1].flags == 0)
        try channel.writeInbound(Self.bytes([Self.windowUpdate(1, 30)]))
        let released = try Self.written(channel)
        #expect(released.map(\.streamID) == [1, 3] && released.map(\.payload.count) == [30, 10])
        #expect(released.map(\.flags) == [0x1, 0x1])
        // The connection window (65,535 - 90 left) holds a 65,445-byte body but not one more byte.
        try channel.writeInbound(Self.bytes([Self.settings([(4, 1 << 20)])]))
        _ = try channel.readInbound(as: HTTP2Frame.self)
        _ = try Self.written(channel)
        try Self.request(channel, stream: 5, body: 65_445)
        #expect(try Self.written(channel).filter { $0.type == 0x0 }.map(\.payload.count).reduce(0, +) == 65_445)
        try Self.request(channel, stream: 7, body: 1)
        #expect(try Self.written(channel).map(\.type) == [0x1])
        try channel.writeInbound(Self.bytes([Self.windowUpdate(0, 1)]))
        #expect(try Self.written(channel).map(\.type) == [0x0])
    }

    @Test func headerBlocksAcrossContinuationAndPaddedDataArrive() throws {
        let channel = try Self.channel()
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        var block = ByteBuffer()
        try encoder.encode(headers: [":status": "400", "apns-id": "01234567-89ab-4def-8000-000000000000"], to: &block)
        let bytes = block.readBytes(length: block.readableBytes)!
        let half = bytes.count / 2
        let padded: [UInt8] = [3] + Array("{\"reason\":\"BadDeviceToken\"}".utf8) + [0, 0, 0]
        try channel.writeInbound(
            Self.bytes([
                Frame(type: 0x1, flags: 0x0, streamID: 1, payload: Array(bytes[..<half])),
                Frame(type: 0x9, flags: 0x4, streamID: 1, payload: Array(bytes[half...])),
                Frame(type: 0x0, flags: 0x9, streamID: 1, payload: padded),
            ])
        )
        let headers = try #require(try channel.readInbound(as: HTTP2Frame.self))
        guard case .headers(let h) = headers.payload else {
            Issue.record("got \(headers)")
            return
        }
        #expect(h.headers[":status"] == ["400"] && !h.endStream)
        let data = try #require(try channel.readInbound(as: HTTP2Frame.self))
        guard case .data(let d) = data.payload, case .byteBuffer(let body) = d.data else {
            Issue.record("got \(data)")
            return
        }
        #expect(String(buffer: body) == "{\"reason\":\"BadDeviceToken\"}" && d.endStream)
    }

    @Test func protocolErrorsAreRaisedNotIgnored() throws {
        let channel = try Self.channel()
        // A frame on another stream in the middle of a header block.
        #expect(throws: HTTP2FrameCodec.ProtocolError.self) {
            try channel.writeInbound(
                Self.bytes([
                    Frame(type: 0x1, flags: 0x0, streamID: 1, payload: [0x88]),
                    Frame(type: 0x0, flags: 0x1, streamID: 3, payload: [1]),
                ])
            )
        }
        // What follows the error is not parsed (it may start in the middle of a frame).
        try channel.writeInbound(Self.bytes([Self.settings([(3, 5)])]))
        #expect(try channel.readInbound(as: HTTP2Frame.self) == nil)
        let other = try Self.channel()
        #expect(throws: HTTP2FrameCodec.ProtocolError.self) {
            try other.writeInbound(
                Self.bytes([Frame(type: 0x5, flags: 0x4, streamID: 1, payload: [0, 0, 0, 2, 0x88])])
            )
        }
    }
}
