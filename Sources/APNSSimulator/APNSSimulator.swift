import APNSBinary
import APNSCore
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A faithful stand-in for Apple's binary gateway and feedback service (§1, §2, §6), over TLS
/// with client certificates, with fault injection.
///
/// The gateway validates every frame; a bad one is answered, after ``Configuration/errorDelay``,
/// with one error packet naming it, and the connection closes: everything received after the
/// bad frame is discarded (§1.5.2). Accepted notifications produce no bytes (§1.5.1) and are
/// recorded. Optional faults: a status-10 shutdown after every N accepted notifications on a
/// connection, naming the last good one (§1.5.3), and a silent close after every N (§6.2).
/// The feedback service writes its list to each client, clears it, and closes (§2).
public final class APNSSimulator: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// 0 picks a free port.
        public var binaryPort = 0
        /// 0 picks a free port; `nil` runs no feedback service.
        public var feedbackPort: Int? = 0
        public var certificateChainPEM: String
        public var privateKeyPEM: String
        /// CA certificates that client certificates must chain to; `nil` asks for no client certificate.
        public var clientCAPEM: String?
        /// Tokens answered with status 8 (§1.4).
        public var badTokens: Set<DeviceToken> = []
        /// The feedback list served (and cleared) on the next feedback connection.
        public var feedback: [FeedbackTuple] = []
        /// Keep feedback connections open after the list is written (§6.7) instead of closing.
        public var feedbackHoldOpen = false
        /// Delay between a bad frame and its error packet (§6.1).
        public var errorDelay: Duration = .zero
        /// After every N accepted notifications on a connection: status 10 naming the Nth, then close.
        public var shutdownEvery: Int?
        /// After every N accepted notifications on a connection: close without an error packet.
        public var dropEvery: Int?
        /// Payload limit (§1.3).
        public var maxPayload = 2048
        /// Token length the gateway accepts (§1.2).
        public var tokenLength = 32
        /// Append one JSON line per accepted notification to this file.
        public var recordPath: String?
        /// Kernel receive buffer of each gateway connection (`SO_RCVBUF`).
        public var receiveBufferSize = 64 << 10

        public init(certificateChainPEM: String, privateKeyPEM: String, clientCAPEM: String?) {
            self.certificateChainPEM = certificateChainPEM
            self.privateKeyPEM = privateKeyPEM
            self.clientCAPEM = clientCAPEM
        }
    }

    /// One accepted notification.
    public struct Accepted: Sendable, Hashable {
        public var connection: Int
        public var identifier: UInt32?
        public var token: DeviceToken
        public var payloadLength: Int
        /// The frame's expiry (UNIX seconds; 0: do not store), when its command carries one.
        public var expiry: UInt32? = nil
    }

    /// Counters since start.
    public struct Statistics: Sendable, Hashable {
        public var connections = 0
        public var accepted = 0
        public var errorResponses = 0
        public var shutdowns = 0
        public var silentDrops = 0
        public var discardedFrames = 0
        public var feedbackSessions = 0
    }

    struct State {
        var acceptedByToken: [DeviceToken: Int] = [:]
        var expiryByToken: [DeviceToken: UInt32] = [:]
        var open = 0
        var statistics = Statistics()
        var feedback: [FeedbackTuple]
        var badTokens: Set<DeviceToken>
        var nextConnection = 1
        var recordBuffer: [UInt8] = []
    }

    public let configuration: Configuration
    public let binaryPort: Int
    public let feedbackPort: Int?
    let state: Mutex<State>
    private let channels: [any Channel]
    private let accepted: AcceptedConnections
    /// The server side of TLS, whose trusted client CA ``trustClients(caPEM:)`` changes.
    let tls: SimulatorTLS
    private let recordFile: FileHandle?
    private let logger: Logger

    private init(
        configuration: Configuration,
        binaryPort: Int,
        feedbackPort: Int?,
        state: State,
        channels: [any Channel],
        accepted: AcceptedConnections,
        tls: SimulatorTLS,
        recordFile: FileHandle?,
        logger: Logger
    ) {
        self.accepted = accepted
        self.tls = tls
        self.configuration = configuration
        self.binaryPort = binaryPort
        self.feedbackPort = feedbackPort
        self.state = Mutex(state)
        self.channels = channels
        self.recordFile = recordFile
        self.logger = logger
    }

    /// Starts the servers and returns once they listen.
    public static func start(
        configuration: Configuration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns.simulator")
    ) async throws -> APNSSimulator {
        let tls = try SimulatorTLS(
            certificateChainPEM: configuration.certificateChainPEM,
            privateKeyPEM: configuration.privateKeyPEM,
            clientCAPEM: configuration.clientCAPEM,
            clientVerification: .noHostnameVerification
        )
        let recordFile = try configuration.recordPath.map(RecordFile.open)
        let state = State(feedback: configuration.feedback, badTokens: configuration.badTokens)

        // The handlers need the simulator, which needs the bound ports: bind with a box that is
        // filled in right after.
        let box = SimulatorBox<APNSSimulator>()
        let accepted = AcceptedConnections()
        let binary = try await ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            // Apple's gateway reads promptly; a small receive buffer keeps the simulator from
            // holding megabytes of unread frames that would delay its verdicts (§6.1). Set on
            // the listener too, so accepted sockets have it before the TCP handshake.
            .serverChannelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(configuration.receiveBufferSize))
            .childChannelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(configuration.receiveBufferSize))
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    accepted.add(channel)
                    try sync.addHandler(NIOSSLServerHandler(context: tls.context))
                    try sync.addHandler(ByteToMessageHandler(NotificationFrameDecoder()))
                    try sync.addHandler(GatewayHandler(simulator: try box.started()))
                }
            }
            .bind(host: configuration.host, port: configuration.binaryPort)
            .get()
        var channels: [any Channel] = [binary]
        var feedbackPort: Int? = nil
        if let port = configuration.feedbackPort {
            // A feedback port that cannot be bound leaves nothing listening: a caller that tries
            // again finds the gateway's port free.
            let feedback: any Channel
            do {
                feedback = try await ServerBootstrap(group: eventLoopGroup)
                    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                    .childChannelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            let sync = channel.pipeline.syncOperations
                            accepted.add(channel)
                            try sync.addHandler(NIOSSLServerHandler(context: tls.context))
                            try sync.addHandler(FeedbackHandler(simulator: try box.started()))
                        }
                    }
                    .bind(host: configuration.host, port: port)
                    .get()
            } catch {
                try? await binary.close()
                throw error
            }
            channels.append(feedback)
            feedbackPort = feedback.localAddress?.port
        }
        let simulator = APNSSimulator(
            configuration: configuration,
            binaryPort: binary.localAddress!.port!,
            feedbackPort: feedbackPort,
            state: state,
            channels: channels,
            accepted: accepted,
            tls: tls,
            recordFile: recordFile,
            logger: logger
        )
        box.simulator = simulator
        return simulator
    }

    /// Stops listening, closes the servers and the connections they accepted, and flushes the
    /// record file.
    public func stop() async {
        for channel in channels {
            try? await channel.close()
        }
        // The gateway goes away: its open connections are cut too, without an error packet.
        await accepted.closeAll()
        flushRecord()
        RecordFile.close(recordFile, logger: logger)
    }

    /// How often each token was accepted.
    public var acceptedByToken: [DeviceToken: Int] {
        state.withLock { $0.acceptedByToken }
    }

    public var statistics: Statistics {
        state.withLock { $0.statistics }
    }

    /// The expiry of the last notification accepted for each token, when its frame carried one.
    public var expiryByToken: [DeviceToken: UInt32] {
        state.withLock { $0.expiryByToken }
    }

    /// Gateway connections open now.
    public var openConnections: Int {
        state.withLock { $0.open }
    }

    /// Replaces the feedback list served on the next feedback connection.
    public func setFeedback(_ tuples: [FeedbackTuple]) {
        state.withLock { $0.feedback = tuples }
    }

    /// Replaces the set of tokens answered with status 8.
    public func setBadTokens(_ tokens: Set<DeviceToken>) {
        state.withLock { $0.badTokens = tokens }
    }

    // MARK: Gateway logic

    func newConnection() -> Int {
        state.withLock { s in
            s.statistics.connections += 1
            s.open += 1
            defer { s.nextConnection += 1 }
            return s.nextConnection
        }
    }

    /// The status a frame earns (§1.4, §1.5), or `nil` when it is accepted.
    func validate(_ frame: BinaryNotificationFrame, badTokens: Set<DeviceToken>) -> APNSStatus? {
        guard let token = frame.token, !token.isEmpty else { return .missingDeviceToken }
        guard token.count == configuration.tokenLength else { return .invalidTokenSize }
        guard let payload = frame.payload, payload.readableBytes > 0 else { return .missingPayload }
        guard payload.readableBytes <= configuration.maxPayload else { return .invalidPayloadSize }
        if let priority = frame.priority, priority != 10 && priority != 5 { return .protocolError }
        // The payload must be a JSON object (§5 check 1).
        guard payload.readableBytesView.first == UInt8(ascii: "{"),
            (try? JSONValue.parse(payload.readableBytesView)) != nil
        else { return .protocolError }
        if let t = try? DeviceToken(bytes: token), badTokens.contains(t) { return .invalidToken }
        return nil
    }

    /// Records accepted notifications of one read burst.
    func record(_ accepted: [Accepted]) {
        var line: [UInt8] = []
        state.withLock { s in
            for a in accepted {
                s.acceptedByToken[a.token, default: 0] += 1
                if let expiry = a.expiry { s.expiryByToken[a.token] = expiry }
            }
            s.statistics.accepted += accepted.count
            if recordFile != nil {
                for a in accepted {
                    line.removeAll(keepingCapacity: true)
                    let id = a.identifier.map(String.init) ?? "null"
                    line += Array(
                        "{\"connection\":\(a.connection),\"identifier\":\(id),\"token\":\"\(a.token.hex)\",\"payloadLength\":\(a.payloadLength)}\n"
                            .utf8
                    )
                    s.recordBuffer += line
                }
            }
        }
        if recordFile != nil {
            let shouldFlush = state.withLock { $0.recordBuffer.count >= 1 << 16 }
            if shouldFlush { flushRecord() }
        }
    }

    /// Writes buffered record lines to the record file.
    public func flushRecord() {
        guard let recordFile else { return }
        let bytes = state.withLock { s -> [UInt8] in
            defer { s.recordBuffer.removeAll(keepingCapacity: true) }
            return s.recordBuffer
        }
        if !bytes.isEmpty { recordFile.write(Data(bytes)) }
    }

    func connectionClosed() {
        state.withLock { $0.open -= 1 }
    }

    func count(_ update: (inout Statistics) -> Void) {
        state.withLock { update(&$0.statistics) }
    }

    func takeFeedback() -> [FeedbackTuple] {
        state.withLock { s in
            s.statistics.feedbackSessions += 1
            defer { s.feedback = [] }
            return s.feedback
        }
    }

    var badTokens: Set<DeviceToken> { state.withLock { $0.badTokens } }
}

