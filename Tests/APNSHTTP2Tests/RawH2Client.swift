import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL

/// A minimal HTTP/2 client for testing the simulator: TLS with ALPN `h2`, NIOHTTP2Handler
/// without a multiplexer, frames written directly. It sends any header block (header
/// validation is off), and records the SETTINGS and GOAWAY frames it receives.
final class RawH2Client: Sendable {
    /// One response, or how the stream ended without one.
    struct Response: Sendable {
        var streamID: Int
        var status: Int?
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        /// END_STREAM came on the HEADERS frame (no DATA frame).
        var endStreamOnHeaders = false
        var dataFrames = 0
        /// The stream was reset (by RST_STREAM or a GOAWAY that excluded it) or the connection closed.
        var reset: HTTP2ErrorCode?

        func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
        var errorBody: APNSErrorBody? { APNSErrorBody(bytes: body) }
        var reason: String? { errorBody?.reason.rawValue }
    }

    struct GoAway: Sendable {
        var lastStreamID: Int
        var errorCode: HTTP2ErrorCode
        var debugData: [UInt8]?
    }

    let channel: any Channel
    private let handler: NIOLoopBound<Handler>

    private init(channel: any Channel, handler: NIOLoopBound<Handler>) {
        self.channel = channel
        self.handler = handler
    }

    /// Connects with TLS (ALPN `h2`), optionally presenting a client certificate.
    static func connect(
        port: Int,
        certificates: TestCertificates,
        clientCertificate: TestCertificates.Pair? = nil,
        alpn: [String] = ["h2"]
    ) async throws -> RawH2Client {
        try await connect(
            port: port,
            caPEM: certificates.ca.certificatePEM,
            clientCertificate: clientCertificate.map { ($0.certificatePEM, $0.keyPEM) },
            alpn: alpn
        )
    }

