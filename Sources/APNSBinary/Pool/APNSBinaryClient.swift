import APNSCore
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// A client for the legacy binary APNs gateway (§1) over a pool of TLS connections.
///
/// Every notification written to a connection stays in that connection's sent cache until it is
/// known to be accepted: because a later error response proves Apple processed it (§1.5.2), or
/// because it has been on the wire for ``APNSBinaryConfiguration/confirmationWindow`` on a
/// connection that has not failed. After an error response the failed notification is reported
/// and everything written after it is resent, in order, on another connection. The caches are
/// bounded; when they are full, sending waits — nothing unconfirmed is ever dropped. A connection
/// that closes without an error packet leaves its unconfirmed notifications in an unknown state:
/// they are resent and their outcomes say `possibleDuplicate` (or, with `resendOnUnknown` off,
/// they fail as ``APNSStatus/indeterminate``).
///
/// Feed it with ``send(_:)`` and read one outcome per notification from ``events``. `send`
/// waits while ``APNSBinaryConfiguration/maxPending`` notifications are in the client with
/// outcomes not yet read, so a consumer must read ``events``.
public final class APNSBinaryClient: APNSDeliveryClient, APNSPoolStepping {
    /// Notifications handed in by one `send` call: the valid ones and those rejected up front.
    @usableFromInline package typealias Batch = APNSSubmissionBatch<PendingNotification, (PendingNotification, String)>

    /// What the client keeps under its lock.
    @usableFromInline package struct State: APNSPoolClientState {
        var machine: BinaryPoolStateMachine
        @usableFromInline package var admission: APNSAdmission<Batch>
        var channels: [Int: any Channel] = [:]
        @usableFromInline package var shutdownWaiters: [CheckedContinuation<Void, Never>] = []
        var started = false

        @usableFromInline package var lifecycle: APNSPoolLifecycle { machine.lifecycle }

        @usableFromInline package var events: APNSEventBuffer { machine.events }

        @usableFromInline package mutating func withEventsAndAdmission(
            _ body: (inout APNSEventBuffer, inout APNSAdmission<Batch>) -> Void
        ) {
            body(&machine.events, &admission)
        }

        @usableFromInline package mutating func beginShutdown() -> [BinaryPoolStateMachine.Action] {
            started = true
            return machine.beginShutdown()
        }

        /// The first batch also opens the warm connections.
        @usableFromInline package mutating func enqueue(_ batch: Batch) -> [BinaryPoolStateMachine.Action] {
            var actions: [BinaryPoolStateMachine.Action] = []
            if !started {
                started = true
                actions = machine.start()
            }
            return actions + machine.enqueue(batch.items, rejected: batch.rejected)
        }
    }

    /// What a state-machine step asks for, with channels already looked up.
    @usableFromInline package struct Effects: APNSPoolEffects {
        var actions: [(BinaryPoolStateMachine.Action, (any Channel)?)] = []
        @usableFromInline package var wakeups = APNSWakeups()

        @usableFromInline package init() {}
    }

    public let configuration: APNSBinaryConfiguration
    private let state: Mutex<State>
    private let gateway: APNSGateway
    private let logger: Logger

    /// Creates a client. No connection is opened until ``start()`` or the first ``send(_:)``.
    public init(
        configuration: APNSBinaryConfiguration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns.binary")
    ) throws(APNSError) {
        gateway = try configuration.gateway(group: eventLoopGroup)
        self.configuration = configuration
        self.logger = logger
        var machineConfig = BinaryPoolStateMachine.Configuration()
        machineConfig.maxConnections = configuration.maxConnections
        machineConfig.minConnections = configuration.minConnections
        machineConfig.cacheMaxCount = configuration.cacheMaxCount
        machineConfig.cacheMaxBytes = configuration.cacheMaxBytes
        machineConfig.batchMaxCount = configuration.writeBatchSize
        machineConfig.confirmationWindow = configuration.confirmationWindow.timeAmount
        machineConfig.resendOnUnknown = configuration.resendOnUnknown
        machineConfig.connectionRetryLimit = configuration.connectionRetryLimit
        machineConfig.reconnectBaseDelay = configuration.reconnectBaseDelay
        machineConfig.reconnectMaxDelay = configuration.reconnectMaxDelay
        self.state = Mutex(
            State(
                machine: BinaryPoolStateMachine(configuration: machineConfig),
                admission: APNSAdmission(maxPending: configuration.maxPending)
            )
        )
    }

    // MARK: Public API

    /// Opens the warm connections (``APNSBinaryConfiguration/minConnections``).
    public func start() {
        step { state in
            guard !state.started else { return [] }
            state.started = true
            return state.machine.start()
        }
    }

