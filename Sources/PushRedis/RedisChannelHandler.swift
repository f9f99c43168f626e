import NIOCore

/// Commands on their way to the server: their encoded bytes, how many replies they produce,
/// how long the replies may take, and the promise that receives the replies in order.
struct RedisRequest: Sendable {
    var bytes: ByteBuffer
    var replyCount: Int
    var timeout: TimeAmount
    var promise: EventLoopPromise<[RedisValue]>
}

/// Why a ``RedisChannelHandler`` failed its requests; the connection words it for people.
enum RedisChannelFailure: Error, Sendable {
    /// A request's replies did not all arrive within its timeout.
    case timeout
    /// The channel closed (the server hung up, or the connection was closed locally).
    case closed
    /// hiredis could not parse the bytes, or a reply arrived that nobody asked for.
    case `protocol`(RedisError)
    /// The channel reported an error (I/O, TLS).
    case channel(any Error)
}

/// Matches replies to requests on one channel: requests are written in order, and hiredis'
/// parser turns the bytes read into replies, which go to the oldest waiting request.
///
/// Any failure (a timeout, a parse error, a channel error, the channel closing) fails every
/// waiting request and every later one with the same ``RedisChannelFailure`` and closes the
/// channel: a late reply could otherwise be taken as the answer to a newer request. The
/// number of waiting requests is bounded by the connection's callers, each of whom waits
/// for its replies.
final class RedisChannelHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = RedisRequest
    typealias OutboundOut = ByteBuffer

    private struct Waiting {
        var remaining: Int
        var replies: [RedisValue]
        let promise: EventLoopPromise<[RedisValue]>
        let timeout: Scheduled<Void>
    }

    private let reader: HiredisReplyReader?
    private var waiting = CircularBuffer<Waiting>()
    private var failure: RedisChannelFailure?
    private let closeReason: EventLoopPromise<RedisChannelFailure>

    /// `closeReason` receives the first failure: a request written after the channel closed
    /// never reaches the handler, and its sender reads the reason there instead.
    init(closeReason: EventLoopPromise<RedisChannelFailure>) {
        reader = HiredisReplyReader()
        self.closeReason = closeReason
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        if let failure {
            request.promise.fail(failure)
            promise?.fail(failure)
            return
        }
        let timeout = context.eventLoop.assumeIsolated().scheduleTask(in: request.timeout) { [self] in
            fail(.timeout, context: context)
        }
        var replies: [RedisValue] = []
        replies.reserveCapacity(request.replyCount)
        waiting.append(
            Waiting(remaining: request.replyCount, replies: replies, promise: request.promise, timeout: timeout)
        )
        context.write(wrapOutboundOut(request.bytes), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard failure == nil else { return }
        guard let reader else {
            fail(.protocol(RedisError(.connection, "hiredis could not allocate a reply reader")), context: context)
            return
        }
        let buffer = unwrapInboundIn(data)
        do throws(RedisError) {
            try buffer.withUnsafeReadableBytes { bytes in Result { () throws(RedisError) in try reader.feed(bytes) } }
                .get()
            while let reply = try reader.next() {
                guard !waiting.isEmpty else {
                    throw RedisError(.protocol, "the server sent a reply that no command asked for")
                }
                waiting[waiting.startIndex].replies.append(reply)
                waiting[waiting.startIndex].remaining -= 1
                if waiting[waiting.startIndex].remaining == 0 {
                    let done = waiting.removeFirst()
                    done.timeout.cancel()
                    done.promise.succeed(done.replies)
                }
            }
        } catch {
            fail(.protocol(error), context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(.channel(error), context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(.closed, context: context)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        fail(.closed, context: context)
    }

    /// Records the first failure, fails everything waiting and closes the channel.
    private func fail(_ reason: RedisChannelFailure, context: ChannelHandlerContext) {
        guard failure == nil else { return }
        failure = reason
        closeReason.succeed(reason)
        while let entry = waiting.popFirst() {
            entry.timeout.cancel()
            entry.promise.fail(reason)
        }
        context.close(promise: nil)
    }
}
