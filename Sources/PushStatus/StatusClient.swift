import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A small HTTP/1 client of a worker's status server: `apn-worker status` reads `/status` with
/// it, tests and scripts read `/metrics` and the health checks.
///
/// Every exchange has a deadline (``timeout``, for connecting and for each answer) and every
/// answer a size limit (``maximumResponseBytes``); failures are ``StatusError``s whose message
/// names the address.
public struct StatusClient: Sendable {
    public var host: String
    public var port: Int
    /// How long connecting may take, and then each request until its answer has ended.
    public var timeout: Duration
    /// The largest answer body accepted.
    public var maximumResponseBytes: Int
    public var eventLoopGroup: any EventLoopGroup

    public init(
        host: String,
        port: Int,
        timeout: Duration = .seconds(5),
        maximumResponseBytes: Int = 8 << 20,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.host = host
        self.port = port
        self.timeout = timeout
        self.maximumResponseBytes = maximumResponseBytes
        self.eventLoopGroup = eventLoopGroup
    }

    /// `HOST:PORT`, with an IPv6 host in brackets.
    public var address: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// One answer, read completely.
    public struct Response: Sendable {
        public var status: HTTPResponseStatus
        public var headers: HTTPHeaders
        public var body: ByteBuffer

        public var text: String { String(buffer: body) }
    }

    /// `GET path` on a connection of its own.
    public func get(_ path: String) async throws -> Response {
        try await withConnection { connection in
            try await connection.get(path, keepAlive: false)
        }
    }

    /// `GET /status`, decoded.
    public func status() async throws -> WorkerStatus {
        let response = try await get("/status")
        guard response.status == .ok else {
            throw StatusError(
                .badResponse,
                "\(address) answered \(response.status.code) \(response.status.reasonPhrase) to GET /status; "
                    + "is it a worker's status server?"
            )
        }
        do {
            return try JSONDecoder().decode(WorkerStatus.self, from: Data(response.body.readableBytesView))
        } catch {
            throw StatusError(
                .badResponse,
                "the answer of \(address) to GET /status is not a worker's status: \(error)",
                underlying: error
            )
        }
    }

    /// Opens one keep-alive connection, runs `body` with it and closes it.
    public func withConnection<Result>(_ body: (inout Connection) async throws -> Result) async throws -> Result {
        let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>
        do {
            channel = try await ClientBootstrap(group: eventLoopGroup)
                .connectTimeout(TimeAmount(timeout))
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .connect(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                            wrappingChannelSynchronously: channel
                        )
                    }
                }
        } catch {
            throw connectFailure(error)
        }
        return try await channel.executeThenClose { inbound, outbound in
            var connection = Connection(
                client: self,
                channel: channel.channel,
                responses: inbound.makeAsyncIterator(),
                requests: outbound
            )
            return try await body(&connection)
        }
    }

    /// One open connection to the status server; requests on it are sent one after the other.
    public struct Connection {
        let client: StatusClient
        let channel: any Channel
        var responses: NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator
        let requests: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>

        /// Sends `method path` and reads the whole answer. With `keepAlive` false the request
        /// asks the server to close the connection after answering.
        public mutating func get(
            _ path: String,
            method: HTTPMethod = .GET,
            keepAlive: Bool = true
        ) async throws -> Response {
            let timedOut = TimeoutFlag()
            let channel = channel
            let deadline = channel.eventLoop.scheduleTask(in: TimeAmount(client.timeout)) {
                timedOut.set()
                channel.close(promise: nil)
            }
            defer { deadline.cancel() }
            do {
                var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
                head.headers.add(name: "Host", value: client.address)
                head.headers.add(name: "User-Agent", value: "apn-worker")
                if !keepAlive {
                    head.headers.add(name: "Connection", value: "close")
                }
                try await requests.write(contentsOf: [.head(head), .end(nil)])
                var responseHead: HTTPResponseHead?
                var body = ByteBuffer()
                while let part = try await responses.next() {
                    switch part {
                    case .head(let head) where head.status.code < 200:
                        continue
                    case .head(let head):
                        responseHead = head
                    case .body(let chunk):
                        guard body.readableBytes + chunk.readableBytes <= client.maximumResponseBytes else {
                            throw StatusError(
                                .badResponse,
                                "the answer of \(client.address) to \(method) \(path) is larger than \(client.maximumResponseBytes) bytes"
                            )
                        }
                        body.writeImmutableBuffer(chunk)
                    case .end:
                        guard let responseHead else {
                            throw StatusError(
                                .badResponse,
                                "\(client.address) ended an answer to \(method) \(path) that had no head"
                            )
                        }
                        return Response(status: responseHead.status, headers: responseHead.headers, body: body)
                    }
                }
                throw StatusError(
                    .badResponse,
                    "\(client.address) closed the connection before its answer to \(method) \(path) ended"
                )
            } catch {
                if timedOut.isSet {
                    throw StatusError(
                        .timedOut,
                        "the status server at \(client.address) did not answer \(method) \(path) within \(client.timeout)"
                    )
                }
                if let error = error as? StatusError {
                    throw error
                }
                throw StatusError(
                    .badResponse,
                    "the connection to \(client.address) failed during \(method) \(path): \(describe(error))",
                    underlying: error
                )
            }
        }
    }

    private func connectFailure(_ error: any Error) -> StatusError {
        let reason: String
        switch error {
        case let error as NIOConnectionError:
            if !error.connectionErrors.isEmpty {
                var reasons: [String] = []
                for failure in error.connectionErrors where !reasons.contains(describe(failure.error)) {
                    reasons.append(describe(failure.error))
                }
                reason = reasons.joined(separator: "; ")
            } else if error.dnsAError != nil || error.dnsAAAAError != nil {
                reason = "cannot resolve the host name \(host)"
            } else {
                reason = "\(error)"
            }
        case ChannelError.connectTimeout:
            return StatusError(
                .timedOut,
                "cannot reach the status server at \(address): no connection within \(timeout)",
                underlying: error
            )
        default:
            reason = describe(error)
        }
        return StatusError(.unreachable, "cannot reach the status server at \(address): \(reason)", underlying: error)
    }
}

/// Set by a request's deadline when it closes the connection.
private final class TimeoutFlag: Sendable {
    private let value = Atomic<Bool>(false)

    func set() {
        value.store(true, ordering: .releasing)
    }

    var isSet: Bool {
        value.load(ordering: .acquiring)
    }
}