    /// Hands notifications to the client. Returns once all are queued; waits while the client is
    /// full. Each submission later produces exactly one outcome on ``events``. A notification
    /// whose payload is invalid produces a `transmissionError` with ``APNSStatus/invalidPayload``.
    ///
    /// - Throws: ``APNSError`` with code `shutDown` after ``shutdown(gracePeriod:)`` began; the
    ///   submissions of that call that were not yet queued produce no outcome.
    public func send(_ submissions: some Sequence<APNSSubmission>) async throws {
        try await submit(submissions)
    }

    /// Hands notifications to the client; see ``send(_:)-(some Sequence<APNSSubmission>)``.
    public func send(_ submissions: [APNSSubmission]) async throws {
        try await submit(submissions)
    }

    private func submit(_ submissions: some Sequence<APNSSubmission>) async throws {
        var batch = Batch()
        var payloadCache: (APNSSubmission.Content, Result<[UInt8], APNSPayloadError>)? = nil
        let chunk = max(1, min(configuration.maxPending, 1024))
        let now = Date()
        for submission in submissions {
            let compiled: Result<[UInt8], APNSPayloadError>
            if let precompiled = submission.payload {
                compiled = .success(precompiled)
            } else if let cached = payloadCache,
                cached.0 === submission.content || cached.0.notification == submission.content.notification
            {
                compiled = cached.1
            } else {
                compiled = Result { () throws(APNSPayloadError) in
                    try submission.notification.validatedPayload(limit: configuration.payloadLimit)
                }
                payloadCache = (submission.content, compiled)
            }
            // Read in place: a copy of the notification retained (and released) each of its
            // strings and arrays, once per notification.
            let content = submission.content
            var pending = PendingNotification(
                tag: submission.tag,
                token: submission.token,
                payload: [],
                expiry: content.notification.expiry.unixSeconds(now: now),
                priority: content.notification.priority.rawValue,
                urgent: content.urgent,
                retryLimit: content.notification.retryLimit ?? configuration.defaultRetryLimit,
                staleAt: content.staleAt
            )
            switch compiled {
            case .success(let payload):
                pending.payload = payload
                batch.items.append(pending)
            case .failure(let error):
                batch.rejected.append((pending, error.message))
            }
            if batch.count >= chunk { try await admit(&batch) }
        }
        if batch.count > 0 { try await admit(&batch) }
    }

    /// Sends one notification to one device.
    public func send(_ notification: APNSNotification, to token: DeviceToken, tag: UInt64) async throws {
        try await send(CollectionOfOne(APNSSubmission(tag: tag, token: token, notification: notification)))
    }

    /// The type of ``events``, shared with the HTTP/2 client.
    public typealias Events = APNSDeliveryEvents

    /// Stops accepting notifications, sends and confirms everything already accepted, closes every
    /// connection and returns. With a grace period, whatever is still unsettled when it runs out
    /// fails (``APNSStatus/shutDown`` if never written, ``APNSStatus/indeterminate`` if unconfirmed).
    public func shutdown(gracePeriod: Duration? = nil) async {
        if let gracePeriod {
            let deadline = gateway.group.next().scheduleTask(in: gracePeriod.timeAmount) { [self] in
                step { state in
                    state.machine.abandon(reason: "shutdown grace period of \(gracePeriod) ran out")
                }
            }
            await drain()
            deadline.cancel()
        } else {
            await drain()
        }
    }

    /// The pool's connections, sent caches, queue and counters (see ``APNSPoolSnapshot``), read
    /// under the client's lock.
    public func snapshot() -> APNSPoolSnapshot {
        state.withLock { s in
            var snapshot = s.machine.snapshot()
            s.admission.describe(into: &snapshot)
            return snapshot
        }
    }

    // MARK: Events

    /// Takes the next event, waiting for one if there is none. Returns nil when the client has
    /// shut down and no event is left.
    public func nextEvent() async -> APNSDeliveryEvent? {
        await takeEvents(max: 1)?.first
    }

    /// Takes up to `max` events under one lock, waiting for the first if there is none.
    /// Returns nil when the client has shut down and no event is left.
    public func nextEvents(max: Int) async -> [APNSDeliveryEvent]? {
        await takeEvents(max: max)
    }

    // MARK: State-machine plumbing

    @usableFromInline package func withBuffer(_ body: (inout APNSEventBuffer, inout APNSAdmission<Batch>) -> Void) {
        bufferStep(body)
    }

    @usableFromInline package func withLockedState(_ body: (inout State) -> Effects) -> Effects {
        state.withLock { body(&$0) }
    }

