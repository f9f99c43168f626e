import NIOCore
import NIOPosix

/// Opens the TCP connections of every APNs client (binary gateway, feedback service, HTTP/2
/// API, channel management): directly, or through an ``APNSProxy``'s `CONNECT` tunnel.
public enum APNSConnector {
    /// Connects to `host:port`, through `proxy` when there is one, and returns what
    /// `initializer` made of the channel once the connection (or the tunnel) is open.
    ///
    /// `initializer` adds the client's handlers (TLS first) while the channel is not yet
    /// active, as a bootstrap's channel initializer does. With a proxy, a
    /// ``HTTPConnectTunnelHandler`` sits in front of them: the handlers see `channelActive`
    /// only once the proxy has answered `2xx`, by which time it has left the pipeline, so TLS
    /// runs inside the tunnel exactly as it runs on a direct connection. A proxy that refuses,
    /// cannot be reached or does not answer within `connectTimeout` (counted from the start of
    /// the TCP connect) fails the returned future with an ``APNSError`` whose sentence names
    /// the proxy (never its credentials); the handlers never see that channel.
    public static func connect<Output: Sendable>(
        host: String,
        port: Int,
        proxy: APNSProxy?,
        group: any EventLoopGroup,
        connectTimeout: TimeAmount,
        configure: (ClientBootstrap) -> ClientBootstrap = { $0 },
        initializer: @escaping @Sendable (any Channel) throws -> Output
    ) -> EventLoopFuture<Output> {
        let loop = group.next()
        let output = loop.makePromise(of: Output.self)
        let bootstrap = configure(ClientBootstrap(group: loop).connectTimeout(connectTimeout))
        guard let proxy else {
            let connected =
                bootstrap
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        do {
                            output.succeed(try initializer(channel))
                        } catch {
                            output.fail(error)
                            throw error
                        }
                    }
                }
                .connect(host: host, port: port)
            connected.whenFailure { output.fail($0) }
            return connected.flatMap { _ in output.futureResult }
        }

        let tunnel = loop.makePromise(of: Void.self)
        let target = endpoint(host: host, port: port)
        let connected =
            bootstrap
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    do {
                        try channel.pipeline.syncOperations.addHandler(
                            HTTPConnectTunnelHandler(
                                proxy: proxy,
                                target: target,
                                timeout: connectTimeout,
                                established: tunnel
                            )
                        )
                        output.succeed(try initializer(channel))
                    } catch {
                        output.fail(error)
                        tunnel.fail(error)
                        throw error
                    }
                }
            }
            .connect(host: proxy.host, port: proxy.port)
        connected.whenFailure { error in
            // A tunnel that already failed (its timer fired during the TCP connect) keeps its
            // own error.
            tunnel.fail(ProxyFailure.unreachable(proxy, connectTimeout: connectTimeout, error: error))
            output.fail(error)
        }
        return tunnel.futureResult.flatMap { output.futureResult }
    }

    /// `host:port` as written in a `CONNECT` request: an IPv6 host in brackets.
    static func endpoint(host: String, port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}

/// The sentences of a failed tunnel.
enum ProxyFailure {
    static func unreachable(_ proxy: APNSProxy, connectTimeout: TimeAmount, error: any Error) -> APNSError {
        if let error = error as? APNSError { return error }
        if isTimeout(error) {
            return APNSError(
                .timeout,
                "the proxy at \(proxy.endpoint) did not accept a connection within \(describe(connectTimeout))"
            )
        }
        return APNSError(
            .proxyUnreachable,
            "cannot reach the proxy at \(proxy.endpoint)",
            underlying: error
        )
    }

