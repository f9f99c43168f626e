import NIOCore
import NIOHPACK
import NIOHTTP2

/// One side of an HTTP/2 connection (RFC 9113) at the frame level: bytes in, ``HTTP2Frame``
/// values out, and the reverse. As a client it sits under ``HTTP2ConnectionHandler``; as a
/// server under the simulator's connection handler (see ``Role``).
///
/// It does what a connection needs and no more: the preface, SETTINGS and their
/// acknowledgement, PING answers, HPACK (``HPACKRequestEncoder`` out, NIOHPACK's decoder in),
/// header blocks split over CONTINUATION, and flow control in both directions. As a client,
/// stream state stays with ``HTTP2ConnectionHandler``, which opens streams in order, sends
/// each request as one HEADERS and one DATA frame with END_STREAM, and matches answers.
/// `NIOHTTP2Handler` does all of this through general stream state machines and a
/// flow-control buffer that cost about as much CPU per request as everything else on either
/// side together; APNs requests need none of that generality.
///
/// Protocol errors by the peer close the connection (`errorCaught` reaches the handler,
/// which reports it and closes; a server sends GOAWAY with the error code first).
package final class HTTP2FrameCodec: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = HTTP2Frame
    package typealias OutboundIn = HTTP2Frame
    package typealias OutboundOut = ByteBuffer

    package struct ProtocolError: Error, CustomStringConvertible {
        package var code: HTTP2ErrorCode
        package var description: String
    }

    /// Which side of the connection this is.
    ///
    /// The server side is what the APNs simulator runs on. Beyond what both sides do it reads
    /// the client preface, sends its own SETTINGS first, keeps the streams the client opens
    /// within the `SETTINGS_MAX_CONCURRENT_STREAMS` the client has acknowledged (a stream
    /// over it is reset with `REFUSED_STREAM` and reported as
    /// `NIOHTTP2Errors.MaxStreamsViolation`), enforces its receive windows, refuses streams
    /// above a GOAWAY it sent, and answers a connection error with GOAWAY. It reports what
    /// `NIOHTTP2Handler` reports to the handler above it for the same events
    /// (`NIOHTTP2WindowUpdatedEvent` when a receive window is half used, `StreamClosedEvent`
    /// when the client resets a stream, the frame delegate for GOAWAY), so that handler runs
    /// on either.
    package enum Role {
        case client
        case server(settings: [HTTP2Setting], frameDelegate: (any NIOHTTP2FrameDelegate)?)
    }

    /// The settings this client announces (RFC 9113 §6.5.2).
    static let initialSettings: [(parameter: UInt16, value: UInt32)] = [
        (2, 0),  // SETTINGS_ENABLE_PUSH: no server push (§3.2)
        (3, 100),  // SETTINGS_MAX_CONCURRENT_STREAMS: the server opens none
        (4, 1 << 20),  // SETTINGS_INITIAL_WINDOW_SIZE
        (6, 16 << 10),  // SETTINGS_MAX_HEADER_LIST_SIZE
    ]
    /// The connection-level receive window this client opens right after the preface.
    static let connectionReceiveWindow = 1 << 24
    static let defaultWindow = 65_535
    static let maxFrameSize = 16_384

    private let isServer: Bool
    private var inbound: ByteBuffer?
    /// Set after a protocol error: the rest of the connection's bytes are not parsed.
    private var failed = false
    private var encoder = HPACKRequestEncoder()
    private let allocator = ByteBufferAllocator()
    private var decoder: HPACKDecoder
    /// A header block being continued: its stream, END_STREAM and the fragments so far.
    private var continuing: (streamID: Int32, endStream: Bool, block: ByteBuffer)?

    // The server's settings.
    private var peerMaxFrameSize = HTTP2FrameCodec.maxFrameSize
    private var peerInitialWindow = HTTP2FrameCodec.defaultWindow

    // Sending: the connection window and what waits for it (in order).
    private var sendWindow = HTTP2FrameCodec.defaultWindow
    /// Per-stream send windows, only for streams whose window differs from the initial one.
    private var streamWindowAdjustments: [Int32: Int] = [:]
    private var blocked: [(streamID: Int32, body: ByteBuffer, endStream: Bool)] = []
    private var blockedStart = 0

    /// Frames written since the last flush, sent as one buffer (so TLS seals them in as few
    /// records as possible), and the promises of the writes they came from.
    private var pending: ByteBuffer?
    private var pendingPromises: [EventLoopPromise<Void>] = []

    // Receiving: flow-controlled bytes not yet given back with WINDOW_UPDATE.
    private var receivedUnacknowledged = 0
    private var streamReceived: [Int32: Int] = [:]

    // The server side (see ``Role``).
    private struct ClientStream {
        var receiveWindow: Int
    }
    private var serverSettings: [HTTP2Setting] = []
    private var frameDelegate: (any NIOHTTP2FrameDelegate)?
    private var awaitingPreface = false
    private var serverStarted = false
    private var clientStreams: [Int32: ClientStream] = [:]
    private var lastClientStream: Int32 = 0
    /// The stream limit in force: unlimited until the client acknowledges a SETTINGS with one.
    private var streamLimit = Int.max
    /// Per SETTINGS frame sent and not yet acknowledged, its MAX_CONCURRENT_STREAMS if any.
    private var unacknowledgedLimits: [Int?] = []
    private var initialStreamReceiveWindow = HTTP2FrameCodec.defaultWindow
    private var connectionReceiveWindow = HTTP2FrameCodec.defaultWindow
    private var connectionReceiveTarget = HTTP2FrameCodec.defaultWindow
    private var goAwaySent: Int32?

    package init(role: Role = .client) {
        switch role {
        case .client:
            isServer = false
            decoder = HPACKDecoder(allocator: ByteBufferAllocator(), maxDynamicTableSize: HPACKDecoder.maxDynamicTableSize,
                                   maxHeaderListSize: 16 << 10)
        case .server(let settings, let frameDelegate):
            isServer = true
            serverSettings = settings
            self.frameDelegate = frameDelegate
            awaitingPreface = true
            let table = settings.last { $0.parameter == .headerTableSize }?.value ?? HPACKDecoder.maxDynamicTableSize
            let list = settings.last { $0.parameter == .maxHeaderListSize }?.value ?? 16 << 10
            initialStreamReceiveWindow = settings.last { $0.parameter == .initialWindowSize }?.value ?? Self.defaultWindow
            decoder = HPACKDecoder(allocator: ByteBufferAllocator(), maxDynamicTableSize: table, maxHeaderListSize: list)
        }
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        // A server codec is added once TLS and ALPN are done: the connection is already up.
        if isServer && context.channel.isActive { startServer(context: context) }
    }

    private func startServer(context: ChannelHandlerContext) {
        guard !serverStarted else { return }
        serverStarted = true
        var buffer = context.channel.allocator.buffer(capacity: 64)
        writeSettings(serverSettings, into: &buffer)
        append(&buffer, context: context)
        flushPending(context: context)
    }

    private func writeSettings(_ settings: [HTTP2Setting], into buffer: inout ByteBuffer) {
        Self.writeFrameHeader(&buffer, length: 6 * settings.count, type: 0x4, flags: 0, streamID: 0)
        var limit: Int?
        for setting in settings {
            buffer.writeInteger(Self.code(of: setting.parameter))
            buffer.writeInteger(UInt32(setting.value))
            if setting.parameter == .maxConcurrentStreams { limit = setting.value }
        }
        unacknowledgedLimits.append(limit)
    }

    // MARK: Connection start

    package func channelActive(context: ChannelHandlerContext) {
        if isServer {
            startServer(context: context)
            context.fireChannelActive()
            return
        }
        var buffer = context.channel.allocator.buffer(capacity: 64)
        buffer.writeStaticString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        Self.writeFrameHeader(&buffer, length: 6 * Self.initialSettings.count, type: 0x4, flags: 0, streamID: 0)
        for setting in Self.initialSettings {
            buffer.writeInteger(setting.parameter)
            buffer.writeInteger(setting.value)
        }
        Self.writeFrameHeader(&buffer, length: 4, type: 0x8, flags: 0, streamID: 0)
        buffer.writeInteger(UInt32(Self.connectionReceiveWindow - Self.defaultWindow))
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        // Writes that were never flushed will not be.
        let promises = pendingPromises
        pendingPromises.removeAll()
        pending = nil
        promises.forEach { $0.fail(ChannelError.ioOnClosedChannel) }
        context.fireChannelInactive()
    }

    // MARK: Reading

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        var bytes = unwrapInboundIn(data)
        if inbound == nil || inbound!.readableBytes == 0 {
            inbound = bytes
        } else {
            inbound!.writeBuffer(&bytes)
        }
        do {
            var replies: ByteBuffer?
            if awaitingPreface {
                guard inbound!.readableBytes >= 24 else { return }
                guard inbound!.readString(length: 24) == "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" else {
                    throw ProtocolError(code: .protocolError, description: "the connection did not start with the HTTP/2 client preface")
                }
                awaitingPreface = false
            }
            while let (type, flags, streamID, payload) = try nextFrame() {
                try handle(type: type, flags: flags, streamID: streamID, payload: payload, context: context, replies: &replies)
            }
            if var replies {
                append(&replies, context: context)
                flushPending(context: context)
            }
            if inbound?.readableBytes == 0 { inbound = nil } else { inbound?.discardReadBytes() }
        } catch {
            inbound = nil
            failed = true
            if isServer {
                // RFC 9113 §5.4.1: a connection error is answered with GOAWAY.
                let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(
                    lastStreamID: HTTP2StreamID(lastClientStream), errorCode: (error as? ProtocolError)?.code ?? .protocolError, opaqueData: nil))
                write(context: context, data: NIOAny(frame), promise: nil)
                flushPending(context: context)
            }
            context.fireErrorCaught(error)
        }
    }

    /// The next complete frame in `inbound`, if there is one.
    private func nextFrame() throws(ProtocolError) -> (UInt8, UInt8, Int32, ByteBuffer)? {
        guard var buffer = inbound, buffer.readableBytes >= 9 else { return nil }
        let start = buffer.readerIndex
        let length = Int(buffer.getInteger(at: start, as: UInt8.self)!) << 16 | Int(buffer.getInteger(at: start + 1, as: UInt16.self)!)
        guard length <= Self.maxFrameSize else {
            throw ProtocolError(code: .frameSizeError, description: "the server sent a frame of \(length) bytes, over the \(Self.maxFrameSize)-byte maximum")
        }
        guard buffer.readableBytes >= 9 + length else { return nil }
        let type = buffer.getInteger(at: start + 3, as: UInt8.self)!
        let flags = buffer.getInteger(at: start + 4, as: UInt8.self)!
        let streamID = Int32(bitPattern: buffer.getInteger(at: start + 5, as: UInt32.self)! & 0x7FFF_FFFF)
        let payload = buffer.getSlice(at: start + 9, length: length)!
        buffer.moveReaderIndex(forwardBy: 9 + length)
        inbound = buffer
        return (type, flags, streamID, payload)
    }

    private func handle(type: UInt8, flags: UInt8, streamID: Int32, payload: ByteBuffer, context: ChannelHandlerContext,
                        replies: inout ByteBuffer?) throws(ProtocolError) {
        if let continuing, type != 0x9 || streamID != continuing.streamID {
            throw ProtocolError(code: .protocolError, description: "a header block on stream \(continuing.streamID) was interrupted by another frame")
        }
        var payload = payload
        switch type {
        case 0x0:  // DATA
            guard streamID != 0 else { throw ProtocolError(code: .protocolError, description: "DATA on stream 0") }
            let flowControlled = payload.readableBytes
            let body = try Self.unpadded(&payload, flags: flags)
            if isServer {
                try serverReceivedData(body, flowControlled: flowControlled, streamID: streamID, endStream: flags & 0x1 != 0,
                                       context: context)
                return
            }
            consumeReceived(flowControlled, streamID: streamID, endStream: flags & 0x1 != 0, context: context, replies: &replies)
            fire(context, HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .data(.init(data: .byteBuffer(body), endStream: flags & 0x1 != 0))))
        case 0x1:  // HEADERS
            guard streamID != 0 else { throw ProtocolError(code: .protocolError, description: "HEADERS on stream 0") }
            var fragment = try Self.unpadded(&payload, flags: flags)
            if flags & 0x20 != 0 {  // PRIORITY
                guard fragment.readableBytes >= 5 else { throw ProtocolError(code: .frameSizeError, description: "a HEADERS frame too short for its priority") }
                fragment.moveReaderIndex(forwardBy: 5)
            }
            if flags & 0x4 != 0 {  // END_HEADERS
                try emitHeaders(block: fragment, streamID: streamID, endStream: flags & 0x1 != 0, context: context, replies: &replies)
            } else {
                continuing = (streamID, flags & 0x1 != 0, fragment)
            }
        case 0x9:  // CONTINUATION
            guard var current = continuing, current.streamID == streamID else {
                throw ProtocolError(code: .protocolError, description: "CONTINUATION without a header block to continue")
            }
            current.block.writeBuffer(&payload)
            guard current.block.readableBytes <= 64 << 10 else {
                throw ProtocolError(code: .enhanceYourCalm, description: "a header block over 64 KiB")
            }
            if flags & 0x4 != 0 {
                continuing = nil
                try emitHeaders(block: current.block, streamID: streamID, endStream: current.endStream, context: context, replies: &replies)
            } else {
                continuing = current
            }
        case 0x3:  // RST_STREAM
            guard payload.readableBytes == 4, let code = payload.readInteger(as: UInt32.self) else {
                throw ProtocolError(code: .frameSizeError, description: "RST_STREAM of \(payload.readableBytes) bytes")
            }
            streamWindowAdjustments[streamID] = nil
            streamReceived[streamID] = nil
            let reason = HTTP2ErrorCode(networkCode: Int(code))
            if isServer {
                // What NIOHTTP2Handler reports for a stream the client reset.
                if clientStreams.removeValue(forKey: streamID) != nil {
                    context.fireUserInboundEventTriggered(StreamClosedEvent(streamID: HTTP2StreamID(streamID), reason: reason))
                }
                return
            }
            fire(context, HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .rstStream(reason)))
        case 0x4:  // SETTINGS
            guard streamID == 0 else { throw ProtocolError(code: .protocolError, description: "SETTINGS on stream \(streamID)") }
            if flags & 0x1 != 0 {  // our settings were acknowledged, in order
                if !unacknowledgedLimits.isEmpty, let limit = unacknowledgedLimits.removeFirst() { streamLimit = limit }
                return
            }
            guard payload.readableBytes % 6 == 0 else { throw ProtocolError(code: .frameSizeError, description: "SETTINGS of \(payload.readableBytes) bytes") }
            var settings: [HTTP2Setting] = []
            while let parameter = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
                try apply(parameter: parameter, value: value)
                settings.append(HTTP2Setting(parameter: HTTP2SettingsParameter(extensionSetting: Int(parameter)), value: Int(value)))
            }
            var reply = replies ?? context.channel.allocator.buffer(capacity: 64)
            Self.writeFrameHeader(&reply, length: 0, type: 0x4, flags: 0x1, streamID: 0)
            replies = reply
            fire(context, HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(settings))))
            drainBlocked(context: context)
        case 0x6:  // PING
            guard streamID == 0, payload.readableBytes == 8 else { throw ProtocolError(code: .protocolError, description: "a malformed PING") }
            let opaque = payload.readInteger(as: UInt64.self)!
            if flags & 0x1 != 0 {
                fire(context, HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: opaque), ack: true)))
            } else {
                var reply = replies ?? context.channel.allocator.buffer(capacity: 64)
                Self.writeFrameHeader(&reply, length: 8, type: 0x6, flags: 0x1, streamID: 0)
                reply.writeInteger(opaque)
                replies = reply
            }
        case 0x7:  // GOAWAY
            guard streamID == 0, payload.readableBytes >= 8 else { throw ProtocolError(code: .protocolError, description: "a malformed GOAWAY") }
            let last = Int32(bitPattern: payload.readInteger(as: UInt32.self)! & 0x7FFF_FFFF)
            let code = payload.readInteger(as: UInt32.self)!
            fire(context, HTTP2Frame(streamID: .rootStream, payload: .goAway(
                lastStreamID: HTTP2StreamID(last), errorCode: HTTP2ErrorCode(networkCode: Int(code)),
                opaqueData: payload.readableBytes > 0 ? payload : nil)))
        case 0x8:  // WINDOW_UPDATE
            guard payload.readableBytes == 4 else { throw ProtocolError(code: .frameSizeError, description: "WINDOW_UPDATE of \(payload.readableBytes) bytes") }
            let increment = Int(payload.readInteger(as: UInt32.self)! & 0x7FFF_FFFF)
            if streamID == 0 {
                guard increment > 0 else { throw ProtocolError(code: .protocolError, description: "a connection WINDOW_UPDATE of 0") }
                sendWindow += increment
                guard sendWindow <= Int(Int32.max) else { throw ProtocolError(code: .flowControlError, description: "the connection window overflowed") }
            } else if blocked[blockedStart...].contains(where: { $0.streamID == streamID }) {
                // Only a stream whose DATA waits has a window that still matters: every other
                // stream sent its one DATA frame with END_STREAM already.
                streamWindowAdjustments[streamID, default: 0] += increment
            }
            drainBlocked(context: context)
        case 0x5:  // PUSH_PROMISE: refused by SETTINGS_ENABLE_PUSH = 0, and never sent by a client
            throw ProtocolError(code: .protocolError, description: "PUSH_PROMISE although push is disabled")
        default:  // PRIORITY and unknown frame types are ignored (RFC 9113 §4.1, §5.5)
            break
        }
    }

    private func apply(parameter: UInt16, value: UInt32) throws(ProtocolError) {
        switch parameter {
        case 1:  // SETTINGS_HEADER_TABLE_SIZE: the most the server's decoder keeps
            encoder.setMaxTableSize(Int(value))
        case 4:  // SETTINGS_INITIAL_WINDOW_SIZE: applies to every stream's send window
            guard value <= UInt32(Int32.max) else { throw ProtocolError(code: .flowControlError, description: "an initial window of \(value)") }
            peerInitialWindow = Int(value)
        case 5:  // SETTINGS_MAX_FRAME_SIZE
            guard (16_384...16_777_215).contains(value) else { throw ProtocolError(code: .protocolError, description: "a maximum frame size of \(value)") }
            peerMaxFrameSize = Int(value)
        default:
            break
        }
    }

    private func emitHeaders(block: ByteBuffer, streamID: Int32, endStream: Bool, context: ChannelHandlerContext,
                             replies: inout ByteBuffer?) throws(ProtocolError) {
        var block = block
        let headers: HPACKHeaders
        do { headers = try decoder.decodeHeaders(from: &block) } catch {
            throw ProtocolError(code: .compressionError, description: "cannot decode a header block: \(error)")
        }
        if isServer && clientStreams[streamID] == nil {
            // A new stream (RFC 9113 §5.1.1): odd and above every earlier one.
            guard streamID % 2 == 1, streamID > lastClientStream else {
                throw ProtocolError(code: .protocolError, description: "HEADERS on stream \(streamID), which is not a new client stream")
            }
            lastClientStream = streamID
            if let last = goAwaySent, streamID > last {
                // RFC 9113 §6.8: above the GOAWAY's last stream, not processed; the client may
                // send it again elsewhere.
                Self.refuse(streamID, replies: &replies, context: context)
                return
            }
            guard clientStreams.count < streamLimit else {
                Self.refuse(streamID, replies: &replies, context: context)
                context.fireErrorCaught(NIOHTTP2Errors.maxStreamsViolation())
                return
            }
            clientStreams[streamID] = ClientStream(receiveWindow: initialStreamReceiveWindow)
        }
        if endStream { streamReceived[streamID] = nil }
        fire(context, HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .headers(.init(headers: headers, endStream: endStream))))
    }

    /// Gives received flow-controlled bytes back once half of a window is used.
    private func consumeReceived(_ count: Int, streamID: Int32, endStream: Bool, context: ChannelHandlerContext, replies: inout ByteBuffer?) {
        guard count > 0 else { return }
        receivedUnacknowledged += count
        if receivedUnacknowledged >= Self.connectionReceiveWindow / 2 {
            var reply = replies ?? context.channel.allocator.buffer(capacity: 64)
            Self.writeFrameHeader(&reply, length: 4, type: 0x8, flags: 0, streamID: 0)
            reply.writeInteger(UInt32(receivedUnacknowledged))
            replies = reply
            receivedUnacknowledged = 0
        }
        if endStream {
            streamReceived[streamID] = nil
            return
        }
        let total = streamReceived[streamID, default: 0] + count
        if total >= Int(Self.initialSettings[2].value) / 2 {
            var reply = replies ?? context.channel.allocator.buffer(capacity: 64)
            Self.writeFrameHeader(&reply, length: 4, type: 0x8, flags: 0, streamID: streamID)
            reply.writeInteger(UInt32(total))
            replies = reply
            streamReceived[streamID] = 0
        } else {
            streamReceived[streamID] = total
        }
    }

    private static func refuse(_ streamID: Int32, replies: inout ByteBuffer?, context: ChannelHandlerContext) {
        var reply = replies ?? context.channel.allocator.buffer(capacity: 64)
        writeFrameHeader(&reply, length: 4, type: 0x3, flags: 0, streamID: streamID)
        reply.writeInteger(UInt32(HTTP2ErrorCode.refusedStream.networkCode))
        replies = reply
    }

    /// DATA from the client: both receive windows are enforced (RFC 9113 §6.9.1) and the handler
    /// above is told when one is half used, as NIOHTTP2Handler tells it, to give bytes back.
    private func serverReceivedData(_ body: ByteBuffer, flowControlled: Int, streamID: Int32, endStream: Bool,
                                    context: ChannelHandlerContext) throws(ProtocolError) {
        connectionReceiveWindow -= flowControlled
        guard connectionReceiveWindow >= 0 else {
            throw ProtocolError(code: .flowControlError, description: "the client sent more than the connection window allows")
        }
        if var stream = clientStreams[streamID] {
            stream.receiveWindow -= flowControlled
            guard stream.receiveWindow >= 0 else {
                throw ProtocolError(code: .flowControlError, description: "the client sent more than stream \(streamID)'s window allows")
            }
            clientStreams[streamID] = stream
            fire(context, HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .data(.init(data: .byteBuffer(body), endStream: endStream))))
            if !endStream && flowControlled > 0 && stream.receiveWindow <= initialStreamReceiveWindow / 2 {
                context.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(
                    streamID: HTTP2StreamID(streamID), inboundWindowSize: stream.receiveWindow, outboundWindowSize: nil))
            }
        } else if streamID > lastClientStream {
            throw ProtocolError(code: .protocolError, description: "DATA on stream \(streamID), which was never opened")
        }
        // DATA of a stream closed or refused counts for the connection window only.
        if flowControlled > 0 && connectionReceiveWindow <= connectionReceiveTarget / 2 {
            context.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(
                streamID: .rootStream, inboundWindowSize: connectionReceiveWindow, outboundWindowSize: nil))
        }
    }

    private func fire(_ context: ChannelHandlerContext, _ frame: HTTP2Frame) {
        context.fireChannelRead(wrapInboundOut(frame))
    }

    private static func unpadded(_ payload: inout ByteBuffer, flags: UInt8) throws(ProtocolError) -> ByteBuffer {
        guard flags & 0x8 != 0 else { return payload }  // PADDED
        guard let padding = payload.readInteger(as: UInt8.self), Int(padding) <= payload.readableBytes else {
            throw ProtocolError(code: .protocolError, description: "padding longer than its frame")
        }
        return payload.getSlice(at: payload.readerIndex, length: payload.readableBytes - Int(padding))!
    }

    // MARK: Writing

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = unwrapOutboundIn(data)
        let streamID = Int32(frame.streamID)
        var buffer = pending ?? context.channel.allocator.buffer(capacity: 16 << 10)
        pending = nil
        defer { pending = buffer }
        switch frame.payload {
        case .headers(let headers):
            writeHeaderBlock(streamID: streamID, endStream: headers.endStream, into: &buffer) { encoder, buffer in
                encoder.writeHeaders(headers.headers, into: &buffer)
            }
            if headers.endStream && isServer { clientStreams[streamID] = nil }
        case .data(let data):
            guard case .byteBuffer(let body) = data.data else {
                promise?.fail(ProtocolError(code: .internalError, description: "file regions are not sent"))
                return
            }
            if data.endStream && isServer { clientStreams[streamID] = nil }
            if blockedStart < blocked.count || !fits(body.readableBytes, streamID: streamID) {
                // What fits goes now; the rest waits for WINDOW_UPDATE, in order.
                blocked.append((streamID, body, data.endStream))
                sendWhatFits(into: &buffer)
                promise?.succeed()
                return
            }
            writeData(body, streamID: streamID, endStream: data.endStream, into: &buffer)
        case .ping(let ping, let ack):
            Self.writeFrameHeader(&buffer, length: 8, type: 0x6, flags: ack ? 0x1 : 0, streamID: 0)
            _ = withUnsafeBytes(of: ping.bytes) { buffer.writeBytes($0) }
        case .rstStream(let code):
            Self.writeFrameHeader(&buffer, length: 4, type: 0x3, flags: 0, streamID: streamID)
            buffer.writeInteger(UInt32(code.networkCode))
            if isServer { clientStreams[streamID] = nil }
        case .goAway(let last, let code, let opaque):
            Self.writeFrameHeader(&buffer, length: 8 + (opaque?.readableBytes ?? 0), type: 0x7, flags: 0, streamID: 0)
            buffer.writeInteger(UInt32(Int32(last)))
            buffer.writeInteger(UInt32(code.networkCode))
            if let opaque { buffer.writeImmutableBuffer(opaque) }
            if isServer {
                goAwaySent = min(goAwaySent ?? Int32(last), Int32(last))
                frameDelegate?.wroteFrame(frame)
            }
        case .settings(.settings(let settings)):
            writeSettings(settings, into: &buffer)
        case .windowUpdate(let increment):
            Self.writeFrameHeader(&buffer, length: 4, type: 0x8, flags: 0, streamID: streamID)
            buffer.writeInteger(UInt32(increment))
            // The receive windows just given back.
            if streamID == 0 {
                connectionReceiveWindow += increment
                connectionReceiveTarget = max(connectionReceiveTarget, connectionReceiveWindow)
            } else {
                clientStreams[streamID]?.receiveWindow += increment
            }
        default:
            promise?.fail(ProtocolError(code: .internalError, description: "the frame layer does not send \(frame.payload) frames"))
            return
        }
        if let promise { pendingPromises.append(promise) }
    }

    package func flush(context: ChannelHandlerContext) {
        flushPending(context: context)
    }

    /// Writes one request as HEADERS and DATA with END_STREAM, straight into what the next
    /// flush sends: the connection handler's path for requests, without a header list or a
    /// frame value in between.
    func writeRequest(_ request: QueuedRequest, streamID: Int32, authority: String, authorization: String?) {
        var buffer = pending ?? allocator.buffer(capacity: 16 << 10)
        pending = nil
        defer { pending = buffer }
        writeHeaderBlock(streamID: streamID, endStream: false, into: &buffer) { encoder, buffer in
            encoder.writeRequest(request, authority: authority, authorization: authorization, into: &buffer)
        }
        let count = request.body.count
        if blockedStart == blocked.count && fits(count, streamID: streamID) && count <= peerMaxFrameSize {
            sendWindow -= count
            Self.writeFrameHeader(&buffer, length: count, type: 0x0, flags: 0x1, streamID: streamID)
            buffer.writeBytes(request.body)
        } else {
            blocked.append((streamID, allocator.buffer(bytes: request.body), true))
            sendWhatFits(into: &buffer)
        }
    }

    /// A header block encoded in place after a frame header whose length is filled in
    /// afterwards; a block longer than the server's frame size moves on to CONTINUATION frames.
    private func writeHeaderBlock(streamID: Int32, endStream: Bool, into buffer: inout ByteBuffer,
                                  encode: (inout HPACKRequestEncoder, inout ByteBuffer) -> Void) {
        let headerStart = buffer.writerIndex
        Self.writeFrameHeader(&buffer, length: 0, type: 0x1, flags: endStream ? 0x5 : 0x4, streamID: streamID)
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
            let last = block.readableBytes == 0
            let flags: UInt8 = (last ? 0x4 : 0) | (first && endStream ? 0x1 : 0)
            Self.writeFrameHeader(&buffer, length: chunk.readableBytes, type: first ? 0x1 : 0x9, flags: flags, streamID: streamID)
            buffer.writeImmutableBuffer(chunk)
            first = false
        } while block.readableBytes > 0
    }

    /// Adds already encoded frames to what the next flush sends.
    private func append(_ bytes: inout ByteBuffer, context: ChannelHandlerContext) {
        if pending == nil {
            pending = bytes
        } else {
            pending!.writeBuffer(&bytes)
        }
    }

    private func flushPending(context: ChannelHandlerContext) {
        if let buffer = pending, buffer.readableBytes > 0 {
            pending = nil
            var promise: EventLoopPromise<Void>? = nil
            if !pendingPromises.isEmpty {
                let promises = pendingPromises
                pendingPromises.removeAll()
                let combined = context.eventLoop.makePromise(of: Void.self)
                combined.futureResult.whenComplete { result in
                    for p in promises { p.completeWith(result) }
                }
                promise = combined
            }
            context.write(wrapOutboundOut(buffer), promise: promise)
        }
        context.flush()
    }

    /// Whether a DATA frame of `count` bytes fits both windows.
    private func fits(_ count: Int, streamID: Int32) -> Bool {
        count <= sendWindow && count <= peerInitialWindow + streamWindowAdjustments[streamID, default: 0]
    }

    private func writeData(_ body: ByteBuffer, streamID: Int32, endStream: Bool, into buffer: inout ByteBuffer) {
        let count = body.readableBytes
        sendWindow -= count
        if endStream {
            streamWindowAdjustments[streamID] = nil
        } else if count > 0 {
            streamWindowAdjustments[streamID, default: 0] -= count
        }
        var body = body
        // Split at the server's frame size (bodies are at most 5 KiB, well under 16 KiB).
        repeat {
            let chunk = body.readSlice(length: min(body.readableBytes, peerMaxFrameSize))!
            let last = body.readableBytes == 0
            Self.writeFrameHeader(&buffer, length: chunk.readableBytes, type: 0x0, flags: last && endStream ? 0x1 : 0, streamID: streamID)
            buffer.writeImmutableBuffer(chunk)
        } while body.readableBytes > 0
    }

    /// Writes the waiting DATA that now fits and sends it.
    private func drainBlocked(context: ChannelHandlerContext) {
        guard blockedStart < blocked.count else { return }
        var buffer = pending ?? context.channel.allocator.buffer(capacity: 4096)
        pending = nil
        sendWhatFits(into: &buffer)
        pending = buffer
        flushPending(context: context)
    }

    /// Writes waiting DATA in order, as much as the windows allow: a body larger than what is
    /// open goes in parts (RFC 9113 §6.9), the first waiting stream holding up the others.
    private func sendWhatFits(into buffer: inout ByteBuffer) {
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

    /// The wire code of a setting NIOHTTP2 names (RFC 9113 §6.5.2, RFC 8441).
    private static func code(of parameter: HTTP2SettingsParameter) -> UInt16 {
        let known: [(HTTP2SettingsParameter, UInt16)] = [
            (.headerTableSize, 1), (.enablePush, 2), (.maxConcurrentStreams, 3), (.initialWindowSize, 4),
            (.maxFrameSize, 5), (.maxHeaderListSize, 6), (.enableConnectProtocol, 8),
        ]
        return known.first { $0.0 == parameter }?.1 ?? 0
    }

    private static func writeFrameHeader(_ buffer: inout ByteBuffer, length: Int, type: UInt8, flags: UInt8, streamID: Int32) {
        buffer.writeInteger(UInt8(truncatingIfNeeded: length >> 16))
        buffer.writeInteger(UInt16(truncatingIfNeeded: length))
        buffer.writeInteger(type)
        buffer.writeInteger(flags)
        buffer.writeInteger(UInt32(bitPattern: streamID) & 0x7FFF_FFFF)
    }
}
