import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import PushStatus
import ServiceLifecycle
import ServiceLifecycleTestKit
import Testing

@Suite("StatusServer: hostile clients, limits and shutdown")
struct StatusServerHardeningTests {
    @Test func aMalformedRequestGets400AndACloseAndTheServerKeepsServing() async throws {
        try await withStatusServer { _, client in
            let outcome = try await withDeadline("the answer to a malformed request") {
                try await RawConnection.exchange(port: client.port, chunks: ["THIS IS NOT HTTP\r\n\r\n".bytes])
            }
            #expect(outcome.received.hasPrefix("HTTP/1.1 400 Bad Request\r\n"))
            #expect(outcome.received.contains("Connection: close\r\n"))

            let invalidHeader = try await withDeadline("the answer to an invalid header") {
                try await RawConnection.exchange(
                    port: client.port,
                    chunks: ["GET /status HTTP/1.1\r\nBad Header\r\n\r\n".bytes]
                )
            }
            #expect(invalidHeader.received.hasPrefix("HTTP/1.1 400 Bad Request\r\n"))

            #expect(try await client.get("/health/live").status == .ok)
        }
    }

    @Test func aHugeHeaderIsRefusedWithoutWaitingForItsEnd() async throws {
        // The deadline is long, so only the header limit can end the connection: a server that
        // buffered the header would wait for its end.
        let configuration = StatusServer.Configuration(host: "127.0.0.1", port: 0, requestTimeout: .seconds(120))
        try await withStatusServer(configuration: configuration) { _, client in
            let start = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ".bytes
            let filler = [UInt8](repeating: UInt8(ascii: "a"), count: 8 * 1024)
            // 200 KiB of one header value that never ends.
            let chunks = [start] + Array(repeating: filler, count: 25)
            let outcome = try await withDeadline("the close of a connection with a 200 KiB header") {
                try await RawConnection.exchange(port: client.port, chunks: chunks)
            }
            // The server answers 431 and closes; a client still writing may see a reset instead.
            #expect(
                outcome.received.hasPrefix("HTTP/1.1 431 Request Header Fields Too Large\r\n")
                    || outcome.received.isEmpty
            )
            #expect(outcome.received.isEmpty || outcome.received.contains("Connection: close\r\n"))

            // Many header fields, each small, also count against the limit.
            let manyFields =
                "GET /metrics HTTP/1.1\r\n" + String(repeating: "X-Field: 0123456789abcdef0123456789\r\n", count: 2_000)
                + "\r\n"
            let fieldsOutcome = try await withDeadline("the answer to 2,000 header fields") {
                try await RawConnection.exchange(port: client.port, chunks: [manyFields.bytes])
            }
            #expect(fieldsOutcome.received.hasPrefix("HTTP/1.1 431 ") || fieldsOutcome.received.isEmpty)

            #expect(try await client.get("/metrics").status == .ok)
        }
    }

    @Test func aRequestBodyBeyondTheLimitGets413() async throws {
        try await withStatusServer { _, client in
            let declared = try await withDeadline("the answer to a large declared body") {
                try await RawConnection.exchange(
                    port: client.port,
                    chunks: ["POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n".bytes]
                )
            }
            #expect(declared.received.hasPrefix("HTTP/1.1 413 Payload Too Large\r\n"))

            let chunk = String(repeating: "z", count: 4096)
            let chunked = try await withDeadline("the answer to a large chunked body") {
                try await RawConnection.exchange(
                    port: client.port,
                    chunks: [
                        "POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".bytes,
                        "1000\r\n\(chunk)\r\n".bytes,
                    ]
                )
            }
            #expect(chunked.received.hasPrefix("HTTP/1.1 413 Payload Too Large\r\n") || chunked.received.isEmpty)

            // A small body is read and ignored.
            let small = try await withDeadline("the answer to a small body") {
                try await RawConnection.exchange(
                    port: client.port,
                    chunks: [
                        "GET /health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi".bytes
                    ]
                )
            }
            #expect(small.received.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(try await client.get("/health/live").status == .ok)
        }
    }

    @Test func aClientThatStallsHalfwayThroughARequestIsDisconnectedAfterTheTimeout() async throws {
        // Long enough that a server starved by a busy machine still reads a whole request in
        // time (300 ms was not, once, with the full suite running).
        let configuration = StatusServer.Configuration(host: "127.0.0.1", port: 0, requestTimeout: .milliseconds(1500))
        try await withStatusServer(configuration: configuration) { _, client in
            // The connection stays open until the server closes it: the end of the inbound
            // stream is the close event. Without the timeout it would never close; the deadline
            // leaves a loaded machine (the whole suite on two cores) room to run the timer late.
            let outcome = try await withDeadline(seconds: 20, "the close of a stalled connection") {
                try await RawConnection.exchange(
                    port: client.port,
                    chunks: ["GET /metrics HTTP/1.1\r\nHost: loc".bytes]
                )
            }
            #expect(outcome.received.isEmpty)

            // An idle keep-alive connection is closed the same way.
            let idle = try await withDeadline(seconds: 20, "the close of an idle keep-alive connection") {
                try await RawConnection.exchange(
                    port: client.port,
                    chunks: ["GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n".bytes]
                )
            }
            #expect(idle.received.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(try await client.get("/health/live").status == .ok)
        }
    }

    @Test func aClientThatTricklesItsHeaderIsDisconnectedAfterTheTimeout() async throws {
        // Each byte arrives well within the timeout, so only a deadline on the whole request
        // (not a read-idle timer) ends this connection. The header would take 30 s to trickle
        // in whole; the server must cut it off long before, even on a machine so busy that its
        // event loops run late.
        let configuration = StatusServer.Configuration(host: "127.0.0.1", port: 0, requestTimeout: .milliseconds(400))
        try await withStatusServer(configuration: configuration) { _, client in
            let request = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + String(repeating: "s", count: 600)
            let chunks = request.utf8.map { [$0] }
            let outcome = try await withDeadline(seconds: 40, "the close of a trickling connection") {
                // The pause is the behaviour under test (a slow client), not a synchronisation.
                try await RawConnection.exchange(
                    port: client.port,
                    chunks: chunks,
                    pace: { try await Task.sleep(for: .milliseconds(50)) }
                )
            }
            #expect(outcome.received.isEmpty)
            #expect(outcome.chunksWritten < chunks.count, "the server let the whole trickled header in")
        }
    }

    @Test func connectionsBeyondTheGeneralSlotsAndTheReserveAreClosedAtOnce() async throws {
        // The held connections wait idle while the others are made: a deadline longer than any
        // stall of a loaded machine keeps the server from closing them (and freeing a slot).
        // Without a probe reserve, every connection beyond the general slots is refused.
        let configuration = StatusServer.Configuration(
            host: "127.0.0.1",
            port: 0,
            maximumConnections: 4,
            reservedProbeConnections: 0,
            requestTimeout: .seconds(120)
        )
        try await withStatusServer(configuration: configuration) { _, client in
            try await withHeldConnections(3, client: client) {
                try await client.withConnection { fourth in
                    #expect(try await fourth.get("/health/live").status == .ok)
                    // A fifth is closed without an answer.
                    // The deadline guards against a hang; the first minute of a full parallel
                    // run on two cores can hold the server's event loop for seconds.
                    let refused = try await withDeadline(seconds: 30, "the close of a fifth connection") {
                        try await RawConnection.exchange(
                            port: client.port,
                            chunks: ["GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n".bytes]
                        )
                    }
                    #expect(refused.received.isEmpty)
                    // The four held connections are still served.
                    #expect(try await fourth.get("/health/ready").status == .ok)
                }
                // The fourth has closed: once the server has seen the close (it releases the
                // slot then), a new connection is served again.
                let served = try await withDeadline("a connection served after one closed") {
                    while true {
                        let outcome = try await RawConnection.exchange(
                            port: client.port,
                            chunks: ["GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".bytes]
                        )
                        if !outcome.received.isEmpty {
                            return outcome
                        }
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
                #expect(served.received.hasPrefix("HTTP/1.1 200 OK\r\n"))
            }
        }
    }

    /// Runs `body` while `count` keep-alive connections are open, each proven accepted by an answer.
    private func withHeldConnections<Result>(
        _ count: Int,
        client: StatusClient,
        _ body: () async throws -> Result
    ) async throws -> Result {
        guard count > 0 else { return try await body() }
        return try await client.withConnection { connection in
            #expect(try await connection.get("/health/live").status == .ok)
            return try await withHeldConnections(count - 1, client: client, body)
        }
    }

    @Test func aThousandScrapesOverSixtyConcurrentConnectionsAllSucceed() async throws {
        let registry = PrometheusCollectorRegistry()
        let counter = registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "apn_worker",
                metricName: "messages_consumed",
                unitName: "total",
                helpText: "Kafka messages consumed."
            )
        )
        counter.increment(by: Int64(42))
        let processMetrics = ProcessMetrics(registry: registry)
        let scrapes = CallCounter()
        // Every connection comes from 127.0.0.1: the per-peer cap is raised to let all 60 in.
        var configuration = StatusServer.Configuration(host: "127.0.0.1", port: 0)
        configuration.maximumConnectionsPerPeer = 64
        try await withStatusServer(
            configuration: configuration,
            registry: registry,
            beforeScrape: {
                scrapes.increment()
                processMetrics.update()
            }
        ) { _, client in
            let results = try await withThrowingTaskGroup(of: [(path: String, status: UInt)].self) { group in
                for connectionIndex in 0..<60 {
                    group.addTask {
                        try await client.withConnection { connection in
                            var statuses: [(path: String, status: UInt)] = []
                            // 60 connections × 17 requests = 1,020; every fourth is not a scrape.
                            for request in 0..<17 {
                                let path = (connectionIndex + request) % 4 == 3 ? "/status" : "/metrics"
                                let response = try await connection.get(path)
                                let complete =
                                    path != "/metrics"
                                    || response.text.contains("\napn_worker_messages_consumed_total 42\n")
                                statuses.append((path, complete ? response.status.code : 0))
                            }
                            return statuses
                        }
                    }
                }
                var all: [(path: String, status: UInt)] = []
                for try await statuses in group {
                    all += statuses
                }
                return all
            }
            #expect(results.count == 1_020)
            #expect(results.allSatisfy { $0.status == 200 })
            #expect(scrapes.value == results.filter { $0.path == "/metrics" }.count)
        }
    }

    @Test func gracefulShutdownClosesTheListenerAndOpenConnections() async throws {
        try await testGracefulShutdown { trigger in
            let server = StatusServer(
                configuration: .init(host: "127.0.0.1", port: 0),
                registry: PrometheusCollectorRegistry(),
                provider: FakeStatusProvider(),
                logger: testLogger
            )
            // The task inherits the graceful shutdown trigger's task local.
            let running = Task { try await server.run() }
            do {
                let port = try await server.listeningPort()
                let client = StatusClient(host: "127.0.0.1", port: port, timeout: .seconds(5))
                // A keep-alive connection that is open (and idle) when the shutdown begins.
                let open = try await RawConnection.connect(port: port)
                try await open.channel.writeAndFlush(ByteBuffer(string: "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"))
                #expect(try await client.get("/health/ready").status == .ok)

                trigger.triggerGracefulShutdown()
                // run() returns only after the listener and every connection have closed.
                try await withDeadline("run() returning after graceful shutdown") {
                    try await running.value
                }
                try await withDeadline("the close of the open connection") {
                    try await open.channel.closeFuture.get()
                }
                await #expect(throws: StatusError.self) {
                    _ = try await client.get("/health/live")
                }
                await #expect(throws: StatusError.self) {
                    _ = try await server.listeningAddress()
                }
            } catch {
                running.cancel()
                throw error
            }
        }
    }

    @Test func cancellationStopsTheServerToo() async throws {
        let server = StatusServer(
            configuration: .init(host: "127.0.0.1", port: 0),
            registry: PrometheusCollectorRegistry(),
            provider: FakeStatusProvider(),
            logger: testLogger
        )
        let running = Task { try await server.run() }
        let port = try await server.listeningPort()
        #expect(try await StatusClient(host: "127.0.0.1", port: port).get("/health/live").status == .ok)
        running.cancel()
        try await withDeadline("run() returning after cancellation") { try await running.value }
        await #expect(throws: StatusError.self) {
            _ = try await StatusClient(host: "127.0.0.1", port: port).get("/health/live")
        }
    }

    /// Connections accepted while the server stops may still be queued, never handed to a
    /// connection task, when the accept loop ends: each must still be closed, and releasing it
    /// must not stop the process (SwiftNIO traps on a `NIOAsyncChannel` released unfinished).
    @Test func cancelledWhileConnectionsArriveEveryConnectionIsClosed() async throws {
        let request = ByteBuffer(string: "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in 0..<8 {
            let server = StatusServer(
                configuration: .init(host: "127.0.0.1", port: 0, maximumConnections: 1_000),
                registry: PrometheusCollectorRegistry(),
                provider: FakeStatusProvider(),
                logger: testLogger
            )
            let running = Task { try await server.run() }
            let port = try await server.listeningPort()
            let (connected, connectedSink) = AsyncStream.makeStream(of: Void.self)
            let closed = try await withDeadline(seconds: 30, "every connection closed after the server was cancelled") {
                await withThrowingTaskGroup(of: Bool.self) { group in
                    for _ in 0..<60 {
                        group.addTask {
                            let channel = try await RawConnection.connect(port: port)
                            connectedSink.yield()
                            // Keep-alive: a served connection stays open until the server stops;
                            // one never served must be closed too. Reading ends only then.
                            return try await channel.executeThenClose { inbound, outbound in
                                try? await outbound.write(request)
                                do {
                                    for try await _ in inbound {}
                                } catch {}
                                return true
                            }
                        }
                    }
                    // Cancel while half of them are connected and the rest still arriving.
                    var count = 0
                    for await _ in connected {
                        count += 1
                        if count == 30 { break }
                    }
                    running.cancel()
                    var closed = 0
                    while let result = await group.nextResult() {
                        if case .success(true) = result { closed += 1 }
                    }
                    return closed
                }
            }
            connectedSink.finish()
            #expect(closed >= 30, "connections that connected and then saw their close")
            try await withDeadline("run() returning after cancellation") { try await running.value }
        }
    }

    @Test func aPortInUseFailsRunAndListeningAddressWithASentence() async throws {
        try await withStatusServer { _, client in
            let second = StatusServer(
                configuration: .init(host: "127.0.0.1", port: client.port),
                registry: PrometheusCollectorRegistry(),
                provider: FakeStatusProvider(),
                logger: testLogger
            )
            let error = await #expect(throws: StatusError.self) { try await second.run() }
            #expect(error?.code == .bindFailed)
            #expect(
                error?.message.contains("cannot listen on 127.0.0.1:\(client.port): address already in use") == true
            )
            let waiting = await #expect(throws: StatusError.self) { _ = try await second.listeningAddress() }
            #expect(waiting?.code == .bindFailed)
            let again = await #expect(throws: StatusError.self) { try await second.run() }
            #expect(again?.code == .alreadyRunning)
        }
    }
}
