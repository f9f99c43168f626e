import NIOCore
import NIOHTTP1

/// Protects the status server from clients that misbehave, on each connection's event loop.
///
/// It sits after NIO's HTTP/1 codec and pipelining handler and before the connection's
/// `NIOAsyncChannel`:
///
/// - **Deadline.** A connection is closed when it has neither completed a request nor been sent
///   the end of a response for `timeout`. That closes idle keep-alive connections, clients that
///   stall halfway through a request, clients that trickle a header a byte at a time (which a
///   read-idle timer would never close) and clients that stop reading their answer.
/// - **Malformed requests** (any `HTTPParserError`) get `400 Bad Request`, a header section
///   larger than the decoder's limits gets `431 Request Header Fields Too Large`, and the
///   connection is closed. The decoder's limits bound what it buffers.
/// - **Bodies** beyond `maximumBodyBytes` get `413 Content Too Large` and a close; smaller ones
///   are passed on (and ignored by the routes).
/// - **Lifetime.** Once the connection is `maximumAge` old, the next answer to begin (the one to
///   the request in progress, if any) says `Connection: close`, and the connection is closed as
///   soon as that answer has been written. A client that keeps re-arming the deadline with
///   requests cannot hold its slot for longer; an idle one is closed by the deadline. An idle
///   connection is not closed at its age: a request crossing that close would be lost.
///
/// Once it has refused a request it drops all further input and errors until the connection is
/// closed.
final class StatusRequestGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let timeout: TimeAmount
    private let maximumAge: TimeAmount
    private let maximumBodyBytes: Int
    private var deadline: Scheduled<Void>?
    /// Fires `maximumAge` after activation.
    private var lifetime: Scheduled<Void>?
    private var lifetimeArmed = false
    /// The connection is `maximumAge` old: the next answer to begin says `Connection: close`.
    private var expired = false
    /// The answer being written says `Connection: close`: close once its end is written.
    private var closeAfterResponse = false
    private var bodyBytes = 0
    private var responseInProgress = false
    private var refusing = false

    init(timeout: TimeAmount, maximumAge: TimeAmount, maximumBodyBytes: Int) {
        self.timeout = timeout
        self.maximumAge = maximumAge
        self.maximumBodyBytes = maximumBodyBytes
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive {
            armDeadline(context: context)
            armLifetime(context: context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelDeadline()
        cancelLifetime()
    }

    func channelActive(context: ChannelHandlerContext) {
        armDeadline(context: context)
        armLifetime(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelDeadline()
        cancelLifetime()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refusing else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            bodyBytes = 0
            if let length = head.headers.first(name: "Content-Length").flatMap(Int.init), length > maximumBodyBytes {
                refuse(context: context, status: .payloadTooLarge, "request bodies are not accepted")
                return
            }
        case .body(let chunk):
            bodyBytes += chunk.readableBytes
            if bodyBytes > maximumBodyBytes {
                refuse(context: context, status: .payloadTooLarge, "request bodies are not accepted")
                return
            }
        case .end:
            armDeadline(context: context)
        }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if refusing {
            return
        }
        if let parserError = error as? HTTPParserError {
            if case .headerOverflow = parserError {
                refuse(
                    context: context,
                    status: .requestHeaderFieldsTooLarge,
                    "the request's header section is too large"
                )
            } else {
                refuse(context: context, status: .badRequest, "malformed HTTP/1 request")
            }
            return
        }
        context.fireErrorCaught(error)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head) where head.status.code >= 200:
            responseInProgress = true
            if expired {
                closeAfterResponse = true
                head.headers.replaceOrAdd(name: "Connection", value: "close")
                context.write(wrapOutboundOut(.head(head)), promise: promise)
                return
            }
        case .head, .body:
            break
        case .end:
            responseInProgress = false
            armDeadline(context: context)
            if closeAfterResponse {
                closeAfterWriting(data, context: context, promise: promise)
                return
            }
        }
        context.write(data, promise: promise)
    }

    /// Writes the end of an answer that said `Connection: close`, then closes the connection.
    private func closeAfterWriting(_ data: NIOAny, context: ChannelHandlerContext, promise: EventLoopPromise<Void>?) {
        let written = promise ?? context.eventLoop.makePromise()
        let loopBoundContext = context.loopBound
        written.futureResult.assumeIsolated().whenComplete { _ in
            loopBoundContext.value.close(promise: nil)
        }
        context.write(data, promise: written)
    }

    /// Answers `status` with `Connection: close` (unless a response has already begun) and
    /// closes the connection once the answer is flushed.
    private func refuse(context: ChannelHandlerContext, status: HTTPResponseStatus, _ reason: String) {
        refusing = true
        cancelDeadline()
        guard !responseInProgress else {
            context.close(promise: nil)
            return
        }
        let body = ByteBuffer(string: reason + "\n")
        let headers = HTTPHeaders([
            ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", String(body.readableBytes)),
            ("Connection", "close"),
        ])
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
            promise: nil
        )
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        let loopBoundContext = context.loopBound
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            loopBoundContext.value.close(promise: nil)
        }
        // If the client never reads the answer, the flush never completes: close anyway.
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    private func armDeadline(context: ChannelHandlerContext) {
        guard !refusing else { return }
        deadline?.cancel()
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    private func cancelDeadline() {
        deadline?.cancel()
        deadline = nil
    }

    /// Once per connection, from its activation.
    private func armLifetime(context: ChannelHandlerContext) {
        guard !lifetimeArmed else { return }
        lifetimeArmed = true
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        lifetime = context.eventLoop.scheduleTask(in: maximumAge) {
            handler.value.expired = true
        }
    }

    private func cancelLifetime() {
        lifetime?.cancel()
        lifetime = nil
    }
}
