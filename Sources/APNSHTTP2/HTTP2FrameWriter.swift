import NIOCore
import NIOHTTP2

/// The sending half of the frame layer both roles share: it encodes frames into the buffer the
/// next flush sends (so TLS seals them in as few records as possible), keeps the send side of
/// flow control (RFC 9113 §6.9) with DATA that does not fit waiting in order, and applies the
/// peer's SETTINGS that concern sending.
///
/// It never calls out: no promise is completed and nothing is written to a channel from inside
/// it. A codec takes what is ready with ``takeUnflushed(eventLoop:)`` and completes promises
/// itself, so a handler that writes again from a callback finds the writer free.
package struct HTTP2FrameWriter {
    var encoder = HPACKRequestEncoder()
    private let allocator = ByteBufferAllocator()

    /// Frames written since the last flush, and the promises of the writes they came from.
    private var pending: ByteBuffer?
    private var pendingPromises: [EventLoopPromise<Void>] = []
    /// Answers to the frames of a read (acknowledgements, WINDOW_UPDATE, refused streams),
    /// added to `pending` when the read is done.
    private var replies: ByteBuffer?

    // The peer's settings.
    private var peerMaxFrameSize = HTTP2Protocol.defaultMaxFrameSize
    private var peerInitialWindow = HTTP2Protocol.defaultWindow

    // Sending: the connection window and what waits for it (in order).
    private var sendWindow = HTTP2Protocol.defaultWindow
    /// Per-stream send windows, only for streams whose window differs from the initial one.
    private var streamWindowAdjustments: [Int32: Int] = [:]
    private var blocked: [(streamID: Int32, body: ByteBuffer, endStream: Bool)] = []
    private var blockedStart = 0

    package init() {}

    // MARK: Frames to send

    /// Adds `frame` to what the next flush sends. The answer is `nil` when the promise was
    /// kept to complete with that flush; otherwise the caller completes it with the result:
    /// at once for DATA that waits for a window (it is the frame layer's to send now), and with
    /// an error for a frame it does not send.
    package mutating func write(
        _ frame: HTTP2Frame,
        promise: EventLoopPromise<Void>?
    ) -> Result<Void, HTTP2ProtocolError>? {
        let streamID = Int32(frame.streamID)
        var buffer = pending ?? allocator.buffer(capacity: 16 << 10)
        pending = nil
        defer { pending = buffer }
        switch frame.payload {
        case .headers(let headers):
            writeHeaderBlock(streamID: streamID, endStream: headers.endStream, into: &buffer) { encoder, buffer in
                encoder.writeHeaders(headers.headers, into: &buffer)
            }
        case .data(let data):
            guard case .byteBuffer(let body) = data.data else {
                return .failure(HTTP2ProtocolError(code: .internalError, description: "file regions are not sent"))
            }
            if blockedStart < blocked.count || !fits(body.readableBytes, streamID: streamID) {
                // What fits goes now; the rest waits for WINDOW_UPDATE, in order.
                blocked.append((streamID, body, data.endStream))
                sendWhatFits(into: &buffer)
                return .success(())
            }
            writeData(body, streamID: streamID, endStream: data.endStream, into: &buffer)
        case .ping(let ping, let ack):
            buffer.writeHTTP2FrameHeader(length: 8, type: .ping, flags: ack ? .ack : [], streamID: 0)
            _ = withUnsafeBytes(of: ping.bytes) { buffer.writeBytes($0) }
        case .rstStream(let code):
            buffer.writeHTTP2FrameHeader(length: 4, type: .rstStream, streamID: streamID)
            buffer.writeInteger(UInt32(code.networkCode))
        case .goAway(let last, let code, let opaque):
            buffer.writeHTTP2FrameHeader(length: 8 + (opaque?.readableBytes ?? 0), type: .goAway, streamID: 0)
            buffer.writeInteger(UInt32(Int32(last)))
            buffer.writeInteger(UInt32(code.networkCode))
            if let opaque { buffer.writeImmutableBuffer(opaque) }
        case .settings(.settings(let settings)):
            buffer.writeHTTP2FrameHeader(length: 6 * settings.count, type: .settings, streamID: 0)
            for setting in settings {
                buffer.writeInteger(HTTP2SettingCode.code(of: setting.parameter))
                buffer.writeInteger(UInt32(setting.value))
            }
        case .windowUpdate(let increment):
            buffer.writeHTTP2FrameHeader(length: 4, type: .windowUpdate, streamID: streamID)
            buffer.writeInteger(UInt32(increment))
        default:
            return .failure(
                HTTP2ProtocolError(
                    code: .internalError,
                    description: "the frame layer does not send \(frame.payload) frames"
                )
            )
        }
        if let promise { pendingPromises.append(promise) }
        return nil
    }

    /// Adds frames already encoded to what the next flush sends.
    package mutating func append(_ bytes: ByteBuffer) {
        if pending == nil {
            pending = bytes
        } else {
            var bytes = bytes
            pending!.writeBuffer(&bytes)
        }
    }

    /// Writes one request as HEADERS and DATA with END_STREAM, straight into what the next
    /// flush sends, without a header list or a frame value in between.
    mutating func writeRequest(_ request: QueuedRequest, streamID: Int32, authority: String, authorization: String?) {
        var buffer = pending ?? allocator.buffer(capacity: 16 << 10)
        pending = nil
        defer { pending = buffer }
        writeHeaderBlock(streamID: streamID, endStream: false, into: &buffer) { encoder, buffer in
            encoder.writeRequest(request, authority: authority, authorization: authorization, into: &buffer)
        }
        let count = request.body.count
        if blockedStart == blocked.count && fits(count, streamID: streamID) && count <= peerMaxFrameSize {
            sendWindow -= count
            buffer.writeHTTP2FrameHeader(length: count, type: .data, flags: .endStream, streamID: streamID)
            buffer.writeBytes(request.body)
        } else {
            blocked.append((streamID, allocator.buffer(bytes: request.body), true))
            sendWhatFits(into: &buffer)
        }
    }

    /// What the next flush sends, and one promise for the writes it carries; `nil` when
    /// nothing waits.
    package mutating func takeUnflushed(eventLoop: any EventLoop) -> (ByteBuffer, EventLoopPromise<Void>?)? {
        guard let buffer = pending, buffer.readableBytes > 0 else { return nil }
        pending = nil
        guard !pendingPromises.isEmpty else { return (buffer, nil) }
        let promises = pendingPromises
        pendingPromises.removeAll()
        let combined = eventLoop.makePromise(of: Void.self)
        combined.futureResult.whenComplete { result in
            for p in promises { p.completeWith(result) }
        }
        return (buffer, combined)
    }

    /// Forgets what was never flushed (the connection is gone) and returns the promises to fail.
    package mutating func dropUnflushed() -> [EventLoopPromise<Void>] {
        let promises = pendingPromises
        pendingPromises.removeAll()
        pending = nil
        return promises
    }

    // MARK: Replies to what was read

    /// Adds the replies of a read to what the next flush sends; false when there are none.
    package mutating func queueReplies() -> Bool {
        guard let bytes = replies else { return false }
        replies = nil
        append(bytes)
        return true
    }

    /// After a connection error: the replies of the read are not sent.
    package mutating func dropReplies() {
        replies = nil
    }

    package mutating func replyWindowUpdate(streamID: Int32, increment: Int) {
        var reply = replies ?? allocator.buffer(capacity: 64)
        reply.writeHTTP2FrameHeader(length: 4, type: .windowUpdate, streamID: streamID)
        reply.writeInteger(UInt32(increment))
        replies = reply
    }

    package mutating func replyReset(streamID: Int32, code: HTTP2ErrorCode) {
        var reply = replies ?? allocator.buffer(capacity: 64)
        reply.writeHTTP2FrameHeader(length: 4, type: .rstStream, streamID: streamID)
        reply.writeInteger(UInt32(code.networkCode))
        replies = reply
    }

    /// "Receivers of a PING frame that does not include an ACK flag MUST send a PING frame
    /// with the ACK flag set in response, with an identical frame payload" (§6.7).
    private mutating func replyPing(_ opaque: UInt64) {
        var reply = replies ?? allocator.buffer(capacity: 64)
        reply.writeHTTP2FrameHeader(length: 8, type: .ping, flags: .ack, streamID: 0)
        reply.writeInteger(opaque)
        replies = reply
    }

    // MARK: What the peer sent

    /// Handles the frames that concern the connection rather than a stream, alike for both
    /// roles: SETTINGS are applied and acknowledged, PING answered, WINDOW_UPDATE opens a send
    /// window. The answer is the frame to pass on to the handler above, if any, and whether
    /// waiting DATA may fit now (``sendWaitingData()``, after passing the frame on). Stream
    /// frames are the codec's and are left alone.
    package mutating func receive(
        _ frame: HTTP2InboundFrame
    ) throws(HTTP2ProtocolError) -> (passOn: HTTP2Frame?, sendWaitingData: Bool) {
        switch frame {
        case .settings(let payload):
            let settings = try receiveSettings(payload)
            return (HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(settings))), true)
        case .ping(let opaque, ack: true):
            return (
                HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: opaque), ack: true)), false
            )
        case .ping(let opaque, ack: false):
            replyPing(opaque)
        case .goAway(let last, let code, let opaque):
            let goAway = HTTP2Frame.FramePayload.goAway(
                lastStreamID: HTTP2StreamID(last),
                errorCode: code,
                opaqueData: opaque
            )
            return (HTTP2Frame(streamID: .rootStream, payload: goAway), false)
        case .windowUpdate(let streamID, let increment):
            try receiveWindowUpdate(streamID: streamID, increment: increment)
            return (nil, true)
        case .data, .headers, .rstStream, .settingsAcknowledged:
            break
        }
        return (nil, false)
    }

    /// Applies the peer's SETTINGS that concern sending and acknowledges them: "Upon receiving
    /// a SETTINGS frame ... the recipient MUST immediately emit a SETTINGS frame with the ACK
    /// flag set" (§6.5.3). Returns every parameter, as NIOHTTP2 names it.
    private mutating func receiveSettings(_ payload: ByteBuffer) throws(HTTP2ProtocolError) -> [HTTP2Setting] {
        var payload = payload
        var settings: [HTTP2Setting] = []
        while let parameter = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            if let code = HTTP2SettingCode(rawValue: parameter) { try apply(code, value: value) }
            settings.append(
                HTTP2Setting(parameter: HTTP2SettingsParameter(extensionSetting: Int(parameter)), value: Int(value))
            )
        }
        var reply = replies ?? allocator.buffer(capacity: 64)
        reply.writeHTTP2FrameHeader(length: 0, type: .settings, flags: .ack, streamID: 0)
        replies = reply
        return settings
    }

    private mutating func apply(_ parameter: HTTP2SettingCode, value: UInt32) throws(HTTP2ProtocolError) {
        switch parameter {
        case .headerTableSize:
            // The most the peer's decoder keeps: the encoder's table stays within it (RFC 7541 §4.2).
            encoder.setMaxTableSize(Int(value))
        case .initialWindowSize:
            // "Values above the maximum flow-control window size of 2^31-1 MUST be treated as a
            // connection error of type FLOW_CONTROL_ERROR" (§6.5.2). It applies to every stream.
            guard value <= UInt32(Int32.max) else {
                throw HTTP2ProtocolError(code: .flowControlError, description: "an initial window of \(value)")
            }
            peerInitialWindow = Int(value)
        case .maxFrameSize:
            // "Values outside this range MUST be treated as a connection error of type
            // PROTOCOL_ERROR" (§6.5.2): 2^14 to 2^24-1.
            guard (16_384...16_777_215).contains(value) else {
                throw HTTP2ProtocolError(code: .protocolError, description: "a maximum frame size of \(value)")
            }
            peerMaxFrameSize = Int(value)
        default:
            break
        }
    }

    /// Opens a send window. Only a stream whose DATA waits has a window that still matters:
    /// every other stream sent its DATA with END_STREAM already.
    private mutating func receiveWindowUpdate(streamID: Int32, increment: Int) throws(HTTP2ProtocolError) {
        if streamID == 0 {
            sendWindow += increment
            // "A sender MUST NOT allow a flow-control window to exceed 2^31-1 octets. If a sender
            // receives a WINDOW_UPDATE that causes a flow-control window to exceed this maximum,
            // it MUST terminate either the stream or the connection" (§6.9.1).
            guard sendWindow <= Int(Int32.max) else {
                throw HTTP2ProtocolError(code: .flowControlError, description: "the connection window overflowed")
            }
        } else if blocked[blockedStart...].contains(where: { $0.streamID == streamID }) {
            streamWindowAdjustments[streamID, default: 0] += increment
        }
    }

    /// The peer reset the stream: its send window is forgotten.
    package mutating func streamReset(_ streamID: Int32) {
        streamWindowAdjustments[streamID] = nil
    }

    /// Writes the waiting DATA that now fits; false when none waits.
    package mutating func sendWaitingData() -> Bool {
        guard blockedStart < blocked.count else { return false }
        var buffer = pending ?? allocator.buffer(capacity: 4096)
        pending = nil
        sendWhatFits(into: &buffer)
        pending = buffer
        return true
    }

    // MARK: Encoding

    /// A header block encoded in place after a frame header whose length is filled in
    /// afterwards; a block longer than the peer's frame size moves on to CONTINUATION frames (§4.3).
    private mutating func writeHeaderBlock(
        streamID: Int32,
        endStream: Bool,
        into buffer: inout ByteBuffer,
        encode: (inout HPACKRequestEncoder, inout ByteBuffer) -> Void
    ) {
        let headerStart = buffer.writerIndex
        let flags: HTTP2FrameFlags = endStream ? [.endHeaders, .endStream] : .endHeaders
        buffer.writeHTTP2FrameHeader(length: 0, type: .headers, flags: flags, streamID: streamID)
        let blockStart = buffer.writerIndex
        encode(&encoder, &buffer)
        let length = buffer.writerIndex - blockStart
        if length <= peerMaxFrameSize {
            buffer.setInteger(UInt8(truncatingIfNeeded: length >> 16), at: headerStart)
            buffer.setInteger(UInt16(truncatingIfNeeded: length), at: headerStart + 1)
            return
        }
        var block = buffer.getSlice(at: blockStart, length: length)!
        buffer.moveWriterIndex(to: headerStart)
        var first = true
        repeat {
            let chunk = block.readSlice(length: min(block.readableBytes, peerMaxFrameSize))!
            var flags: HTTP2FrameFlags = block.readableBytes == 0 ? .endHeaders : []
            if first && endStream { flags.insert(.endStream) }
            let type: HTTP2FrameType = first ? .headers : .continuation
            buffer.writeHTTP2FrameHeader(length: chunk.readableBytes, type: type, flags: flags, streamID: streamID)
            buffer.writeImmutableBuffer(chunk)
            first = false
        } while block.readableBytes > 0
    }

    /// Whether a DATA frame of `count` bytes fits both windows.
    private func fits(_ count: Int, streamID: Int32) -> Bool {
        count <= sendWindow && count <= peerInitialWindow + streamWindowAdjustments[streamID, default: 0]
    }

    private mutating func writeData(_ body: ByteBuffer, streamID: Int32, endStream: Bool, into buffer: inout ByteBuffer)
    {
        let count = body.readableBytes
        sendWindow -= count
        if endStream {
            streamWindowAdjustments[streamID] = nil
        } else if count > 0 {
            streamWindowAdjustments[streamID, default: 0] -= count
        }
        var body = body
        // Split at the peer's frame size (bodies are at most 5 KiB, well under 16 KiB).
        repeat {
            let chunk = body.readSlice(length: min(body.readableBytes, peerMaxFrameSize))!
            let flags: HTTP2FrameFlags = body.readableBytes == 0 && endStream ? .endStream : []
            buffer.writeHTTP2FrameHeader(length: chunk.readableBytes, type: .data, flags: flags, streamID: streamID)
            buffer.writeImmutableBuffer(chunk)
        } while body.readableBytes > 0
    }

    /// Writes waiting DATA in order, as much as the windows allow: a body larger than what is
    /// open goes in parts (§6.9), the first waiting stream holding up the others.
    private mutating func sendWhatFits(into buffer: inout ByteBuffer) {
        while blockedStart < blocked.count {
            let entry = blocked[blockedStart]
            let window = min(sendWindow, peerInitialWindow + streamWindowAdjustments[entry.streamID, default: 0])
            if entry.body.readableBytes <= window {
                blockedStart += 1
                writeData(entry.body, streamID: entry.streamID, endStream: entry.endStream, into: &buffer)
                continue
            }
            guard window > 0 else { break }
            var rest = entry.body
            let part = rest.readSlice(length: window)!
            writeData(part, streamID: entry.streamID, endStream: false, into: &buffer)
            blocked[blockedStart].body = rest
            break
        }
        if blockedStart == blocked.count {
            blocked.removeAll(keepingCapacity: true)
            blockedStart = 0
        }
    }
}
