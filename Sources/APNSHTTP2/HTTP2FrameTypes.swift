import NIOCore
import NIOHPACK
import NIOHTTP2

/// The type octet of a frame header (RFC 9113 §4.1, the frame definitions of §6).
/// "Implementations MUST ignore and discard frames of unknown types" (§4.1): an octet without
/// a case here is such a type.
package enum HTTP2FrameType: UInt8, Sendable {
    case data = 0x0  // §6.1
    case headers = 0x1  // §6.2
    case priority = 0x2  // §6.3, deprecated and ignored
    case rstStream = 0x3  // §6.4
    case settings = 0x4  // §6.5
    case pushPromise = 0x5  // §6.6
    case ping = 0x6  // §6.7
    case goAway = 0x7  // §6.8
    case windowUpdate = 0x8  // §6.9
    case continuation = 0x9  // §6.10
}

/// The flags octet of a frame header (RFC 9113 §4.1). Each frame type gives the bits its own
/// meaning, so `ack` and `endStream` are the same bit.
package struct HTTP2FrameFlags: OptionSet, Hashable, Sendable {
    package var rawValue: UInt8

    package init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// DATA, HEADERS: the last frame the endpoint sends on the stream (§6.1, §6.2).
    package static let endStream = HTTP2FrameFlags(rawValue: 0x01)
    /// SETTINGS, PING: the frame acknowledges one the peer sent (§6.5, §6.7).
    package static let ack = HTTP2FrameFlags(rawValue: 0x01)
    /// HEADERS, CONTINUATION: the header block ends with this frame (§6.2, §6.10).
    package static let endHeaders = HTTP2FrameFlags(rawValue: 0x04)
    /// DATA, HEADERS: a Pad Length octet starts the payload (§6.1, §6.2).
    package static let padded = HTTP2FrameFlags(rawValue: 0x08)
    /// HEADERS: the Exclusive, Stream Dependency and Weight fields are present (§6.2).
    package static let priority = HTTP2FrameFlags(rawValue: 0x20)
}

/// The identifier of a SETTINGS parameter (RFC 9113 §6.5.2, RFC 8441 §3). "An endpoint that
/// receives a SETTINGS frame with any unknown or unsupported identifier MUST ignore that
/// setting" (§6.5.2): an identifier without a case here is such a setting.
package enum HTTP2SettingCode: UInt16, Sendable {
    case headerTableSize = 0x1
    case enablePush = 0x2
    case maxConcurrentStreams = 0x3
    case initialWindowSize = 0x4
    case maxFrameSize = 0x5
    case maxHeaderListSize = 0x6
    case enableConnectProtocol = 0x8

    /// The wire code of a parameter NIOHTTP2 names; 0 (reserved) for the others.
    package static func code(of parameter: HTTP2SettingsParameter) -> UInt16 {
        let known: [(HTTP2SettingsParameter, HTTP2SettingCode)] = [
            (.headerTableSize, .headerTableSize), (.enablePush, .enablePush),
            (.maxConcurrentStreams, .maxConcurrentStreams),
            (.initialWindowSize, .initialWindowSize), (.maxFrameSize, .maxFrameSize),
            (.maxHeaderListSize, .maxHeaderListSize),
            (.enableConnectProtocol, .enableConnectProtocol),
        ]
        return known.first { $0.0 == parameter }?.1.rawValue ?? 0
    }
}

/// What RFC 9113 fixes for every connection.
package enum HTTP2Protocol {
    /// "the connection preface starts with the string PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" (§3.4).
    package static let clientPreface: StaticString = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    package static let clientPrefaceLength = 24
    /// "All frames begin with a fixed 9-octet header" (§4.1).
    package static let frameHeaderLength = 9
    /// The initial SETTINGS_MAX_FRAME_SIZE, the largest payload before the peer allows more (§6.5.2).
    package static let defaultMaxFrameSize = 16_384
    /// The initial SETTINGS_INITIAL_WINDOW_SIZE, and the connection's first window (§6.9.2).
    package static let defaultWindow = 65_535
}

/// A connection error (RFC 9113 §5.4.1): "An endpoint that encounters a connection error SHOULD
/// first send a GOAWAY frame" with `code`, then close the connection; `description` says what
/// went wrong, for logs.
package struct HTTP2ProtocolError: Error, CustomStringConvertible {
    package let code: HTTP2ErrorCode
    package let description: String

    package init(code: HTTP2ErrorCode, description: String) {
        (self.code, self.description) = (code, description)
    }
}

extension ByteBuffer {
    /// Writes a frame header (RFC 9113 §4.1): 24-bit length, type, flags, and a stream
    /// identifier whose reserved bit is unset.
    package mutating func writeHTTP2FrameHeader(
        length: Int,
        type: HTTP2FrameType,
        flags: HTTP2FrameFlags = [],
        streamID: Int32
    ) {
        // Nine bytes in two writes (each write checks the buffer's capacity and uniqueness):
        // length, type, flags and the stream's first three bytes, then its last.
        let stream = UInt64(UInt32(bitPattern: streamID) & 0x7FFF_FFFF)
        let head =
            UInt64(truncatingIfNeeded: length & 0xFF_FFFF) << 40 | UInt64(type.rawValue) << 32 | UInt64(flags.rawValue)
            << 24
            | stream >> 8
        writeInteger(head)
        writeInteger(UInt8(truncatingIfNeeded: stream))
    }
}

extension HTTP2Frame {
    /// A received HEADERS frame as the codecs pass it up.
    package static func inboundHeaders(_ streamID: Int32, _ headers: HPACKHeaders, endStream: Bool) -> HTTP2Frame {
        HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .headers(.init(headers: headers, endStream: endStream)))
    }

    /// A received DATA frame as the codecs pass it up.
    package static func inboundData(_ streamID: Int32, _ body: ByteBuffer, endStream: Bool) -> HTTP2Frame {
        HTTP2Frame(
            streamID: HTTP2StreamID(streamID),
            payload: .data(.init(data: .byteBuffer(body), endStream: endStream))
        )
    }
}

/// What the frame layer's two roles share (the client's ``HTTP2FrameCodec`` and the simulator's
/// server codec): frames pass up as ``HTTP2Frame``s, bytes go down from one ``HTTP2FrameWriter``.
package protocol HTTP2FrameCodecRole: ChannelDuplexHandler
where InboundOut == HTTP2Frame, OutboundOut == ByteBuffer {
    var writer: HTTP2FrameWriter { get set }
}

extension HTTP2FrameCodecRole {
    /// Passes a received frame to the handler above.
    package func fire(_ context: ChannelHandlerContext, _ frame: HTTP2Frame) {
        context.fireChannelRead(wrapInboundOut(frame))
    }

    /// Writes what the writer holds, as one buffer with one promise, and flushes. The write is
    /// made after the writer is left: its promise may complete at once, into a handler that
    /// writes again.
    package func flushPending(context: ChannelHandlerContext) {
        if case let (bytes, promise)? = writer.takeUnflushed(eventLoop: context.eventLoop) {
            context.write(wrapOutboundOut(bytes), promise: promise)
        }
        context.flush()
    }
}
