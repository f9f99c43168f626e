import APNSCore
import APNSHTTP2Core
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOTLS

/// What became of one stream, reported to the client in batches.
enum StreamResult: Sendable {
    /// The server answered.
    case answered(QueuedRequest, status: Int, headers: HPACKHeaders, body: [UInt8])
    /// The server certainly did not process it: above a GOAWAY's last-stream-id, or reset with
    /// `REFUSED_STREAM` (RFC 9113 §6.8, §8.7).
    case unprocessed(QueuedRequest)
    /// No answer, and the server may have processed it: reset with another code, or the
    /// connection closed.
    case unknown(QueuedRequest, reason: String)

    /// The request the stream carried.
    var request: QueuedRequest {
        switch self {
        case .answered(let request, _, _, _), .unprocessed(let request), .unknown(let request, _): request
        }
    }
}

/// One HTTP/2 connection to APNs, at the frame level: ``HTTP2FrameCodec`` below it and no
/// child channel per stream, so a stream costs a dictionary entry and two frames.
///
/// Everything here runs on the connection's event loop. The client decides what to send; the
/// handler writes it, matches answers to streams and reports them once per read burst.
final class HTTP2ConnectionHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private struct OpenStream {
        var request: QueuedRequest
        var status: Int?
        var headers: HPACKHeaders?
        var body: [UInt8] = []
    }

    let id: Int
    private let client: APNSHTTP2Client
    /// The frame layer right below: requests are written into it directly.
    private let codec: HTTP2FrameCodec
    private let authority: String
    private let pingInterval: TimeAmount
    private let pingTimeout: TimeAmount
    private let idleTimeout: TimeAmount?
    private var context: ChannelHandlerContext?
    private var streams: [Int32: OpenStream] = [:]
    private var nextStreamID: Int32 = 1
    private var results: [StreamResult] = []
    private var ready = false
    private var goAwayLastStream: Int32?
    private var lastRead = NIODeadline.now()
    private var lastStreamActivity = NIODeadline.now()
    private var pingSentAt: NIODeadline?
    private var tick: RepeatedTask?
    private var closeReason: String?
    /// Why the connection failed before it got ready, once that is known.
    private var failure: APNSPoolSnapshot.ConnectFailure?
    /// Why the handler closed an open connection itself (a PING left unanswered).
    private var cause: APNSPoolSnapshot.CloseReason?
    /// Set while the handler is inside `channelRead`/`channelReadComplete`, so a pump
    /// requested meanwhile is folded into the flush at the end of the burst.
    private var inReadBurst = false
    private var reportedClosed = false

    /// Stream ids are 31 bits and never reused: a connection this close to the end is replaced.
    static let streamIDLimit: Int32 = Int32.max - 4096

    init(
        id: Int,
        client: APNSHTTP2Client,
        codec: HTTP2FrameCodec,
        authority: String,
        configuration: APNSHTTP2Configuration
    ) {
        self.id = id
        self.client = client
        self.codec = codec
        self.authority = authority
        self.pingInterval = configuration.pingInterval.timeAmount
        self.pingTimeout = configuration.pingTimeout.timeAmount
        self.idleTimeout = configuration.idleTimeout?.timeAmount
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func channelActive(context: ChannelHandlerContext) {
        let period = [pingInterval, pingTimeout, idleTimeout ?? pingInterval].min()!
        let every = TimeAmount.nanoseconds(max(10_000_000, min(1_000_000_000, period.nanoseconds / 4)))
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        tick = context.eventLoop.scheduleRepeatedTask(initialDelay: every, delay: every) { _ in
            loopBound.value.onTick()
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        reportClosed()
        context.fireChannelInactive()
    }

    /// Hands every stream still open to the client as unanswered, once.
    func reportClosed() {
        guard !reportedClosed else { return }
        reportedClosed = true
        tick?.cancel()
        tick = nil
        let reason = closeReason ?? "the server closed the connection"
        let unanswered = streams.values.map { StreamResult.unknown($0.request, reason: reason) }
        streams.removeAll()
        let pending = results + unanswered
        results.removeAll()
        client.connectionClosed(
            id: id,
            results: pending,
            wasReady: ready,
            reason: reason,
            failure: failure ?? .other,
            cause: cause
        )
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? StreamClosedEvent {
            let streamID = Int32(event.streamID)
            if let open = streams.removeValue(forKey: streamID) {
                // Closed without a complete answer.
                if event.reason == .refusedStream {
                    results.append(.unprocessed(open.request))
                } else {
                    results.append(
                        .unknown(
                            open.request,
                            reason:
                                "stream \(streamID) closed (\(event.reason.map { "\($0)" } ?? "no error")) without an answer"
                        )
                    )
                }
                if !inReadBurst { flushResults(context: context) }
            }
        } else if let event = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = event,
            negotiated != "h2"
        {
            // §3.1: APNs speaks HTTP/2 only.
            failure = failure ?? .tls
            close(
                context: context,
                reason: "the server did not agree to HTTP/2 (ALPN h2; it chose \(negotiated ?? "nothing"))"
            )
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !ready && failure == nil { failure = APNSPoolSnapshot.ConnectFailure(connectError: error) }
        client.connectionError(id: id, error: "\(error)")
        close(context: context, reason: "connection error: \(error)")
    }

    // MARK: Reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        inReadBurst = true
        lastRead = .now()
        pingSentAt = nil
        let frame = unwrapInboundIn(data)
        let streamID = Int32(frame.streamID)
        switch frame.payload {
        case .headers(let headers):
            guard var open = streams[streamID] else { break }
            if open.status == nil, let status = headers.headers.first(name: ":status").flatMap({ Int($0) }) {
                if status >= 100 && status < 200 { break }  // informational: the real answer follows
                open.status = status
                open.headers = headers.headers
            }
            if headers.endStream {
                streams[streamID] = nil
                complete(open)
            } else {
                streams[streamID] = open
            }
        case .data(let data):
            guard var open = streams[streamID] else { break }
            if case .byteBuffer(let buffer) = data.data, open.body.count + buffer.readableBytes <= 64 << 10 {
                open.body.append(contentsOf: buffer.readableBytesView)
            }
            if data.endStream {
                streams[streamID] = nil
                complete(open)
            } else {
                streams[streamID] = open
            }
        case .rstStream(let code):
            guard let open = streams.removeValue(forKey: streamID) else { break }
            if code == .refusedStream {
                results.append(.unprocessed(open.request))
            } else {
                results.append(.unknown(open.request, reason: "the server reset stream \(streamID) (\(code))"))
            }
        case .settings(.settings(let settings)):
            for setting in settings where setting.parameter == .maxConcurrentStreams {
                client.updateStreamLimit(id: id, limit: setting.value)
            }
            if !ready {
                // The server's first SETTINGS: TLS and HTTP/2 are up.
                ready = true
                let limit = settings.first { $0.parameter == .maxConcurrentStreams }?.value
                client.connectionReady(
                    id: id,
                    handler: NIOLoopBound(self, eventLoop: context.eventLoop),
                    initialLimit: limit
                )
            }
        case .goAway(let lastStreamID, let errorCode, let opaqueData):
            // §3.5: no new streams here; streams above last-stream-id were not processed and are
            // retried on another connection (RFC 9113 §6.8).
            let last = Int32(lastStreamID)
            goAwayLastStream = min(goAwayLastStream ?? last, last)
            let debug = APNSGoAwayDebugData(bytes: opaqueData.map { Array($0.readableBytesView) } ?? [])
            for streamID in streams.keys where streamID > last {
                if let open = streams.removeValue(forKey: streamID) { results.append(.unprocessed(open.request)) }
            }
            closeReason = "GOAWAY (\(errorCode), \(Self.describe(debug)))"
            client.goAway(id: id, reason: closeReason!)
            if streams.isEmpty { close(context: context, reason: closeReason!) }
        case .ping(_, ack: true):
            pingSentAt = nil
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushResults(context: context)
        inReadBurst = false
        context.fireChannelReadComplete()
    }

    private func complete(_ open: OpenStream) {
        lastStreamActivity = .now()
        guard let status = open.status else {
            results.append(.unknown(open.request, reason: "the server ended the stream without a :status"))
            return
        }
        results.append(.answered(open.request, status: status, headers: open.headers ?? [:], body: open.body))
    }

    /// Reports finished streams and writes what the client hands back.
    private func flushResults(context: ChannelHandlerContext) {
        let reported = results
        results.removeAll(keepingCapacity: true)
        let work = client.streamsFinished(id: id, results: reported, free: freeSlots)
        write(work, context: context)
        if goAwayLastStream != nil && streams.isEmpty {
            close(context: context, reason: closeReason ?? "GOAWAY")
        }
    }

    // MARK: Writing

    private var freeSlots: Bool { goAwayLastStream == nil && nextStreamID < Self.streamIDLimit }

    /// Asks the client for work and writes it. Called by the client on this event loop.
    func pump() {
        guard let context, context.channel.isActive else { return }
        if inReadBurst { return }  // the end of the burst asks anyway
        let work = client.take(id: id, free: freeSlots)
        write(work, context: context)
    }

    private func write(_ work: APNSHTTP2Client.Work, context: ChannelHandlerContext) {
        if work.close {
            close(context: context, reason: closeReason ?? "the client replaced the connection")
        }
        guard !work.requests.isEmpty else { return }
        if !freeSlots || !context.channel.isActive {
            // Cannot open streams here any more: hand them straight back.
            client.connectionClosedBeforeWrite(id: id, requests: work.requests)
            return
        }
        lastStreamActivity = .now()
        let writtenAt = lastStreamActivity.uptimeNanoseconds
        for request in work.requests {
            let streamID = nextStreamID
            nextStreamID += 2
            var request = request
            request.attempts += 1
            request.writes += 1
            request.writtenAt = writtenAt
            codec.writeRequest(request, streamID: streamID, authority: authority, authorization: work.authorization)
            streams[streamID] = OpenStream(request: request)
        }
        context.flush()
        if nextStreamID >= Self.streamIDLimit {
            client.goAway(id: id, reason: "stream ids are nearly used up", received: false)
        }
    }

    // MARK: Health

    private func onTick() {
        guard let context, context.channel.isActive else { return }
        let now = NIODeadline.now()
        if let sentAt = pingSentAt {
            if now - sentAt >= pingTimeout {
                // §3.5: the health check failed.
                cause = .other
                close(context: context, reason: "no PING answer within \(pingTimeout)")
            }
            return
        }
        if now - lastRead >= pingInterval && ready {
            pingSentAt = now
            context.writeAndFlush(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: .rootStream,
                        payload: .ping(HTTP2PingData(withInteger: UInt64(now.uptimeNanoseconds)), ack: false)
                    )
                ),
                promise: nil
            )
        }
        if let idleTimeout, streams.isEmpty, ready, now - lastStreamActivity >= idleTimeout {
            if client.closeIfIdle(id: id) {
                close(context: context, reason: "idle for \(idleTimeout)")
            }
        }
    }

    private func close(context: ChannelHandlerContext, reason: String) {
        if closeReason == nil { closeReason = reason }
        guard context.channel.isActive else { return }
        context.close(promise: nil)
    }

    static func describe(_ debug: APNSGoAwayDebugData) -> String {
        switch debug {
        case .empty: "no debug data"
        case .reason(let reason): "reason \(reason.rawValue)"
        case .text(let text): "\"\(text.prefix(200))\""
        }
    }
}
