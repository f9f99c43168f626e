import APNSCore
import APNSHTTP2Core
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2

/// One HTTP/2 connection. The frame layer (``HTTP2ServerFrameCodec``, or NIOHTTP2Handler
/// without a stream multiplexer) passes up the frames of every stream, so this handler keeps
/// per-stream state in a dictionary.
final class HTTP2SimulatorConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// A request whose body is still arriving.
    struct Stream {
        var head: HTTP2SimulatorRequestHead
        var bodyLength = 0
        /// The start of the body, kept for channel and broadcast requests only (§7).
        var body: [UInt8]?
    }

    /// The connection-level receive window the simulator keeps open (RFC 9113 §6.9). The
    /// stream windows stay at the 65,535 bytes APNs advertises (§6.8).
    static let connectionWindow = 1 << 22
    static let streamWindow = 65535

    let simulator: APNSHTTP2Simulator
    let configuration: APNSHTTP2Simulator.Configuration
    let authentication: HTTP2SimulatorAuthentication
    let channel: any Channel
    let goAwayWatcher = HTTP2SimulatorGoAwayWatcher()
    private var context: ChannelHandlerContext?
    var connection = 0

    // §3.2, §4: provider-token state.
    private var tracker: APNSConnectionTokenTracker
    /// The `authorization` value of the last admitted token, to skip verifying it again.
    private var admittedAuthorization: String?
    private var admittedToken: APNSVerifiedToken?
    /// The simulator's ``APNSHTTP2Simulator/tokenKeys`` version the admitted token was verified under.
    private var admittedKeysVersion = 0

    // §3.2, §6.8: stream limits.
    private var authenticated: Bool
    private var targetLimit = 0
    private var advertisedLimit = 0
    private var droppedToOne = false

    private var streams: [HTTP2StreamID: Stream] = [:]
    private var highestStreamID = HTTP2StreamID.rootStream
    private var delayedAnswers = 0
    private var acceptedOnConnection = 0
    private var goAwayLastStreamID: HTTP2StreamID?
    private var closing = false
    private var lastWrite: EventLoopFuture<Void>?

    private var lists: APNSHTTP2Simulator.Lists
    private var listsVersion = 0

    // Gathered during a read burst, handed to the simulator once per burst.
    private var pendingAccepted: [APNSHTTP2Simulator.Accepted] = []
    var delta = APNSHTTP2Simulator.Delta()
    private var delayedFrames: [HTTP2Frame] = []
    private var delayedFrameAnswers = 0
    private var needsFlush = false

    /// §4: the oldest `iat` the verifier accepts, in seconds.
    private let maximumTokenAge: TimeInterval
    private var lastRead = NIODeadline.now()
    private var idleTask: Scheduled<Void>?
    var generatedIDs: UInt64 = 0
    let idPrefix: UInt64

    init(simulator: APNSHTTP2Simulator, authentication: HTTP2SimulatorAuthentication, channel: any Channel) {
        self.simulator = simulator
        self.configuration = simulator.configuration
        self.authentication = authentication
        self.channel = channel
        self.tracker = APNSConnectionTokenTracker(expiredTokenSticks: simulator.configuration.expiredTokenSticks)
        if case .certificate = authentication { authenticated = true } else { authenticated = false }
        self.lists = APNSHTTP2Simulator.Lists(badTokens: [], unregistered: [:])
        self.idPrefix = UInt64.random(in: 0...UInt64.max)
        self.maximumTokenAge = (simulator.configuration.verifier?.maximumAge ?? APNSTokenTiming.maximumAge).timeInterval
    }

    /// Registers the connection with the simulator and returns the stream limit to advertise
    /// in the preface. Call on the event loop before adding the handler.
    func register() -> Int {
        listsVersion = simulator.listsVersion.load(ordering: .acquiring)
        let registration = simulator.register(
            .init(channel: channel, handler: NIOLoopBound(self, eventLoop: channel.eventLoop))
        )
        connection = registration.connection
        lists = registration.lists
        targetLimit = registration.limit
        advertisedLimit = authenticated ? targetLimit : 1
        return advertisedLimit
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // Open the connection window beyond the 65,535 bytes every connection starts with.
        let increment = Self.connectionWindow - 65535
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))),
            promise: nil
        )
        if let timeout = configuration.idleTimeout {
            scheduleIdleCheck(in: timeout.timeAmount)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        idleTask?.cancel()
    }

    func channelInactive(context: ChannelHandlerContext) {
        idleTask?.cancel()
        publish()
        simulator.unregister(connection)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            let id = frame.streamID
            if streams[id] != nil {
                // Trailers end the request.
                if headers.endStream { complete(id, context: context) }
                return
            }
            guard id > highestStreamID else { return }
            // RFC 9113 §6.8: streams above a GOAWAY's last-stream-ID are not processed
            // (the frame layer refuses them before they get here).
            if let last = goAwayLastStreamID, id > last { return }
            highestStreamID = id
            let head = HTTP2SimulatorRequestHead(headers: headers.headers)
            streams[id] = Stream(head: head, body: head.isChannelAPI ? [] : nil)
            let open = streams.count + delayedAnswers
            if open > delta.maxOpenStreams { delta.maxOpenStreams = open }
            if headers.endStream { complete(id, context: context) }
        case .data(let body):
            let id = frame.streamID
            guard let index = streams.index(forKey: id) else { return }
            streams.values[index].bodyLength += body.data.readableBytes
            streams.values[index].keep(body.data)
            if body.endStream { complete(id, context: context) }
        default:
            // SETTINGS, PING and WINDOW_UPDATE are handled by the frame layer.
            break
        }
    }

    /// The frames of a read burst have been parsed; the frame layer flushes the answers next.
    func readBurstEnded() {
        if configuration.idleTimeout != nil { lastRead = .now() }
        if !delayedFrames.isEmpty, let context { scheduleDelayed(context: context) }
        publish()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        closeIfDone()
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let update = event as? NIOHTTP2WindowUpdatedEvent {
            windowUpdated(update, context: context)
        } else if let closed = event as? StreamClosedEvent {
            // The client reset the stream, or it ended with the connection.
            if streams.removeValue(forKey: closed.streamID) != nil { closeIfDone() }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOHTTP2Errors.MaxStreamsViolation {
            // §6.8: APNs answers a stream over the limit with GOAWAY too.
            delta.streamLimitViolations += 1
        }
        // A stream error (NIOHTTP2 has reset the stream) leaves the connection alone. After a
        // connection error NIOHTTP2 has sent GOAWAY with an error code: close. Errors from
        // below HTTP/2 (TLS, I/O) close the connection too.
        let http2Error = error is any NIOHTTP2Error || error is NIOHTTP2Errors.StreamError
        if http2Error && !goAwayWatcher.sentErrorGoAway { return }
        publish()
        context.close(promise: nil)
    }

    // MARK: Flow control

    /// Keeps the receive windows open the way NIOHTTP2's multiplexer does: when a window falls
    /// to half its target, a WINDOW_UPDATE refills it.
    private func windowUpdated(_ event: NIOHTTP2WindowUpdatedEvent, context: ChannelHandlerContext) {
        guard let window = event.inboundWindowSize else { return }
        let target: Int
        if event.streamID == .rootStream {
            target = Self.connectionWindow
        } else {
            // Only streams whose body is still arriving need more window.
            guard streams[event.streamID] != nil else { return }
            target = Self.streamWindow
        }
        guard window <= target / 2 else { return }
        let increment = min(target - window, Int(Int32.max))
        context.write(
            wrapOutboundOut(
                HTTP2Frame(streamID: event.streamID, payload: .windowUpdate(windowSizeIncrement: increment))
            ),
            promise: nil
        )
        needsFlush = true
    }

    // MARK: Requests

    private enum Verdict {
        case accepted(APNSHTTP2Simulator.Accepted)
        /// `timestamp`: the 410's, as the JSON number written.
        case rejected(APNSReason, status: Int, timestamp: String?)
    }

    private func complete(_ id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        delta.requests += 1
        if stream.head.isChannelAPI { return completeChannelRequest(stream, id: id, context: context) }
        let apnsID = stream.head.apnsID.flatMap { HTTP2SimulatorRequestHead.isUUID($0) ? $0 : nil } ?? generateID()
        let verdict = evaluate(stream, streamID: id, apnsID: apnsID)
        switch verdict {
        case .accepted(let accepted):
            acceptedOnConnection += 1
            pendingAccepted.append(accepted)
            // §6.8: a success restores the limit dropped after an error.
            if droppedToOne {
                droppedToOne = false
                applyLimit(context: context)
            }
            var headers = HPACKHeaders()
            headers.add(name: ":status", value: "200")
            headers.add(name: "apns-id", value: apnsID, indexing: .nonIndexable)
            addUniqueID(to: &headers)
            // §3.4: success is 200 with an empty body and END_STREAM on HEADERS.
            answer(
                [HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: true)))],
                context: context
            )
            if let n = configuration.goAwayEvery, acceptedOnConnection % n == 0 {
                goAway(debugData: rotatingDebugData())
            }
        case .rejected(let reason, let status, let timestamp):
            delta.rejected += 1
            delta.rejectionsByReason[reason.rawValue, default: 0] += 1
            if reason == .tooManyRequests { delta.tooManyRequests += 1 }
            // §6.8: after a rejected notification the limit drops to 1 (a 410 is no error, §3.4).
            if configuration.dropStreamsToOneAfterError && status != 410 && !droppedToOne {
                droppedToOne = true
                applyLimit(context: context)
            }
            var headers = HPACKHeaders()
            headers.add(name: ":status", value: Self.statusText(status))
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "apns-id", value: apnsID, indexing: .nonIndexable)
            addUniqueID(to: &headers)
            // §3.4: {"reason":"…"} plus "timestamp" in milliseconds for 410.
            var body = context.channel.allocator.buffer(capacity: 64)
            body.writeString("{\"reason\":\"")
            body.writeString(reason.rawValue)
            if let timestamp {
                body.writeString("\",\"timestamp\":")
                body.writeString(timestamp)
                body.writeString("}")
            } else {
                body.writeString("\"}")
            }
            answer(
                [
                    HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: false))),
                    HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(body), endStream: true))),
                ],
                context: context
            )
        }
    }

    /// The rules of §3.4 in the order documented on ``APNSHTTP2Simulator``.
    private func evaluate(_ stream: Stream, streamID: HTTP2StreamID, apnsID: String) -> Verdict {
        let head = stream.head
        let token: DeviceToken
        switch head.checkTarget() {
        case .reject(let reason): return reject(reason)
        case .ok(let t): token = t
        }

        // §3.2, §4: authentication.
        let authorization: APNSHTTP2Simulator.Authorization
        let tokenAuthentication: Bool
        switch authentication {
        case .certificate(let refusal):
            if let refusal { return reject(refusal) }
            authorization = .certificate
            tokenAuthentication = false
        case .token:
            switch admit(head) {
            case .failure(let rejection): return reject(rejection.reason, status: rejection.status)
            case .success(let verified): authorization = .token(teamID: verified.teamID, keyID: verified.keyID)
            }
            tokenAuthentication = true
        }

        let checked: HTTP2SimulatorRequestHead.CheckedHeaders
        switch head.checkHeaders(tokenAuthentication: tokenAuthentication, allowedTopics: configuration.allowedTopics) {
        case .reject(let reason): return reject(reason)
        case .ok(let c): checked = c
        }

        // §3.4, §1.3: the body.
        if stream.bodyLength == 0 { return reject(.payloadEmpty) }
        if stream.bodyLength > checked.payloadLimit { return reject(.payloadTooLarge) }

        // The token lists.
        let version = simulator.listsVersion.load(ordering: .acquiring)
        if version != listsVersion {
            listsVersion = version
            lists = simulator.currentLists()
        }
        if !lists.badTokens.isEmpty && lists.badTokens.contains(token) { return reject(.badDeviceToken) }
        if !lists.unregistered.isEmpty, let timestamp = lists.unregistered[token] {
            return .rejected(.unregistered, status: 410, timestamp: timestamp)
        }

        if let fault = configuration.answerFirst,
            simulator.answeredFirst.wrappingAdd(1, ordering: .relaxed).oldValue < fault.count
        {
            return reject(fault.reason)
        }
        if let n = configuration.status429Every {
            let count = simulator.validRequests.wrappingAdd(1, ordering: .relaxed).newValue
            if count % n == 0 { return reject(.tooManyRequests) }
        }

        return .accepted(
            APNSHTTP2Simulator.Accepted(
                connection: connection,
                streamID: Int(streamID),
                token: token,
                apnsID: apnsID,
                topic: head.topic,
                pushType: head.pushType,
                priority: checked.priority,
                expiration: head.expiration.flatMap { Int($0) },
                payloadLength: stream.bodyLength,
                authorization: authorization
            )
        )
    }

    private func reject(_ reason: APNSReason, status: Int? = nil) -> Verdict {
        .rejected(reason, status: status ?? reason.status ?? 400, timestamp: nil)
    }

    /// Checks the provider token of a request on a token connection (§4) and applies the
    /// connection rules (§3.2, §6.10). The first admitted token raises the stream limit.
    func admit(_ head: HTTP2SimulatorRequestHead) -> Result<APNSVerifiedToken, APNSJWTRejection> {
        let now = configuration.now()
        // The same token as last time only needs its age checked again (§4: one hour); the
        // signature was verified when it was admitted.
        let keys = simulator.tokenKeys.withLock { $0 }
        if let authorization = head.authorization, let token = admittedToken, authorization == admittedAuthorization,
            admittedKeysVersion == keys.version, !token.isTopicSpecific,
            !(tracker.answeredExpired && tracker.expiredTokenSticks)
        {
            let age = now.timeIntervalSince1970 - TimeInterval(token.issuedAt)
            if age >= 0 && age <= maximumTokenAge { return .success(token) }
        }
        guard let authorization = head.authorization, !authorization.allSatisfy(\.isWhitespace) else {
            return .failure(.init(.missingProviderToken, "the request has no authorization header"))
        }
        let verification: Result<APNSVerifiedToken, APNSJWTRejection>
        if let verifier = keys.verifier {
            verification = verifier.verify(authorization: authorization, topic: head.topic, now: now)
        } else {
            verification = .failure(.init(.invalidProviderToken, "the simulator has no keys for token authentication"))
        }
        let result = tracker.admit(verification, now: now)
        if case .success(let token) = result {
            admittedAuthorization = authorization
            admittedToken = token
            admittedKeysVersion = keys.version
            if !authenticated {
                // §3.2: one stream until a valid token has gone through.
                authenticated = true
                if let context { applyLimit(context: context) }
            }
        }
        return result
    }

    // MARK: Answers

    func answer(_ frames: [HTTP2Frame], context: ChannelHandlerContext) {
        if configuration.responseDelay == .zero && configuration.answerGate == nil {
            write(frames, context: context)
            needsFlush = true
        } else {
            delayedFrames += frames
            delayedFrameAnswers += 1
            delayedAnswers += 1
        }
    }

    private func write(_ frames: [HTTP2Frame], context: ChannelHandlerContext) {
        for frame in frames {
            if goAwayLastStreamID != nil {
                // Closing: remember the last write so the connection closes after it.
                let promise = context.eventLoop.makePromise(of: Void.self)
                context.write(wrapOutboundOut(frame), promise: promise)
                lastWrite = promise.futureResult
            } else {
                context.write(wrapOutboundOut(frame), promise: nil)
            }
        }
    }

    /// Writes the answers of this read burst after ``APNSHTTP2Simulator/Configuration/responseDelay``,
    /// or once the ``APNSHTTP2Simulator/Configuration/answerGate`` opens.
    private func scheduleDelayed(context: ChannelHandlerContext) {
        let frames = delayedFrames
        let count = delayedFrameAnswers
        delayedFrames = []
        delayedFrameAnswers = 0
        if let gate = configuration.answerGate {
            let loop = context.eventLoop
            let handler = NIOLoopBound(self, eventLoop: loop)
            let held = NIOLoopBound(frames, eventLoop: loop)
            gate.whenOpen { loop.execute { handler.value.writeDelayed(held.value, count: count) } }
            return
        }
        context.eventLoop.assumeIsolated().scheduleTask(in: configuration.responseDelay.timeAmount) {
            self.writeDelayed(frames, count: count)
        }
    }

    private func writeDelayed(_ frames: [HTTP2Frame], count: Int) {
        delayedAnswers -= count
        guard let context else { return }
        write(frames, context: context)
        context.flush()
        closeIfDone()
    }

    func addUniqueID(to headers: inout HPACKHeaders) {
        // §3.4: apns-unique-id in the development environment only.
        if configuration.environment == .sandbox {
            headers.add(name: "apns-unique-id", value: generateID(), indexing: .nonIndexable)
        }
    }

    // MARK: Limits and GOAWAY

    /// Advertises the limit the connection should have now: 1 before authentication and after an
    /// error (with ``APNSHTTP2Simulator/Configuration/dropStreamsToOneAfterError``), else the
    /// configured one (§3.2, §6.8).
    private func applyLimit(context: ChannelHandlerContext) {
        let limit = (!authenticated || droppedToOne) ? 1 : targetLimit
        guard limit != advertisedLimit, goAwayLastStreamID == nil else { return }
        advertisedLimit = limit
        delta.settingsChanges += 1
        context.write(
            wrapOutboundOut(
                HTTP2Frame(
                    streamID: .rootStream,
                    payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: limit)]))
                )
            ),
            promise: nil
        )
        needsFlush = true
    }

    /// ``APNSHTTP2Simulator/setMaxConcurrentStreams(_:)``.
    func changeLimit(to limit: Int) {
        targetLimit = limit
        guard let context else { return }
        applyLimit(context: context)
        flushNow(context: context)
    }

    /// Sends GOAWAY (NO_ERROR) naming the highest stream received; those streams are answered,
    /// later ones are refused, and the connection closes when the answers are out (§3.5).
    func goAway(debugData: APNSGoAwayDebugData) {
        guard let context, goAwayLastStreamID == nil else { return }
        goAwayLastStreamID = highestStreamID
        delta.goAways += 1
        var opaque: ByteBuffer?
        switch debugData {
        case .empty:
            opaque = nil
        case .reason(let reason):
            opaque = context.channel.allocator.buffer(string: "{\"reason\":\"\(reason.rawValue)\"}")
        case .text(let text):
            opaque = context.channel.allocator.buffer(string: text)
        }
        write(
            [
                HTTP2Frame(
                    streamID: .rootStream,
                    payload: .goAway(lastStreamID: highestStreamID, errorCode: .noError, opaqueData: opaque)
                )
            ],
            context: context
        )
        flushNow(context: context)
        // A client that never finishes its last requests does not keep the connection forever.
        let channel = context.channel
        context.eventLoop.scheduleTask(in: .seconds(10)) { channel.close(promise: nil) }
        closeIfDone()
    }

    /// §6.9: JSON, plain text and empty debug data, in turn over the simulator's GOAWAYs.
    private func rotatingDebugData() -> APNSGoAwayDebugData {
        switch simulator.goAwayRotation.wrappingAdd(1, ordering: .relaxed).oldValue % 3 {
        case 0: .reason(.shutdown)
        case 1: .text("The server is shutting down for maintenance.")
        default: .empty
        }
    }

    /// After GOAWAY: closes once every stream at or below the last-stream-ID is answered.
    private func closeIfDone() {
        guard goAwayLastStreamID != nil, !closing, streams.isEmpty, delayedAnswers == 0, let context else { return }
        closing = true
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        let channel = context.channel
        if let lastWrite {
            lastWrite.whenComplete { _ in channel.close(promise: nil) }
        } else {
            channel.close(promise: nil)
        }
    }

    private func flushNow(context: ChannelHandlerContext) {
        publish()
        needsFlush = false
        context.flush()
    }

    private func scheduleIdleCheck(in delay: TimeAmount) {
        guard let context else { return }
        idleTask = context.eventLoop.assumeIsolated().scheduleTask(in: delay) {
            self.idleCheck()
        }
    }

    /// §6.11: GOAWAY `{"reason":"IdleTimeout"}` after a quiet period, then close.
    private func idleCheck() {
        guard let timeout = configuration.idleTimeout, goAwayLastStreamID == nil else { return }
        let amount = timeout.timeAmount
        let due = lastRead + amount
        let now = NIODeadline.now()
        if due <= now && streams.isEmpty && delayedAnswers == 0 {
            goAway(debugData: .reason(.idleTimeout))
        } else {
            scheduleIdleCheck(in: due > now ? due - now : amount)
        }
    }

    /// Hands the burst's accepted requests and counters to the simulator.
    private func publish() {
        guard !pendingAccepted.isEmpty || !delta.isEmpty else { return }
        simulator.record(pendingAccepted, delta)
        pendingAccepted.removeAll(keepingCapacity: true)
        delta = APNSHTTP2Simulator.Delta()
    }
}
