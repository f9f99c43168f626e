import APNSHTTP2
import NIOCore
import NIOHPACK
import NIOHTTP2

/// The server side of an HTTP/2 connection (RFC 9113) at the frame level, under the
/// simulator's ``HTTP2SimulatorConnectionHandler``: bytes in, ``HTTP2Frame`` values out, and
/// the reverse. It shares ``HTTP2FrameReader`` and ``HTTP2FrameWriter`` with the client's
/// ``HTTP2FrameCodec``.
///
/// Beyond what both sides do (SETTINGS and their acknowledgement, PING answers, HPACK, header
/// blocks over CONTINUATION, send flow control) it reads the client preface, sends its own
/// SETTINGS first, keeps the streams the client opens within the
/// `SETTINGS_MAX_CONCURRENT_STREAMS` the client has acknowledged, enforces its receive windows,
/// refuses streams above a GOAWAY it sent, and answers a connection error with GOAWAY.
///
/// It stands in for `NIOHTTP2Handler` (``APNSHTTP2Simulator/Configuration/Framing``), so the
/// handler above runs on either. The contract it keeps with that handler is what
/// `NIOHTTP2Handler` in server mode, without a stream multiplexer, does for the same events:
///
/// - HEADERS and DATA of open streams, SETTINGS, PING acknowledgements and GOAWAY are passed on
///   as ``HTTP2Frame`` values; PING, SETTINGS acknowledgements and RST_STREAM are not.
/// - A new stream over the acknowledged limit is reset with `REFUSED_STREAM` and reported
///   with `errorCaught(NIOHTTP2Errors.MaxStreamsViolation)`; the connection stays open.
/// - A stream the client resets is reported as `StreamClosedEvent` with the client's code.
/// - When a receive window (a stream's or the connection's) is half used,
///   `NIOHTTP2WindowUpdatedEvent` reports what is left; the handler gives bytes back by
///   writing WINDOW_UPDATE frames.
/// - The `NIOHTTP2FrameDelegate` sees every GOAWAY written, the one answering a connection
///   error (whose code is not `NO_ERROR`) included, before `errorCaught` reports that error.
/// - A stream's state ends when the handler writes END_STREAM or RST_STREAM on it.
package final class HTTP2ServerFrameCodec: HTTP2FrameCodecRole, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = HTTP2Frame
    package typealias OutboundIn = HTTP2Frame
    package typealias OutboundOut = ByteBuffer

    /// A stream the client opened and the server has not ended.
    private struct ClientStream {
        var receiveWindow: Int
    }

    private var reader: HTTP2FrameReader
    package var writer = HTTP2FrameWriter()
    private let settings: [HTTP2Setting]
    private let frameDelegate: (any NIOHTTP2FrameDelegate)?
    private var started = false

    private var clientStreams: [Int32: ClientStream] = [:]
    private var lastClientStream: Int32 = 0
    /// The stream limit in force: unlimited until the client acknowledges a SETTINGS with one.
    private var streamLimit = Int.max
    /// Per SETTINGS frame sent and not yet acknowledged, its MAX_CONCURRENT_STREAMS if any.
    private var unacknowledgedLimits: [Int?] = []
    private let initialStreamReceiveWindow: Int
    private var connectionReceiveWindow = HTTP2Protocol.defaultWindow
    private var connectionReceiveTarget = HTTP2Protocol.defaultWindow
    private var goAwaySent: Int32?

    /// `settings` are the server's, sent first; `frameDelegate` sees the GOAWAY frames written.
    package init(settings: [HTTP2Setting], frameDelegate: (any NIOHTTP2FrameDelegate)?) {
        self.settings = settings
        self.frameDelegate = frameDelegate
        let table = settings.last { $0.parameter == .headerTableSize }?.value ?? HPACKDecoder.maxDynamicTableSize
        let list = settings.last { $0.parameter == .maxHeaderListSize }?.value ?? 16 << 10
        initialStreamReceiveWindow =
            settings.last { $0.parameter == .initialWindowSize }?.value ?? HTTP2Protocol.defaultWindow
        reader = HTTP2FrameReader(
            peer: "client",
            expectsPreface: true,
            maxDynamicTableSize: table,
            maxHeaderListSize: list
        )
    }

    // MARK: Connection start

    package func handlerAdded(context: ChannelHandlerContext) {
        // Added once TLS and ALPN are done: the connection is already up.
        if context.channel.isActive { start(context: context) }
    }

    package func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    /// "The server connection preface consists of a potentially empty SETTINGS frame that
    /// MUST be the first frame the server sends in the HTTP/2 connection" (RFC 9113 §3.4).
    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        write(
            context: context,
            data: NIOAny(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(settings)))),
            promise: nil
        )
        flushPending(context: context)
    }

    package func channelInactive(context: ChannelHandlerContext) {
        for promise in writer.dropUnflushed() {
            promise.fail(ChannelError.ioOnClosedChannel)  // never flushed, so never sent
        }
        context.fireChannelInactive()
    }

    // MARK: Reading

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reader.append(unwrapInboundIn(data))
        do throws(HTTP2ProtocolError) {
            while let frame = try reader.nextFrame() { try handle(frame, context: context) }
        } catch {
            connectionError(error, context: context)
            return
        }
        if writer.queueReplies() { flushPending(context: context) }
    }

    /// "An endpoint that encounters a connection error SHOULD first send a GOAWAY frame with
    /// the stream identifier of the last stream that it successfully received from its peer"
    /// (RFC 9113 §5.4.1), then the connection closes: the handler above closes it on `errorCaught`.
    private func connectionError(_ error: HTTP2ProtocolError, context: ChannelHandlerContext) {
        reader.stop()
        writer.dropReplies()
        let goAway = HTTP2Frame(
            streamID: .rootStream,
            payload: .goAway(
                lastStreamID: HTTP2StreamID(lastClientStream),
                errorCode: error.code,
                opaqueData: nil
            )
        )
        write(context: context, data: NIOAny(goAway), promise: nil)
        flushPending(context: context)
        context.fireErrorCaught(error)
    }

    private func handle(_ frame: HTTP2InboundFrame, context: ChannelHandlerContext) throws(HTTP2ProtocolError) {
        switch frame {
        case .data(let streamID, let body, let flowControlled, let endStream):
            try receivedData(
                body,
                flowControlled: flowControlled,
                streamID: streamID,
                endStream: endStream,
                context: context
            )
        case .headers(let streamID, let headers, let endStream):
            guard try admit(streamID, context: context) else { return }
            fire(context, .inboundHeaders(streamID, headers, endStream: endStream))
        case .rstStream(let streamID, let code):
            writer.streamReset(streamID)
            // What NIOHTTP2Handler reports for a stream the client reset.
            if clientStreams.removeValue(forKey: streamID) != nil {
                context.fireUserInboundEventTriggered(
                    StreamClosedEvent(streamID: HTTP2StreamID(streamID), reason: code)
                )
            }
        case .settingsAcknowledged:
            // "The values in the SETTINGS frame MUST be processed in the order they appear"
            // and acknowledged in order (RFC 9113 §6.5.3): the oldest unacknowledged applies.
            if !unacknowledgedLimits.isEmpty, let limit = unacknowledgedLimits.removeFirst() { streamLimit = limit }
        case .settings, .ping, .goAway, .windowUpdate:
            let (passOn, sendWaitingData) = try writer.receive(frame)
            if let passOn { fire(context, passOn) }
            if sendWaitingData && writer.sendWaitingData() { flushPending(context: context) }
        }
    }

    /// Whether HEADERS on `streamID` go to the handler: trailers of an open stream do, and so
    /// does a new stream within the limits; one over them is refused.
    private func admit(_ streamID: Int32, context: ChannelHandlerContext) throws(HTTP2ProtocolError) -> Bool {
        guard clientStreams[streamID] == nil else { return true }
        // "Streams initiated by a client MUST use odd-numbered stream identifiers"; "The
        // identifier of a newly established stream MUST be numerically greater than all
        // streams that the initiating endpoint has opened" (RFC 9113 §5.1.1).
        guard streamID % 2 == 1, streamID > lastClientStream else {
            throw HTTP2ProtocolError(
                code: .protocolError,
                description: "HEADERS on stream \(streamID), which is not a new client stream"
            )
        }
        lastClientStream = streamID
        if let last = goAwaySent, streamID > last {
            // Above the GOAWAY's last stream, not processed; the client may send it again
            // elsewhere (RFC 9113 §6.8).
            writer.replyReset(streamID: streamID, code: .refusedStream)
            return false
        }
        // "An endpoint that receives a HEADERS frame that causes its advertised concurrent
        // stream limit to be exceeded MUST treat this as a stream error of type
        // PROTOCOL_ERROR or REFUSED_STREAM" (RFC 9113 §5.1.2).
        guard clientStreams.count < streamLimit else {
            writer.replyReset(streamID: streamID, code: .refusedStream)
            context.fireErrorCaught(NIOHTTP2Errors.maxStreamsViolation())
            return false
        }
        clientStreams[streamID] = ClientStream(receiveWindow: initialStreamReceiveWindow)
        return true
    }

    /// DATA from the client: both receive windows are enforced (RFC 9113 §6.9.1) and the handler
    /// above is told when one is half used, as NIOHTTP2Handler tells it, to give bytes back.
    private func receivedData(
        _ body: ByteBuffer,
        flowControlled: Int,
        streamID: Int32,
        endStream: Bool,
        context: ChannelHandlerContext
    ) throws(HTTP2ProtocolError) {
        // "A receiver MAY respond with a stream error or connection error of type
        // FLOW_CONTROL_ERROR if it is unable to accept a frame" (RFC 9113 §6.9).
        connectionReceiveWindow -= flowControlled
        guard connectionReceiveWindow >= 0 else {
            throw HTTP2ProtocolError(
                code: .flowControlError,
                description: "the client sent more than the connection window allows"
            )
        }
        if var stream = clientStreams[streamID] {
            stream.receiveWindow -= flowControlled
            guard stream.receiveWindow >= 0 else {
                throw HTTP2ProtocolError(
                    code: .flowControlError,
                    description: "the client sent more than stream \(streamID)'s window allows"
                )
            }
            clientStreams[streamID] = stream
            fire(context, .inboundData(streamID, body, endStream: endStream))
            if !endStream && flowControlled > 0 && stream.receiveWindow <= initialStreamReceiveWindow / 2 {
                context.fireUserInboundEventTriggered(
                    NIOHTTP2WindowUpdatedEvent(
                        streamID: HTTP2StreamID(streamID),
                        inboundWindowSize: stream.receiveWindow,
                        outboundWindowSize: nil
                    )
                )
            }
        } else if streamID > lastClientStream {
            // "Receiving any frame other than HEADERS or PRIORITY on a stream in this state
            // [idle] MUST be treated as a connection error of type PROTOCOL_ERROR" (RFC 9113 §5.1).
            throw HTTP2ProtocolError(
                code: .protocolError,
                description: "DATA on stream \(streamID), which was never opened"
            )
        }
        // DATA of a stream closed or refused counts for the connection window only.
        if flowControlled > 0 && connectionReceiveWindow <= connectionReceiveTarget / 2 {
            context.fireUserInboundEventTriggered(
                NIOHTTP2WindowUpdatedEvent(
                    streamID: .rootStream,
                    inboundWindowSize: connectionReceiveWindow,
                    outboundWindowSize: nil
                )
            )
        }
    }

    // MARK: Writing

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = unwrapOutboundIn(data)
        let result = writer.write(frame, promise: promise)
        defer { if let result { promise?.completeWith(result.mapError { $0 as any Error }) } }
        if case .failure? = result { return }
        let streamID = Int32(frame.streamID)
        switch frame.payload {
        case .headers(let headers) where headers.endStream:
            clientStreams[streamID] = nil
        case .data(let data) where data.endStream:
            clientStreams[streamID] = nil
        case .rstStream:
            clientStreams[streamID] = nil
        case .goAway(let last, _, _):
            goAwaySent = min(goAwaySent ?? Int32(last), Int32(last))
            frameDelegate?.wroteFrame(frame)
        case .settings(.settings(let settings)):
            unacknowledgedLimits.append(settings.last { $0.parameter == .maxConcurrentStreams }?.value)
        case .windowUpdate(let increment):
            // The receive windows just given back.
            if streamID == 0 {
                connectionReceiveWindow += increment
                connectionReceiveTarget = max(connectionReceiveTarget, connectionReceiveWindow)
            } else {
                clientStreams[streamID]?.receiveWindow += increment
            }
        default:
            break
        }
    }

    package func flush(context: ChannelHandlerContext) {
        flushPending(context: context)
    }

}