    static func refused(_ proxy: APNSProxy, target: String, status: Int, reason: String) -> APNSError {
        let answer = "\(status)\(reason.isEmpty ? "" : " \(reason)")"
        let message: String
        switch status {
        // 407 is the standard answer (RFC 9110 §15.5.8); some proxies (tinyproxy among them)
        // answer credentials they reject with 401.
        case 401 where proxy.username == nil, 407 where proxy.username == nil:
            message =
                "the proxy at \(proxy.endpoint) requires authentication (\(answer)) for the tunnel to \(target); "
                + "give a user and password in the proxy URL (http://user:password@host:port)"
        case 401, 407:
            message =
                "the proxy at \(proxy.endpoint) refused the credentials in the proxy URL (\(answer)) for the "
                + "tunnel to \(target); check the user and password"
        case 403:
            message =
                "the proxy at \(proxy.endpoint) refused the tunnel to \(target) (\(answer)); the proxy's rules must "
                + "allow CONNECT to that host and port"
        default:
            message = "the proxy at \(proxy.endpoint) answered \(answer) to the CONNECT to \(target)"
        }
        return APNSError(.proxyRefused, message)
    }

    static func noAnswer(_ proxy: APNSProxy, target: String, timeout: TimeAmount) -> APNSError {
        APNSError(
            .timeout,
            "the proxy at \(proxy.endpoint) did not open the tunnel to \(target) within \(describe(timeout))"
        )
    }

    static func closed(_ proxy: APNSProxy, target: String) -> APNSError {
        APNSError(
            .proxyUnreachable,
            "the proxy at \(proxy.endpoint) closed the connection before answering the CONNECT to \(target)"
        )
    }

    static func malformed(_ proxy: APNSProxy, target: String) -> APNSError {
        APNSError(
            .proxyUnreachable,
            "the proxy at \(proxy.endpoint) answered the CONNECT to \(target) with something that is not HTTP/1.x"
        )
    }

    private static func isTimeout(_ error: any Error) -> Bool {
        if case ChannelError.connectTimeout = error { return true }
        if let error = error as? NIOConnectionError {
            return error.connectionErrors.contains {
                if case ChannelError.connectTimeout = $0.error { true } else { false }
            }
        }
        return false
    }

    static func describe(_ time: TimeAmount) -> String {
        let milliseconds = time.nanoseconds / 1_000_000
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
    }
}