    @usableFromInline package func collect(
        _ action: BinaryPoolStateMachine.Action,
        from state: inout State,
        into effects: inout Effects
    ) {
        switch action {
        case .schedulePump(let id), .write(let id, _), .close(let id), .armTimer(let id, _):
            effects.actions.append((action, state.channels[id]))
        case .connect:
            effects.actions.append((action, nil))
        case .shutdownComplete:
            swap(&effects.wakeups.shutdown, &state.shutdownWaiters)
        }
    }

    @usableFromInline package func perform(_ effects: Effects) {
        for (action, channel) in effects.actions {
            execute(action, channel: channel)
        }
    }

    private func execute(_ action: BinaryPoolStateMachine.Action, channel: (any Channel)?) {
        switch action {
        case .connect(let id, let delay):
            if delay == .zero {
                connect(id: id)
            } else {
                gateway.group.next().scheduleTask(in: delay) { [self] in
                    step { $0.machine.backoffElapsed(id: id) }
                }
            }
        case .schedulePump(let id):
            guard let channel else { return }
            channel.eventLoop.execute { [self] in pump(id: id, channel: channel) }
        case .write(let id, let frames):
            guard let channel else { return }
            write(frames, id: id, channel: channel)
        case .close:
            channel?.close(promise: nil)
        case .armTimer(let id, let deadline):
            guard let channel else { return }
            channel.eventLoop.scheduleTask(deadline: deadline) { [self] in
                step { $0.machine.timerFired(id: id, now: .now()) }
            }
        case .shutdownComplete:
            break
        }
    }

    private func drain() async {
        await State.shutDown(through: step)
    }

    // MARK: Connections

    private func connect(id: Int) {
        let connectTimeout = gateway.connectTimeout
        let idleTimeout = configuration.idleTimeout
        let connected = gateway.connect(
            configure: { [configuration] bootstrap in
                bootstrap
                    .channelOption(.socketOption(.tcp_nodelay), value: 1)
                    .channelOption(
                        .socketOption(.so_sndbuf),
                        value: SocketOptionValue(configuration.socketSendBufferSize)
                    )
                    .channelOption(
                        .writeBufferWaterMark,
                        value: .init(
                            low: configuration.writeBufferLowWaterMark,
                            high: configuration.writeBufferLowWaterMark * 2
                        )
                    )
            }
        ) { [self] channel in
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(ByteToMessageHandler(ErrorResponseDecoder()))
            if let idleTimeout {
                try sync.addHandler(IdleStateHandler(allTimeout: idleTimeout.timeAmount))
            }
            try sync.addHandler(
                GatewayConnectionHandler(client: self, id: id, handshakeTimeout: connectTimeout)
            )
        }
        connected.whenFailure { [self] error in
            logger.debug("connect failed", metadata: ["apns.connection": "\(id)", "error": "\(error)"])
            step {
                $0.machine.connectFailed(
                    id: id,
                    reason: "cannot connect to \(gateway.host):\(gateway.port): \(error)",
                    failure: APNSPoolSnapshot.ConnectFailure(connectError: error)
                )
            }
        }
    }

    /// Takes the next batch for connection `id`, which the step then writes. Runs on the
    /// channel's event loop.
    private func pump(id: Int, channel: any Channel) {
        step { state in
            guard channel.isActive else { return [] }
            return state.machine.takeBatch(id: id)
        }
    }

    /// Writes a batch the pump of connection `id` took. Runs on the channel's event loop.
    private func write(_ batch: [BinaryPoolStateMachine.Frame], id: Int, channel: any Channel) {
        channel.eventLoop.assertInEventLoop()
        guard let lastIdentifier = batch.last?.identifier else { return }
        var bytes = 0
        for frame in batch { bytes += frame.notification?.wireSize ?? 40 }
        var buffer = channel.allocator.buffer(capacity: bytes)
        for frame in batch {
            let identifier = frame.identifier
            if let item = frame.notification {
                switch configuration.frameFormat {
                case .framed:
                    buffer.writeFramedNotification(
                        token: item.token.bytes,
                        payload: item.payload,
                        identifier: identifier,
                        expiry: item.expiry,
                        priority: item.priority
                    )
                case .enhanced:
                    buffer.writeEnhancedNotification(
                        token: item.token.bytes,
                        payload: item.payload,
                        identifier: identifier,
                        expiry: item.expiry
                    )
                }
            } else {
                // The probe: a frame with no payload, which the gateway must reject (status 4).
                buffer.writeNotificationFrame(
                    BinaryNotificationFrame(
                        command: .framed,
                        token: [UInt8](repeating: 0, count: 32),
                        payload: nil,
                        identifier: identifier,
                        expiry: 0,
                        priority: 10
                    )
                )
            }
        }
        let writeTimeout = configuration.writeTimeout
        let stalled = channel.eventLoop.scheduleTask(in: writeTimeout.timeAmount) {
            channel.pipeline.fireUserInboundEventTriggered(WriteTimedOut(after: writeTimeout))
        }
        channel.writeAndFlush(buffer).whenComplete { [self] result in
            stalled.cancel()
            if case .success = result {
                step { $0.machine.written(id: id, through: lastIdentifier, now: .now()) }
            }
        }
    }

