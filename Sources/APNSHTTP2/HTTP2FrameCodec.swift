import NIOCore
import NIOHPACK
import NIOHTTP2

/// The client side of an HTTP/2 connection (RFC 9113) at the frame level: bytes in,
/// ``HTTP2Frame`` values out, and the reverse. It sits under ``HTTP2ConnectionHandler``.
///
/// It does what a connection needs and no more: the preface, SETTINGS and their
/// acknowledgement, PING answers, HPACK (``HPACKRequestEncoder`` out, NIOHPACK's decoder in),
/// header blocks split over CONTINUATION, and flow control in both directions. Stream state
/// stays with ``HTTP2ConnectionHandler``, which opens streams in order, sends each request as
/// one HEADERS and one DATA frame with END_STREAM (``writeRequest(_:streamID:authority:authorization:)``),
/// and matches answers. `NIOHTTP2Handler` does all of this through general stream state
/// machines and a flow-control buffer that cost about as much CPU per request as everything
/// else on either side together; APNs requests need none of that generality.
///
/// The frames themselves are read and written by ``HTTP2FrameReader`` and ``HTTP2FrameWriter``,
/// which the simulator's server side shares. Protocol errors by the server close the
/// connection: `errorCaught` reaches the handler, which reports it and closes.
package final class HTTP2FrameCodec: HTTP2FrameCodecRole, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = HTTP2Frame
    package typealias OutboundIn = HTTP2Frame
    package typealias OutboundOut = ByteBuffer

    package typealias ProtocolError = HTTP2ProtocolError

    /// The settings this client announces (RFC 9113 §6.5.2).
    static let initialSettings: [(parameter: HTTP2SettingCode, value: UInt32)] = [
        (.enablePush, 0),  // no server push (§3.2)
        (.maxConcurrentStreams, 100),  // the server opens none
        (.initialWindowSize, UInt32(streamReceiveWindow)),
        (.maxHeaderListSize, 16 << 10),
    ]
    /// Each stream's receive window, the SETTINGS_INITIAL_WINDOW_SIZE announced.
    static let streamReceiveWindow = 1 << 20
    /// The connection-level receive window this client opens right after the preface.
    static let connectionReceiveWindow = 1 << 24

    private var reader = HTTP2FrameReader(
        peer: "server",
        expectsPreface: false,
        maxDynamicTableSize: HPACKDecoder.maxDynamicTableSize,
        maxHeaderListSize: 16 << 10
    )
    package var writer = HTTP2FrameWriter()

    // Receiving: flow-controlled bytes not yet given back with WINDOW_UPDATE.
    private var receivedUnacknowledged = 0
    private var streamReceived: [Int32: Int] = [:]

    package init() {}

    // MARK: Connection start

    package func channelActive(context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: 64)
        buffer.writeStaticString(HTTP2Protocol.clientPreface)
        buffer.writeHTTP2FrameHeader(length: 6 * Self.initialSettings.count, type: .settings, streamID: 0)
        for setting in Self.initialSettings {
            buffer.writeInteger(setting.parameter.rawValue)
            buffer.writeInteger(setting.value)
        }
        buffer.writeHTTP2FrameHeader(length: 4, type: .windowUpdate, streamID: 0)
        buffer.writeInteger(UInt32(Self.connectionReceiveWindow - HTTP2Protocol.defaultWindow))
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        // Writes that were never flushed will not be.
        writer.dropUnflushed().forEach { $0.fail(ChannelError.ioOnClosedChannel) }
        context.fireChannelInactive()
    }

    // MARK: Reading

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reader.append(unwrapInboundIn(data))
        do throws(HTTP2ProtocolError) {
            while let frame = try reader.nextFrame() {
                try handle(frame, context: context)
            }
            if writer.queueReplies() { flushPending(context: context) }
        } catch {
            reader.stop()
            writer.dropReplies()
            context.fireErrorCaught(error)
        }
    }

    private func handle(_ frame: HTTP2InboundFrame, context: ChannelHandlerContext) throws(HTTP2ProtocolError) {
        switch frame {
        case .data(let streamID, let body, let flowControlled, let endStream):
            consumeReceived(flowControlled, streamID: streamID, endStream: endStream)
            fire(context, .inboundData(streamID, body, endStream: endStream))
        case .headers(let streamID, let headers, let endStream):
            if endStream { streamReceived[streamID] = nil }
            fire(context, .inboundHeaders(streamID, headers, endStream: endStream))
        case .rstStream(let streamID, let code):
            writer.streamReset(streamID)
            streamReceived[streamID] = nil
            fire(context, HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .rstStream(code)))
        case .settingsAcknowledged:
            break
        case .settings, .ping, .goAway, .windowUpdate:
            let (passOn, sendWaitingData) = try writer.receive(frame)
            if let passOn { fire(context, passOn) }
            if sendWaitingData && writer.sendWaitingData() { flushPending(context: context) }
        }
    }

    /// Gives received flow-controlled bytes back once half of a window is used (§6.9).
    private func consumeReceived(_ count: Int, streamID: Int32, endStream: Bool) {
        guard count > 0 else { return }
        receivedUnacknowledged += count
        if receivedUnacknowledged >= Self.connectionReceiveWindow / 2 {
            writer.replyWindowUpdate(streamID: 0, increment: receivedUnacknowledged)
            receivedUnacknowledged = 0
        }
        if endStream {
            streamReceived[streamID] = nil
            return
        }
        let total = streamReceived[streamID, default: 0] + count
        if total >= Self.streamReceiveWindow / 2 {
            writer.replyWindowUpdate(streamID: streamID, increment: total)
            streamReceived[streamID] = 0
        } else {
            streamReceived[streamID] = total
        }
    }

    // MARK: Writing

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if let result = writer.write(unwrapOutboundIn(data), promise: promise) {
            promise?.completeWith(result.mapError { $0 as any Error })
        }
    }

    package func flush(context: ChannelHandlerContext) {
        flushPending(context: context)
    }

    /// Writes one request as HEADERS and DATA with END_STREAM, straight into what the next
    /// flush sends: the connection handler's path for requests, without a header list or a
    /// frame value in between.
    func writeRequest(_ request: QueuedRequest, streamID: Int32, authority: String, authorization: String?) {
        writer.writeRequest(request, streamID: streamID, authority: authority, authorization: authorization)
    }

}
