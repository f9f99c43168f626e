import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import PushStatus
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing

/// A `StatusProvider` whose answers a test sets.
final class FakeStatusProvider: StatusProvider {
    struct State {
        var liveness = HealthCheck.ok
        var readiness = HealthCheck.ok
        var status = WorkerStatus.sample
    }

    let state = Mutex(State())

    func liveness() -> HealthCheck { state.withLock { $0.liveness } }
    func readiness() -> HealthCheck { state.withLock { $0.readiness } }
    func status() -> WorkerStatus { state.withLock { $0.status } }
}

/// Counts calls of the `beforeScrape` hook.
final class CallCounter: Sendable {
    private let count = Atomic<Int>(0)
    func increment() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

let testLogger: Logger = {
    var logger = Logger(label: "PushStatusTests", factory: { _ in SwiftLogNoOpLogHandler() })
    logger.logLevel = .critical
    return logger
}()

/// Runs a status server on 127.0.0.1 with a free port for `body`, then shuts it down gracefully
/// and waits until `run()` has returned.
func withStatusServer<Result>(
    configuration: StatusServer.Configuration = .init(host: "127.0.0.1", port: 0),
    registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry(),
    provider: FakeStatusProvider = FakeStatusProvider(),
    beforeScrape: (@Sendable () -> Void)? = nil,
    _ body: (_ server: StatusServer, _ client: StatusClient) async throws -> Result
) async throws -> Result {
    try await testGracefulShutdown { trigger in
        try await withThrowingTaskGroup(of: Void.self) { group in
            let server = StatusServer(
                configuration: configuration,
                registry: registry,
                provider: provider,
                beforeScrape: beforeScrape,
                logger: testLogger
            )
            group.addTask { try await server.run() }
            do {
                let port = try await server.listeningPort()
                let result = try await body(server, StatusClient(host: "127.0.0.1", port: port, timeout: .seconds(10)))
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
                return result
            } catch {
                group.cancelAll()
                throw error
            }
        }
    }
}

/// Fails with a message if `body` has not finished within `seconds` (a guard against a test
/// hanging, not a measurement: 30 s by default, because the whole suite on two cores can keep a
/// connection's answer waiting for more than 10 s).
func withDeadline<Result: Sendable>(
    seconds: Int64 = 30,
    _ what: String,
    _ body: @escaping @Sendable () async throws -> Result
) async throws -> Result {
    try await withThrowingTaskGroup(of: Result?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let result = first else {
            throw DeadlineExceeded(what: what, seconds: seconds)
        }
        return result
    }
}

struct DeadlineExceeded: Error, CustomStringConvertible {
    var what: String
    var seconds: Int64
    var description: String { "\(what) did not happen within \(seconds) s" }
}

/// A TCP connection that sends raw bytes, for requests an HTTP client would not send.
struct RawConnection {
    /// What the server sent before it closed the connection, and how the connection ended.
    struct Outcome {
        var received: String
        /// The connection ended by a reset or a failed write rather than an orderly close.
        var reset: Bool
        /// How many of the chunks were written before the sending ended.
        var chunksWritten: Int
    }

    /// Connects, sends `chunks` (calling `pace` between them, if given), then reads until the
    /// server closes the connection. Write failures (the server closed first) end the sending.
    static func exchange(
        port: Int,
        chunks: [[UInt8]],
        pace: (@Sendable () async throws -> Void)? = nil
    ) async throws -> Outcome {
        let channel = try await connect(port: port)
        return try await channel.executeThenClose { inbound, outbound in
            var reset = false
            var chunksWritten = 0
            do {
                for (index, chunk) in chunks.enumerated() {
                    if index > 0, let pace {
                        try await pace()
                    }
                    try await outbound.write(ByteBuffer(bytes: chunk))
                    chunksWritten += 1
                }
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                reset = true
            }
            var received = ByteBuffer()
            do {
                for try await var chunk in inbound {
                    received.writeBuffer(&chunk)
                }
            } catch {
                reset = true
            }
            return Outcome(received: String(buffer: received), reset: reset, chunksWritten: chunksWritten)
        }
    }

    static func connect(port: Int) async throws -> NIOAsyncChannel<ByteBuffer, ByteBuffer> {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
    }
}

extension String {
    var bytes: [UInt8] { Array(utf8) }
}

/// One HTTP/1.1 client connection to a status server, from a chosen source address when the test
/// needs a second peer (any 127.0.0.0/8 address is this host on Linux). Unlike ``StatusClient``,
/// it reports a connection the server closed without an answer as `nil`, not as an error.
struct PeerConnection {
    /// One answer, read completely.
    struct Answer {
        var status: HTTPResponseStatus
        var headers: HTTPHeaders
        var body: ByteBuffer
        /// The answer said `Connection: close`.
        var closes: Bool { headers[canonicalForm: "connection"].contains { $0.lowercased() == "close" } }
    }

    private var responses: NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator
    private let requests: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>

    /// Connects to 127.0.0.1:`port` from `source` (any port), runs `body` with the connection and
    /// closes it.
    static func with<Result>(
        port: Int,
        from source: String = "127.0.0.1",
        _ body: (inout PeerConnection) async throws -> Result
    ) async throws -> Result {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                        wrappingChannelSynchronously: channel
                    )
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var connection = PeerConnection(responses: inbound.makeAsyncIterator(), requests: outbound)
            return try await body(&connection)
        }
    }

    /// Sends `GET path` and reads the answer: nil if the server closed the connection (or reset
    /// it) without answering.
    mutating func get(_ path: String, keepAlive: Bool = true) async throws -> Answer? {
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path)
        head.headers.add(name: "Host", value: "127.0.0.1")
        if !keepAlive {
            head.headers.add(name: "Connection", value: "close")
        }
        do {
            try await requests.write(contentsOf: [.head(head), .end(nil)])
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            // The server closed first; what it sent before, if anything, is still read below.
        }
        var responseHead: HTTPResponseHead?
        var body = ByteBuffer()
        do {
            while let part = try await responses.next() {
                switch part {
                case .head(let head):
                    responseHead = head
                case .body(let chunk):
                    body.writeImmutableBuffer(chunk)
                case .end:
                    guard let responseHead else { return nil }
                    return Answer(status: responseHead.status, headers: responseHead.headers, body: body)
                }
            }
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            return nil
        }
        return nil
    }

    /// Waits until the server closes the connection; false if it sent anything first.
    mutating func waitForClose() async throws -> Bool {
        do {
            return try await responses.next() == nil
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            return true
        }
    }
}