    /// Connects with TLS (ALPN `h2`) trusting `caPEM`, optionally presenting a client certificate.
    static func connect(
        host: String = "127.0.0.1",
        port: Int,
        caPEM: String,
        clientCertificate: (certificatePEM: String, keyPEM: String)?,
        alpn: [String] = ["h2"]
    ) async throws -> RawH2Client {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(caPEM.utf8)))
        tls.applicationProtocols = alpn
        if let pair = clientCertificate {
            tls.certificateChain = try NIOSSLCertificate.fromPEMBytes(Array(pair.certificatePEM.utf8)).map {
                .certificate($0)
            }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(pair.keyPEM.utf8), format: .pem))
        }
        let context = try NIOSSLContext(configuration: tls)
        let (channel, handler) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    let handler = Handler()
                    try sync.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    try sync.addHandler(
                        NIOHTTP2Handler(
                            mode: .client,
                            initialSettings: nioDefaultSettings,
                            headerBlockValidation: .disabled
                        )
                    )
                    try sync.addHandler(handler)
                    return (channel, NIOLoopBound(handler, eventLoop: channel.eventLoop))
                }
            }
        return RawH2Client(channel: channel, handler: handler)
    }

    /// Sends the requests back to back (each flushed as written) and returns the responses in order.
    /// With `flushEach` off the whole batch goes out with one flush (NIOHTTP2 then sends all
    /// HEADERS frames before the DATA frames).
    func send(
        _ requests: [(headers: [(String, String)], body: [UInt8])],
        flushEach: Bool = true
    ) async throws -> [Response] {
        let handler = self.handler
        let futures = try await channel.eventLoop.submit {
            handler.value.send(requests, flushEach: flushEach)
        }.get()
        var responses: [Response] = []
        for future in futures {
            responses.append(try await future.get())
        }
        return responses
    }

    func send(headers: [(String, String)], body: [UInt8]) async throws -> Response {
        try await send([(headers, body)])[0]
    }

    /// The MAX_CONCURRENT_STREAMS values of the SETTINGS frames received, in order.
    var limits: [Int] {
        get async throws {
            let handler = self.handler
            return try await channel.eventLoop.submit { handler.value.limits }.get()
        }
    }

    var goAways: [GoAway] {
        get async throws {
            let handler = self.handler
            return try await channel.eventLoop.submit { handler.value.goAways }.get()
        }
    }

    /// Waits until the received SETTINGS limits satisfy `condition`; fails after `timeout`.
    func waitForLimits(
        timeout: TimeAmount = .seconds(10),
        _ condition: @escaping @Sendable ([Int]) -> Bool
    ) async throws -> [Int] {
        let handler = self.handler
        try await channel.eventLoop.flatSubmit {
            handler.value.wait(timeout: timeout) { condition($0.limits) }
        }.get()
        return try await limits
    }

    /// Waits for a GOAWAY; fails after `timeout`.
    func waitForGoAway(timeout: TimeAmount = .seconds(10)) async throws -> GoAway {
        let handler = self.handler
        try await channel.eventLoop.flatSubmit {
            handler.value.wait(timeout: timeout) { !$0.goAways.isEmpty }
        }.get()
        return try await goAways[0]
    }

    /// Waits until the server closes the connection; throws ``Timeout`` if it has not after
    /// `timeout` (the client then closes it, so that the test does not hang).
    func waitForClose(timeout: TimeAmount = .seconds(10)) async throws {
        let channel = self.channel
        // Set up on the channel's event loop, where both closures run.
        let closedByTimer = channel.eventLoop.flatSubmit {
            let timedOut = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
            let timer = channel.eventLoop.scheduleTask(in: timeout) {
                timedOut.value = true
                channel.close(promise: nil)
            }
            return channel.closeFuture.map { _ in
                timer.cancel()
                return timedOut.value
            }
        }
        if try await closedByTimer.get() {
            throw Timeout()
        }
    }

    func close() async {
        try? await channel.close()
    }

    struct Timeout: Error {}

    /// The connection's handler: allocates stream IDs, writes frames and gathers responses.
    final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTP2Frame
        typealias OutboundOut = HTTP2Frame

        private var context: ChannelHandlerContext?
        private var nextStreamID = 1
        private var pending: [HTTP2StreamID: (Response, EventLoopPromise<Response>)] = [:]
        private(set) var limits: [Int] = []
        private(set) var goAways: [GoAway] = []
        private var waiters: [(id: Int, check: (Handler) -> Bool, promise: EventLoopPromise<Void>)] = []
        private var nextWaiter = 0
        /// Set once the connection is closed: what is sent after that is answered at once.
        private var closed = false

        func handlerAdded(context: ChannelHandlerContext) { self.context = context }

        func send(
            _ requests: [(headers: [(String, String)], body: [UInt8])],
            flushEach: Bool
        ) -> [EventLoopFuture<Response>] {
            guard let context else { return [] }
            var futures: [EventLoopFuture<Response>] = []
            for request in requests {
                let id = HTTP2StreamID(nextStreamID)
                nextStreamID += 2
                let promise = context.eventLoop.makePromise(of: Response.self)
                pending[id] = (Response(streamID: Int(id)), promise)
                futures.append(promise.futureResult)
                // A request the server never answers fails the test instead of hanging it.
                context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(20)) {
                    self.pending.removeValue(forKey: id)?.1.fail(Timeout())
                }
                var headers = HPACKHeaders()
                for (name, value) in request.headers {
                    headers.add(
                        name: name,
                        value: value,
                        indexing: name == "authorization" ? .nonIndexable : .indexable
                    )
                }
                let empty = request.body.isEmpty
                context.write(
                    NIOAny(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: empty)))),
                    promise: nil
                )
                var offset = 0
                while offset < request.body.count {
                    let end = min(offset + 16384, request.body.count)
                    var buffer = context.channel.allocator.buffer(capacity: end - offset)
                    buffer.writeBytes(request.body[offset..<end])
                    context.write(
                        NIOAny(
                            HTTP2Frame(
                                streamID: id,
                                payload: .data(.init(data: .byteBuffer(buffer), endStream: end == request.body.count))
                            )
                        ),
                        promise: nil
                    )
                    offset = end
                }
                // NIOHTTP2 holds DATA frames until a flush: flushing per request keeps each
                // request's frames together on the wire, in order.
                if flushEach { context.flush() }
            }
            if !flushEach { context.flush() }
            // A flush can close the connection on the spot (the server may already have sent
            // GOAWAY and closed), and channelInactive settles only what was pending by then.
            if closed { settleAfterClose() }
            return futures
        }

        /// Every pending request ends unanswered (`reset` `.cancel` unless the server reset it).
        private func settleAfterClose() {
            for (id, entry) in pending {
                var response = entry.0
                response.reset = response.reset ?? .cancel
                finish(id, response)
            }
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = unwrapInboundIn(data)
            switch frame.payload {
            case .headers(let headers):
                guard var entry = pending[frame.streamID] else { return }
                for (name, value, _) in headers.headers {
                    if name == ":status" { entry.0.status = Int(value) }
                    entry.0.headers.append((name, value))
                }
                pending[frame.streamID] = entry
                if headers.endStream {
                    entry.0.endStreamOnHeaders = true
                    finish(frame.streamID, entry.0)
                }
            case .data(let data):
                guard var entry = pending[frame.streamID] else { return }
                entry.0.dataFrames += 1
                if case .byteBuffer(let buffer) = data.data { entry.0.body += buffer.readableBytesView }
                pending[frame.streamID] = entry
                if data.endStream { finish(frame.streamID, entry.0) }
            case .rstStream(let code):
                if var entry = pending[frame.streamID] {
                    entry.0.reset = code
                    finish(frame.streamID, entry.0)
                }
            case .settings(.settings(let settings)):
                for setting in settings where setting.parameter == .maxConcurrentStreams {
                    limits.append(setting.value)
                }
                checkWaiters()
            case .goAway(let last, let code, let data):
                goAways.append(
                    GoAway(
                        lastStreamID: Int(last),
                        errorCode: code,
                        debugData: data.map { Array($0.readableBytesView) }
                    )
                )
                checkWaiters()
            default:
                break
            }
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let update = event as? NIOHTTP2WindowUpdatedEvent, update.streamID == .rootStream,
                let window = update.inboundWindowSize, window < 32768
            {
                // Keep the connection window open for the server's error bodies.
                context.writeAndFlush(
                    NIOAny(
                        HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: 65535 - window))
                    ),
                    promise: nil
                )
            } else if let closed = event as? StreamClosedEvent, var entry = pending[closed.streamID] {
                entry.0.reset = closed.reason ?? .cancel
                finish(closed.streamID, entry.0)
            }
            context.fireUserInboundEventTriggered(event)
        }

        func channelInactive(context: ChannelHandlerContext) {
            closed = true
            settleAfterClose()
            checkWaiters()
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            // Stream errors are reported through the stream; the rest closes the connection.
            if error is NIOHTTP2Errors.StreamError { return }
            context.close(promise: nil)
        }

        private func finish(_ id: HTTP2StreamID, _ response: Response) {
            guard let entry = pending.removeValue(forKey: id) else { return }
            entry.1.succeed(response)
        }

        func wait(timeout: TimeAmount, _ check: @escaping (Handler) -> Bool) -> EventLoopFuture<Void> {
            guard let context else { return MultiThreadedEventLoopGroup.singleton.any().makeFailedFuture(Timeout()) }
            let promise = context.eventLoop.makePromise(of: Void.self)
            if check(self) {
                promise.succeed()
                return promise.futureResult
            }
            nextWaiter += 1
            let id = nextWaiter
            waiters.append((id, check, promise))
            context.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
                guard let index = self.waiters.firstIndex(where: { $0.id == id }) else { return }
                self.waiters.remove(at: index)
                promise.fail(Timeout())
            }
            return promise.futureResult
        }

        private func checkWaiters() {
            let ready = waiters.filter { $0.check(self) }
            waiters.removeAll { $0.check(self) }
            for waiter in ready { waiter.promise.succeed() }
        }
    }
}
