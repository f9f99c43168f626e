import NIOCore
import NIOHPACK
import NIOHTTP2

/// A frame ``HTTP2FrameReader`` has checked and taken apart. Header blocks arrive decoded,
/// however many CONTINUATION frames they took; PRIORITY and unknown frame types do not arrive.
package enum HTTP2InboundFrame: Equatable {
    /// `flowControlled` counts the whole payload, padding included (RFC 9113 §6.1).
    case data(streamID: Int32, body: ByteBuffer, flowControlled: Int, endStream: Bool)
    case headers(streamID: Int32, headers: HPACKHeaders, endStream: Bool)
    case rstStream(streamID: Int32, code: HTTP2ErrorCode)
    /// The parameters, not yet applied (see ``HTTP2FrameWriter/receive(_:)``).
    case settings(ByteBuffer)
    case settingsAcknowledged
    case ping(UInt64, ack: Bool)
    case goAway(lastStreamID: Int32, code: HTTP2ErrorCode, opaqueData: ByteBuffer?)
    case windowUpdate(streamID: Int32, increment: Int)
}

/// The receiving half of the frame layer both roles share: it cuts a connection's bytes into
/// frames (RFC 9113 §4.1), checks what RFC 9113 asks of each frame on its own, removes padding,
/// puts header blocks together from HEADERS and CONTINUATION (§4.3) and decodes them.
///
/// It never consumes half a frame: bytes wait in its buffer until the frame they start is
/// complete. What a frame means for streams and windows is the codec's business. The reader
/// never calls out, so a codec may pass each frame on before reading the next.
package struct HTTP2FrameReader {
    private var inbound: ByteBuffer?
    private var decoder: HPACKDecoder
    /// A header block being continued: its stream, END_STREAM and the fragments so far.
    private var continuing: (streamID: Int32, endStream: Bool, block: ByteBuffer)?
    private var awaitingPreface: Bool
    /// Who sends what this reader reads, for error descriptions.
    private let peer: String
    private var stopped = false

    /// `expectsPreface` for a server, which reads the client connection preface first (§3.4);
    /// the decoder's limits are the SETTINGS_HEADER_TABLE_SIZE and SETTINGS_MAX_HEADER_LIST_SIZE
    /// this side announces.
    package init(peer: String, expectsPreface: Bool, maxDynamicTableSize: Int, maxHeaderListSize: Int) {
        self.peer = peer
        self.awaitingPreface = expectsPreface
        self.decoder = HPACKDecoder(
            allocator: ByteBufferAllocator(),
            maxDynamicTableSize: maxDynamicTableSize,
            maxHeaderListSize: maxHeaderListSize
        )
    }

    /// Adds bytes read from the connection.
    package mutating func append(_ bytes: ByteBuffer) {
        if stopped { return }
        if inbound == nil || inbound!.readableBytes == 0 {
            inbound = bytes
        } else {
            var bytes = bytes
            inbound!.writeBuffer(&bytes)
        }
    }

    /// After a connection error: the rest of the connection's bytes are not parsed (they may
    /// start in the middle of a frame).
    package mutating func stop() {
        stopped = true
        inbound = nil
    }

    /// The next complete frame in the buffer that a codec has to see, or `nil` until more
    /// bytes arrive (what is left then is the start of a frame still to come).
    package mutating func nextFrame() throws(HTTP2ProtocolError) -> HTTP2InboundFrame? {
        if stopped { return nil }
        if awaitingPreface {
            guard (inbound?.readableBytes ?? 0) >= HTTP2Protocol.clientPrefaceLength else { return nil }
            // "The client connection preface starts with a sequence of 24 octets"; "clients and
            // servers MUST treat an invalid connection preface as a connection error" (§3.4).
            guard
                inbound!.readString(length: HTTP2Protocol.clientPrefaceLength)
                    == HTTP2Protocol.clientPreface.description
            else {
                throw HTTP2ProtocolError(
                    code: .protocolError,
                    description: "the connection did not start with the HTTP/2 client preface"
                )
            }
            awaitingPreface = false
        }
        while let (type, flags, streamID, payload) = try cutFrame() {
            if let frame = try take(type: type, flags: flags, streamID: streamID, payload: payload) { return frame }
        }
        if inbound?.readableBytes == 0 { inbound = nil } else { inbound?.discardReadBytes() }
        return nil
    }

    /// The next complete frame in `inbound`, if there is one.
    private mutating func cutFrame() throws(HTTP2ProtocolError) -> (
        HTTP2FrameType?, HTTP2FrameFlags, Int32, ByteBuffer
    )? {
        guard var buffer = inbound, buffer.readableBytes >= HTTP2Protocol.frameHeaderLength else { return nil }
        let start = buffer.readerIndex
        let length =
            Int(buffer.getInteger(at: start, as: UInt8.self)!) << 16
            | Int(buffer.getInteger(at: start + 1, as: UInt16.self)!)
        // "An endpoint MUST send an error code of FRAME_SIZE_ERROR if a frame exceeds the size
        // defined in SETTINGS_MAX_FRAME_SIZE" (§4.2); this side never raises it.
        guard length <= HTTP2Protocol.defaultMaxFrameSize else {
            throw HTTP2ProtocolError(
                code: .frameSizeError,
                description:
                    "the \(peer) sent a frame of \(length) bytes, over the \(HTTP2Protocol.defaultMaxFrameSize)-byte maximum"
            )
        }
        guard buffer.readableBytes >= HTTP2Protocol.frameHeaderLength + length else { return nil }
        let type = HTTP2FrameType(rawValue: buffer.getInteger(at: start + 3, as: UInt8.self)!)  // nil: unknown
        let flags = HTTP2FrameFlags(rawValue: buffer.getInteger(at: start + 4, as: UInt8.self)!)
        // "The semantics of this bit are undefined, and the bit MUST remain unset (0x00) when
        // sending and MUST be ignored when receiving" (§4.1).
        let streamID = Int32(bitPattern: buffer.getInteger(at: start + 5, as: UInt32.self)! & 0x7FFF_FFFF)
        let payload = buffer.getSlice(at: start + HTTP2Protocol.frameHeaderLength, length: length)!
        buffer.moveReaderIndex(forwardBy: HTTP2Protocol.frameHeaderLength + length)
        inbound = buffer
        return (type, flags, streamID, payload)
    }

    /// The frame for the codec, or `nil` for one it does not see (part of a header block,
    /// PRIORITY, an unknown type).
    private mutating func take(
        type: HTTP2FrameType?,
        flags: HTTP2FrameFlags,
        streamID: Int32,
        payload: ByteBuffer
    ) throws(HTTP2ProtocolError) -> HTTP2InboundFrame? {
        // "A receiver MUST treat the receipt of any other type of frame or a frame on a
        // different stream as a connection error of type PROTOCOL_ERROR" (§6.10).
        if let continuing, type != .continuation || streamID != continuing.streamID {
            throw HTTP2ProtocolError(
                code: .protocolError,
                description: "a header block on stream \(continuing.streamID) was interrupted by another frame"
            )
        }
        var payload = payload
        switch type {
        case .data?:
            // "If a DATA frame is received whose Stream Identifier field is 0x00, the recipient
            // MUST respond with a connection error of type PROTOCOL_ERROR" (§6.1).
            guard streamID != 0 else { throw HTTP2ProtocolError(code: .protocolError, description: "DATA on stream 0") }
            let flowControlled = payload.readableBytes
            let body = try Self.unpadded(&payload, flags: flags)
            return .data(
                streamID: streamID,
                body: body,
                flowControlled: flowControlled,
                endStream: flags.contains(.endStream)
            )
        case .headers?:
            // "If a HEADERS frame is received whose Stream Identifier field is 0x00, the recipient
            // MUST respond with a connection error of type PROTOCOL_ERROR" (§6.2).
            guard streamID != 0 else {
                throw HTTP2ProtocolError(code: .protocolError, description: "HEADERS on stream 0")
            }
            var fragment = try Self.unpadded(&payload, flags: flags)
            if flags.contains(.priority) {
                // Exclusive, Stream Dependency (4 octets) and Weight (1 octet), ignored (§5.3.2).
                guard fragment.readableBytes >= 5 else {
                    throw HTTP2ProtocolError(
                        code: .frameSizeError,
                        description: "a HEADERS frame too short for its priority"
                    )
                }
                fragment.moveReaderIndex(forwardBy: 5)
            }
            guard flags.contains(.endHeaders) else {
                continuing = (streamID, flags.contains(.endStream), fragment)
                return nil
            }
            return .headers(streamID: streamID, headers: try decode(fragment), endStream: flags.contains(.endStream))
        case .continuation?:
            // "A CONTINUATION frame MUST be preceded by a HEADERS, PUSH_PROMISE or CONTINUATION
            // frame without the END_HEADERS flag set" (§6.10).
            guard var current = continuing, current.streamID == streamID else {
                throw HTTP2ProtocolError(
                    code: .protocolError,
                    description: "CONTINUATION without a header block to continue"
                )
            }
            continuing = nil
            current.block.writeBuffer(&payload)
            guard current.block.readableBytes <= 64 << 10 else {
                throw HTTP2ProtocolError(code: .enhanceYourCalm, description: "a header block over 64 KiB")
            }
            guard flags.contains(.endHeaders) else {
                continuing = current
                return nil
            }
            return .headers(streamID: streamID, headers: try decode(current.block), endStream: current.endStream)
        case .rstStream?:
            // "A RST_STREAM frame with a length other than 4 octets MUST be treated as a
            // connection error of type FRAME_SIZE_ERROR" (§6.4).
            guard payload.readableBytes == 4, let code = payload.readInteger(as: UInt32.self) else {
                throw HTTP2ProtocolError(
                    code: .frameSizeError,
                    description: "RST_STREAM of \(payload.readableBytes) bytes"
                )
            }
            return .rstStream(streamID: streamID, code: HTTP2ErrorCode(networkCode: Int(code)))
        case .settings?:
            // "If an endpoint receives a SETTINGS frame whose Stream Identifier field is anything
            // other than 0x00, the endpoint MUST respond with a connection error" (§6.5).
            guard streamID == 0 else {
                throw HTTP2ProtocolError(code: .protocolError, description: "SETTINGS on stream \(streamID)")
            }
            if flags.contains(.ack) { return .settingsAcknowledged }
            // "A SETTINGS frame with a length other than a multiple of 6 octets MUST be treated
            // as a connection error of type FRAME_SIZE_ERROR" (§6.5).
            guard payload.readableBytes % 6 == 0 else {
                throw HTTP2ProtocolError(
                    code: .frameSizeError,
                    description: "SETTINGS of \(payload.readableBytes) bytes"
                )
            }
            return .settings(payload)
        case .ping?:
            // "PING frames are not associated with any individual stream"; "Receipt of a PING
            // frame with a length field value other than 8 MUST be treated as a connection
            // error" (§6.7). Both are answered with PROTOCOL_ERROR.
            guard streamID == 0, payload.readableBytes == 8 else {
                throw HTTP2ProtocolError(code: .protocolError, description: "a malformed PING")
            }
            return .ping(payload.readInteger(as: UInt64.self)!, ack: flags.contains(.ack))
        case .goAway?:
            // "The GOAWAY frame applies to the connection, not a specific stream" (§6.8); its
            // Last-Stream-ID and Error Code take 8 octets, debug data may follow.
            guard streamID == 0, payload.readableBytes >= 8 else {
                throw HTTP2ProtocolError(code: .protocolError, description: "a malformed GOAWAY")
            }
            let last = Int32(bitPattern: payload.readInteger(as: UInt32.self)! & 0x7FFF_FFFF)
            let code = HTTP2ErrorCode(networkCode: Int(payload.readInteger(as: UInt32.self)!))
            return .goAway(lastStreamID: last, code: code, opaqueData: payload.readableBytes > 0 ? payload : nil)
        case .windowUpdate?:
            // "A WINDOW_UPDATE frame with a length other than 4 octets MUST be treated as a
            // connection error of type FRAME_SIZE_ERROR" (§6.9).
            guard payload.readableBytes == 4 else {
                throw HTTP2ProtocolError(
                    code: .frameSizeError,
                    description: "WINDOW_UPDATE of \(payload.readableBytes) bytes"
                )
            }
            let increment = Int(payload.readInteger(as: UInt32.self)! & 0x7FFF_FFFF)
            // "Errors on the connection flow-control window MUST be treated as a connection
            // error" for "a flow-control window increment of 0" (§6.9).
            guard streamID != 0 || increment > 0 else {
                throw HTTP2ProtocolError(code: .protocolError, description: "a connection WINDOW_UPDATE of 0")
            }
            return .windowUpdate(streamID: streamID, increment: increment)
        case .pushPromise?:
            // "A client cannot push"; a server with SETTINGS_ENABLE_PUSH 0 received from its
            // client does not either, and "MUST treat the receipt of a PUSH_PROMISE frame as a
            // connection error of type PROTOCOL_ERROR" (§6.6, §8.4).
            throw HTTP2ProtocolError(code: .protocolError, description: "PUSH_PROMISE although push is disabled")
        case .priority?, nil:
            // PRIORITY is deprecated and unknown types "MUST be ignored" (§4.1, §5.5, §6.3).
            return nil
        }
    }

    private mutating func decode(_ block: ByteBuffer) throws(HTTP2ProtocolError) -> HPACKHeaders {
        var block = block
        do { return try decoder.decodeHeaders(from: &block) } catch {
            // "A decoding error in a field block MUST be treated as a connection error of type
            // COMPRESSION_ERROR" (§4.3).
            throw HTTP2ProtocolError(code: .compressionError, description: "cannot decode a header block: \(error)")
        }
    }

    /// The payload without its Pad Length octet and padding (§6.1, §6.2).
    private static func unpadded(
        _ payload: inout ByteBuffer,
        flags: HTTP2FrameFlags
    ) throws(HTTP2ProtocolError) -> ByteBuffer {
        guard flags.contains(.padded) else { return payload }
        // "If the length of the padding is the length of the frame payload or greater, the
        // recipient MUST treat this as a connection error of type PROTOCOL_ERROR" (§6.1).
        guard let padding = payload.readInteger(as: UInt8.self), Int(padding) <= payload.readableBytes else {
            throw HTTP2ProtocolError(code: .protocolError, description: "padding longer than its frame")
        }
        return payload.getSlice(at: payload.readerIndex, length: payload.readableBytes - Int(padding))!
    }
}