/// Opens an HTTP `CONNECT` tunnel (RFC 9110 §9.3.6) on a new connection to a proxy, then leaves
/// the pipeline.
///
/// Added first, before the client's handlers. It holds back `channelActive` from them, sends
/// the request when the connection to the proxy is up, and reads the answer's head (status
/// line and header fields, at most 16 KiB). On a `2xx` it completes `established`, passes
/// `channelActive` (and any bytes that followed the head) on, and removes itself. Anything
/// else — another status, the connection closed or an error before the answer, no answer
/// within `timeout` from when it was added — fails `established` and closes the channel;
/// the handlers behind it see neither `channelActive` nor `channelInactive`.
final class HTTPConnectTunnelHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        case connecting
        case awaitingAnswer
        case established
        case failed
    }

    /// The most bytes of answer head read before giving up on it.
    static let maxHeadLength = 16 << 10

    private let proxy: APNSProxy
    private let target: String
    private let timeout: TimeAmount
    private let established: EventLoopPromise<Void>
    private var state = State.connecting
    private var received: ByteBuffer?
    private var timer: Scheduled<Void>?

    init(proxy: APNSProxy, target: String, timeout: TimeAmount, established: EventLoopPromise<Void>) {
        self.proxy = proxy
        self.target = target
        self.timeout = timeout
        self.established = established
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            handler.fail(
                ProxyFailure.noAnswer(handler.proxy, target: handler.target, timeout: handler.timeout),
                context
            )
        }
        if context.channel.isActive { sendRequest(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        // The pipeline went away (the channel closed) before an answer. While still connecting,
        // the connect's own error, which the connector passes on, says more.
        if state == .awaitingAnswer { established.fail(ProxyFailure.closed(proxy, target: target)) }
    }

    func channelActive(context: ChannelHandlerContext) {
        sendRequest(context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        switch state {
        case .connecting, .awaitingAnswer:
            fail(ProxyFailure.closed(proxy, target: target), context)
        case .failed:
            break
        case .established:
            context.fireChannelInactive()
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch state {
        case .connecting, .awaitingAnswer:
            fail(
                APNSError(
                    .proxyUnreachable,
                    "the connection to the proxy at \(proxy.endpoint) failed before it answered the CONNECT to \(target)",
                    underlying: error
                ),
                context
            )
        case .failed:
            break
        case .established:
            context.fireErrorCaught(error)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state == .awaitingAnswer else {
            if state == .established { context.fireChannelRead(data) }
            return
        }
        var bytes = unwrapInboundIn(data)
        if received == nil {
            received = bytes
        } else {
            received!.writeBuffer(&bytes)
        }
        guard let answer = received, let head = Self.parseHead(answer.readableBytesView) else {
            if received!.readableBytes > Self.maxHeadLength {
                fail(ProxyFailure.malformed(proxy, target: target), context)
            }
            return
        }
        switch head {
        case .malformed:
            fail(ProxyFailure.malformed(proxy, target: target), context)
        case .answer(let status, _, let length) where (200..<300).contains(status):
            state = .established
            timer?.cancel()
            var rest = answer
            rest.moveReaderIndex(forwardBy: length)
            received = nil
            established.succeed()
            context.fireChannelActive()
            if rest.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(rest)) }
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        case .answer(let status, let reason, _):
            fail(ProxyFailure.refused(proxy, target: target, status: status, reason: reason), context)
        }
    }

    private func sendRequest(context: ChannelHandlerContext) {
        guard state == .connecting else { return }
        state = .awaitingAnswer
        var request = "CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\n"
        if let authorization = proxy.authorization { request += "Proxy-Authorization: \(authorization)\r\n" }
        request += "\r\n"
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: request)), promise: nil)
    }

    private func fail(_ error: APNSError, _ context: ChannelHandlerContext) {
        guard state == .connecting || state == .awaitingAnswer else { return }
        let connected = state == .awaitingAnswer
        state = .failed
        timer?.cancel()
        received = nil
        if connected {
            // Closed before the promise fails: what the channel's initializer built (a
            // `NIOAsyncChannel`, say) may be released as the promise fails, and must find its
            // channel closed by then (SwiftNIO traps on one released while its channel is open).
            context.close(promise: nil)
            established.fail(error)
        } else {
            // Still connecting: failed first, so that the connect's failure, which closing
            // causes, finds the tunnel's own error already there.
            established.fail(error)
            context.close(promise: nil)
        }
    }

    enum Head: Equatable {
        /// The status, its reason phrase and the length of the head, blank line included.
        case answer(status: Int, reason: String, length: Int)
        case malformed
    }

    /// The head of an HTTP/1.x answer at the start of `bytes`, or `nil` while its blank line
    /// has not arrived.
    static func parseHead(_ bytes: some Collection<UInt8>) -> Head? {
        let array = Array(bytes)
        // The status line decides early whether this is HTTP at all.
        let prefix = Array("HTTP/1.".utf8)
        if !array.starts(with: prefix.prefix(array.count)) { return .malformed }
        guard array.count >= 4 else { return nil }
        var end: Int?
        for index in 3..<array.count
        where array[index] == 10 && array[index - 1] == 13 && array[index - 2] == 10 && array[index - 3] == 13 {
            end = index + 1
            break
        }
        guard let end else { return nil }
        guard let lineEnd = array.firstIndex(of: 13) else { return .malformed }
        let line = String(decoding: array[..<lineEnd], as: UTF8.self)
        // HTTP/1.x SP status SP reason
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].count == 8, parts[1].count == 3, let status = Int(parts[1]),
            (100...599).contains(status)
        else { return .malformed }
        return .answer(status: status, reason: parts.count == 3 ? String(parts[2]) : "", length: end)
    }
}