/// The connections a simulator accepted and has not closed yet.
final class AcceptedConnections: Sendable {
    private let channels = Mutex<[ObjectIdentifier: any Channel]>([:])

    func add(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        channels.withLock { $0[id] = channel }
        channel.closeFuture.whenComplete { [self] _ in _ = channels.withLock { $0.removeValue(forKey: id) } }
    }

    func closeAll() async {
        for channel in channels.withLock({ Array($0.values) }) {
            try? await channel.close()
        }
    }
}

/// One gateway connection.
private final class GatewayHandler: ChannelInboundHandler {
    typealias InboundIn = InboundNotification
    typealias OutboundOut = ByteBuffer

    private let simulator: APNSSimulator
    private var connection = 0
    private var acceptedOnConnection = 0
    private var closing = false
    private var pending: [APNSSimulator.Accepted] = []
    private var badTokens: Set<DeviceToken> = []

    init(simulator: APNSSimulator) {
        self.simulator = simulator
    }

    func channelActive(context: ChannelHandlerContext) {
        connection = simulator.newConnection()
        badTokens = simulator.badTokens
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else {
            simulator.count { $0.discardedFrames += 1 }
            return
        }
        switch unwrapInboundIn(data) {
        case .malformed(_, let identifier):
            fail(context: context, status: .protocolError, identifier: identifier ?? 0, sendPacket: true)
        case .notification(let frame):
            if let status = simulator.validate(frame, badTokens: badTokens) {
                // Command 0 has no identifier: a bad one just drops the connection (§1.2, §1.5.5).
                fail(
                    context: context,
                    status: status,
                    identifier: frame.identifier ?? 0,
                    sendPacket: frame.command != .simple
                )
                return
            }
            let token = try! DeviceToken(bytes: frame.token!)
            pending.append(
                APNSSimulator.Accepted(
                    connection: connection,
                    identifier: frame.identifier,
                    token: token,
                    payloadLength: frame.payload!.readableBytes,
                    expiry: frame.expiry
                )
            )
            acceptedOnConnection += 1
            let config = simulator.configuration
            if let n = config.shutdownEvery, acceptedOnConnection % n == 0 {
                // §1.5.3: status 10 names the last notification processed successfully.
                simulator.count { $0.shutdowns += 1 }
                fail(
                    context: context,
                    status: .shutdown,
                    identifier: frame.identifier ?? 0,
                    sendPacket: frame.command != .simple
                )
            } else if let n = config.dropEvery, acceptedOnConnection % n == 0 {
                simulator.count { $0.silentDrops += 1 }
                fail(context: context, status: .shutdown, identifier: 0, sendPacket: false)
            }
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushAccepted()
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        flushAccepted()
        simulator.connectionClosed()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func flushAccepted() {
        guard !pending.isEmpty else { return }
        simulator.record(pending)
        pending.removeAll(keepingCapacity: true)
    }

    /// Stops processing: everything after this frame is discarded; the error packet (if any)
    /// goes out after the configured delay, then the connection closes.
    ///
    /// While the delay runs the connection is not read at all, so discarded frames cost nothing
    /// and the client is held back by TCP flow control. After the packet is written the
    /// simulator drains and drops input until the client closes (or a few seconds pass): closing
    /// a socket with unread input makes the kernel send a reset, which can destroy the error
    /// packet before the client has read it.
    private func fail(context: ChannelHandlerContext, status: APNSStatus, identifier: UInt32, sendPacket: Bool) {
        closing = true
        flushAccepted()
        if sendPacket && status != .shutdown {
            simulator.count { $0.errorResponses += 1 }
        }
        let channel = context.channel
        guard sendPacket else {
            channel.close(promise: nil)
            return
        }
        channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        let send: @Sendable () -> Void = {
            var buffer = channel.allocator.buffer(capacity: ErrorResponse.size)
            buffer.writeErrorResponse(ErrorResponse(status: status, identifier: identifier))
            channel.writeAndFlush(buffer, promise: nil)
            channel.setOption(ChannelOptions.autoRead, value: true).whenComplete { _ in channel.read() }
            channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
        }
        let delay = simulator.configuration.errorDelay
        if delay == .zero || status == .shutdown {
            send()
        } else {
            let (seconds, attos) = delay.components
            channel.eventLoop.scheduleTask(in: .nanoseconds(seconds * 1_000_000_000 + attos / 1_000_000_000)) { send() }
        }
    }
}

/// One feedback session: write the list, clear it, close (§2).
private final class FeedbackHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let simulator: APNSSimulator

    init(simulator: APNSSimulator) {
        self.simulator = simulator
    }

    func channelActive(context: ChannelHandlerContext) {
        let tuples = simulator.takeFeedback()
        var buffer = context.channel.allocator.buffer(capacity: tuples.count * 38)
        for tuple in tuples {
            buffer.writeFeedbackTuple(tuple)
        }
        let channel = context.channel
        let holdOpen = simulator.configuration.feedbackHoldOpen
        context.writeAndFlush(NIOAny(buffer)).whenComplete { _ in
            if !holdOpen { channel.close(promise: nil) }
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // The feedback service expects nothing from the provider (§2).
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
