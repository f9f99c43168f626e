import APNSCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// Reads the feedback service (§2): the tokens whose app is gone from the device.
///
/// The client connects with the app's certificate, sends nothing, and reads tuples until the
/// server closes or nothing arrives for ``Configuration/readTimeout`` (§2, §6.7: the service may
/// close at once or stay open). Tuples are parsed incrementally, so they may straddle reads.
public struct APNSFeedbackClient: Sendable {
    public struct Configuration: Sendable, APNSGatewaySettings {
        public var host: String
        public var port: Int
        public var credentials: APNSCredentials
        public var verifyServer = true
        public var serverHostname: String?
        /// An HTTP proxy to reach the feedback service through, with a `CONNECT` tunnel (``APNSConnector``).
        public var proxy: APNSProxy?
        public var connectTimeout: Duration = .seconds(10)
        /// The session ends when no byte arrives for this long.
        public var readTimeout: Duration = .seconds(5)
        /// Time between two polls of ``APNSFeedbackClient/poll(every:batchSize:_:)``.
        public var interval: Duration = .seconds(3600)

        public init(host: String, port: Int, credentials: APNSCredentials) {
            self.host = host
            self.port = port
            self.credentials = credentials
        }
    }

    public let configuration: Configuration
    private let logger: Logger
    private let gateway: APNSGateway

    public init(
        configuration: Configuration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns.feedback")
    ) throws(APNSError) {
        gateway = try configuration.gateway(group: eventLoopGroup)
        self.configuration = configuration
        self.logger = logger
    }

    /// Runs one feedback session and returns every tuple it read.
    public func fetch() async throws -> [FeedbackTuple] {
        var all: [FeedbackTuple] = []
        _ = try await fetch(batchSize: 1024) { batch in all += batch }
        return all
    }

    /// Runs one feedback session, handing tuples to `deliver` in batches of at most `batchSize`
    /// as they arrive (`batchSize` 1 delivers them one by one). Reading waits while `deliver`
    /// runs. Returns the number of tuples read.
    @discardableResult
    public func fetch(
        batchSize: Int,
        _ deliver: ([FeedbackTuple]) async throws -> Void
    ) async throws -> Int {
        precondition(batchSize >= 1, "batchSize must be at least 1")
        let readTimeout = configuration.readTimeout.timeAmount
        let channel: NIOAsyncChannel<FeedbackTuple, ByteBuffer>
        do {
            channel = try await gateway.connect { channel in
                let sync = channel.pipeline.syncOperations
                try sync.addHandler(IdleStateHandler(readTimeout: readTimeout))
                try sync.addHandler(CloseOnIdleHandler())
                try sync.addHandler(ByteToMessageHandler(FeedbackTupleDecoder()))
                return try NIOAsyncChannel<FeedbackTuple, ByteBuffer>(wrappingChannelSynchronously: channel)
            }.get()
        } catch {
            throw APNSError(
                .connectionFailed,
                "cannot connect to the feedback service at \(gateway.host):\(gateway.port)",
                underlying: error
            )
        }
        var count = 0
        var batch: [FeedbackTuple] = []
        batch.reserveCapacity(min(batchSize, 1024))
        do {
            try await channel.executeThenClose { inbound, _ in
                for try await tuple in inbound {
                    batch.append(tuple)
                    count += 1
                    if batch.count >= batchSize {
                        try await deliver(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                }
            }
        } catch let error as NIOSSLError where error == .uncleanShutdown {
            // The service closed the TCP connection without a TLS close_notify: the end of the list.
        }
        if !batch.isEmpty { try await deliver(batch) }
        logger.debug("feedback session done", metadata: ["apns.feedback.tuples": "\(count)"])
        return count
    }

    /// Polls the service every ``Configuration/interval`` until the task is cancelled, handing
    /// tuples to `deliver` in batches of at most `batchSize`. A failed session is logged and
    /// retried at the next interval.
    public func poll(
        batchSize: Int = 1024,
        _ deliver: @Sendable ([FeedbackTuple]) async throws -> Void
    ) async throws {
        while !Task.isCancelled {
            do {
                try await fetch(batchSize: batchSize, deliver)
            } catch is CancellationError {
                return
            } catch {
                logger.warning("feedback session failed", metadata: ["error": "\(error)"])
            }
            try await Task.sleep(for: configuration.interval)
        }
    }
}

/// Closes the channel when the read timeout fires.
private final class CloseOnIdleHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

extension APNSFeedbackClient.Configuration {
    /// Checks the settings, with a sentence naming the first bad one.
    public func validate() throws(APNSError) {
        try validatePort()
        let durations = [("connectTimeout", connectTimeout), ("readTimeout", readTimeout), ("interval", interval)]
        for (name, duration) in durations where duration <= .zero {
            throw APNSError(.invalidConfiguration, "\(name) must be positive")
        }
    }
}