    // MARK: Callbacks from the channel handler (on the channel's event loop)

    fileprivate func channelActive(id: Int, channel: any Channel) {
        state.withLock { $0.channels[id] = channel }
    }

    fileprivate func handshakeCompleted(id: Int) {
        logger.debug("connected", metadata: ["apns.connection": "\(id)"])
        step { $0.machine.connectionEstablished(id: id) }
    }

    fileprivate func received(_ response: ErrorResponse, id: Int) {
        logger.debug(
            "error response",
            metadata: [
                "apns.connection": "\(id)", "apns.status": "\(response.status.rawValue)",
                "apns.identifier": "\(response.identifier)",
            ]
        )
        step { $0.machine.errorResponse(id: id, response, now: .now()) }
    }

    /// Connection `id` closed: before its handshake completed because of `failure`, or after
    /// it, closed by its handler for `cause` (`nil` when the handler did not close it itself).
    fileprivate func channelInactive(
        id: Int,
        reason: String,
        established: Bool,
        failure: APNSPoolSnapshot.ConnectFailure,
        cause: APNSPoolSnapshot.CloseReason?
    ) {
        step { state in
            state.channels[id] = nil
            if !established {
                return state.machine.connectFailed(id: id, reason: reason, failure: failure)
            }
            return state.machine.connectionClosed(id: id, reason: reason, cause: cause)
        }
    }

    fileprivate func writeTimedOut(id: Int, reason: String) {
        logger.warning("write timeout", metadata: ["apns.connection": "\(id)"])
        step { $0.machine.writeTimedOut(id: id, reason: reason) }
    }

    fileprivate func writabilityChanged(id: Int, writable: Bool) {
        step { $0.machine.writabilityChanged(id: id, writable: writable) }
    }

    fileprivate func idle(id: Int) {
        step { $0.machine.idleTimeout(id: id) }
    }
}

/// Raised on a connection whose flush did not complete within the write timeout.
private struct WriteTimedOut {
    var after: Duration
}

/// The per-connection handler: reports the handshake, error responses, writability and closure
/// to the client.
private final class GatewayConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ErrorResponse

    private let client: APNSBinaryClient
    private let id: Int
    private let handshakeTimeout: TimeAmount
    private var established = false
    /// Why the handshake did not complete, once that is known.
    private var failure: APNSPoolSnapshot.ConnectFailure?
    /// Why the handler closed an open connection itself.
    private var cause: APNSPoolSnapshot.CloseReason?
    private var stalledReported = false
    private var timeoutTask: Scheduled<Void>?
    private var closeReason = "closed by the gateway without an error packet"

    init(client: APNSBinaryClient, id: Int, handshakeTimeout: TimeAmount) {
        self.client = client
        self.id = id
        self.handshakeTimeout = handshakeTimeout
    }

    func channelActive(context: ChannelHandlerContext) {
        client.channelActive(id: id, channel: context.channel)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeoutTask = context.eventLoop.scheduleTask(in: handshakeTimeout) {
            let (handler, context) = loopBound.value
            guard !handler.established else { return }
            handler.failure = handler.failure ?? .timeout
            handler.closeReason = "TLS handshake did not complete in time"
            context.close(promise: nil)
        }
        context.fireChannelActive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent {
            established = true
            timeoutTask?.cancel()
            client.handshakeCompleted(id: id)
        } else if let stalled = event as? WriteTimedOut {
            // Every flush has its own timer; the first to fire closes the connection.
            guard !stalledReported else { return }
            stalledReported = true
            cause = .other
            closeReason = "the gateway stopped reading: a write did not complete within \(stalled.after)"
            client.writeTimedOut(id: id, reason: closeReason)
            context.close(promise: nil)
            return
        } else if event is IdleStateHandler.IdleStateEvent {
            // The pool closes the connection if it may, and reports why itself.
            client.idle(id: id)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let response = unwrapInboundIn(data)
        closeReason = "error response, status \(response.status)"
        client.received(response, id: id)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        closeReason = "\(error)"
        if !established && failure == nil { failure = APNSPoolSnapshot.ConnectFailure(connectError: error) }
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        client.writabilityChanged(id: id, writable: context.channel.isWritable)
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timeoutTask?.cancel()
        client.channelInactive(
            id: id,
            reason: closeReason,
            established: established,
            failure: failure ?? .other,
            cause: cause
        )
        context.fireChannelInactive()
    }
}
