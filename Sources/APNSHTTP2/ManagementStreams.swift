import NIOCore
import NIOHPACK
import NIOHTTP2
import Synchronization

/// The requests of a channel manager's connection (``APNSChannelManager``), over the frame
/// layer the delivery pools use (``HTTP2FrameCodec``): each request opens the next client
/// stream, goes out as HEADERS (and one DATA with its body), and completes with the answer's
/// status, headers and body once the server ends the stream. A reset stream, GOAWAY for it, a
/// protocol error or the connection's close fail it with a sentence.
///
/// Used on its channel's event loop only.
final class ManagementStreams: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// An answer as it arrives.
    private struct Open {
        var answer = APNSChannelManager.Answer(status: 0, headers: [], body: [])
        let promise: EventLoopPromise<APNSChannelManager.Answer>
    }

    /// Set once the connection takes no new requests, for ``ManagementConnection`` to open another.
    let retired: ManagementStreamsRetired
    private var context: ChannelHandlerContext?
    private var nextStreamID: Int32 = 1
    private var open: [Int32: Open] = [:]
    /// Why the connection takes no new requests (GOAWAY, closed); `nil` while it does.
    private(set) var closed: String? {
        didSet { if closed != nil { retired.flag.store(true, ordering: .relaxed) } }
    }

    init(retired: ManagementStreamsRetired) { self.retired = retired }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        failAll("the connection to the channel management API closed")
    }

    /// Sends one request; `promise` completes with its answer.
    func send(_ headers: HPACKHeaders, body: [UInt8]?, promise: EventLoopPromise<APNSChannelManager.Answer>) {
        guard let context, closed == nil else {
            promise.fail(ManagementStreamError(closed ?? "the connection is not open"))
            return
        }
        // Client streams are odd and only go up (RFC 9113 §5.1.1).
        guard nextStreamID < Int32.max - 1 else {
            promise.fail(ManagementStreamError("the connection used up its stream IDs"))
            closed = "the connection used up its stream IDs"
            return
        }
        let streamID = nextStreamID
        nextStreamID += 2
        open[streamID] = Open(promise: promise)
        let id = HTTP2StreamID(Int(streamID))
        context.write(
            wrapOutboundOut(
                HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: body == nil)))
            ),
            promise: nil
        )
        if let body {
            let data = HTTP2Frame.FramePayload.Data(data: .byteBuffer(ByteBuffer(bytes: body)), endStream: true)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(data))), promise: nil)
        }
        context.flush()
    }

    /// Gives up on the request of `promise` (its caller was cancelled): its stream is reset
    /// (RST_STREAM CANCEL) and the promise fails.
    func cancel(_ promise: EventLoopPromise<APNSChannelManager.Answer>) {
        guard let streamID = open.first(where: { $0.value.promise.futureResult === promise.futureResult })?.key
        else {
            // Not sent yet or answered already: failing it is a no-op once answered.
            return
        }
        open.removeValue(forKey: streamID)
        promise.fail(CancellationError())
        if let context {
            context.writeAndFlush(
                wrapOutboundOut(HTTP2Frame(streamID: HTTP2StreamID(Int(streamID)), payload: .rstStream(.cancel))),
                promise: nil
            )
        }
        closeIfDone()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let streamID = Int32(Int(frame.streamID))
        switch frame.payload {
        case .headers(let headers):
            for (name, value, _) in headers.headers {
                if name == ":status" {
                    open[streamID]?.answer.status = Int(value) ?? 0
                } else {
                    open[streamID]?.answer.headers.append((name, value))
                }
            }
            if headers.endStream { complete(streamID) }
        case .data(let data):
            if case .byteBuffer(let buffer) = data.data { open[streamID]?.answer.body += buffer.readableBytesView }
            if data.endStream { complete(streamID) }
        case .rstStream(let code):
            open.removeValue(forKey: streamID)?.promise.fail(
                ManagementStreamError("the server reset the request (\(code))")
            )
        case .goAway(let lastStreamID, let code, _):
            // Streams above the last one the server names were never processed (§6.8).
            closed = "the server is closing the connection (GOAWAY \(code))"
            let last = Int32(Int(lastStreamID))
            for id in open.keys.sorted() where id > last {
                open.removeValue(forKey: id)?.promise.fail(ManagementStreamError(closed!))
            }
            closeIfDone()
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = closed ?? "the connection to the channel management API closed"
        failAll(closed!)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        closed = "the connection failed: \(error)"
        failAll(closed!)
        context.close(promise: nil)
    }

    private func complete(_ streamID: Int32) {
        guard let done = open.removeValue(forKey: streamID) else { return }
        done.promise.succeed(done.answer)
        closeIfDone()
    }

    /// After GOAWAY, the connection closes once its last request is answered: the next request
    /// opens another (``ManagementConnection``).
    private func closeIfDone() {
        if closed != nil && open.isEmpty { context?.close(promise: nil) }
    }

    private func failAll(_ reason: String) {
        let failed = open
        open = [:]
        for (_, request) in failed { request.promise.fail(ManagementStreamError(reason)) }
    }
}

/// Why a channel management request got no answer on its connection.
struct ManagementStreamError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Whether a channel manager's connection stopped taking requests (GOAWAY, an error, its
/// close), readable off its event loop.
final class ManagementStreamsRetired: Sendable {
    let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .relaxed) }
}
