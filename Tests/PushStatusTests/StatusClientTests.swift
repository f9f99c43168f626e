import NIOCore
import NIOPosix
import PushStatus
import PushTestSupport
import Testing

@Suite("StatusClient (apn-worker status)")
struct StatusClientTests {
    @Test func fetchesAndDecodesTheStatusOfARunningServer() async throws {
        let provider = FakeStatusProvider()
        try await withStatusServer(provider: provider) { _, client in
            let status = try await client.status()
            #expect(status == WorkerStatus.sample)
            #expect(StatusReport.render(status).hasPrefix("worker     worker-1\n"))
        }
    }

    @Test func anAddressWithNothingListeningIsUnreachableWithASentence() async throws {
        // A port bound by a socket that never listens: a port closed again could be handed to
        // a server that a concurrent test binds to port 0, which then answered (or reset).
        let refusing = try RefusingPort()
        let port = refusing.port

        let client = StatusClient(host: "127.0.0.1", port: port, timeout: .seconds(5))
        let error = await #expect(throws: StatusError.self) { _ = try await client.status() }
        #expect(error?.code == .unreachable)
        #expect(error?.message == "cannot reach the status server at 127.0.0.1:\(port): connection refused")
        withExtendedLifetime(refusing) {}
    }

    @Test func aServerThatNeverAnswersTimesOut() async throws {
        // Accepts connections and never writes.
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(
            host: "127.0.0.1",
            port: 0
        ).get()
        let port = try #require(silent.localAddress?.port)
        let client = StatusClient(host: "127.0.0.1", port: port, timeout: .milliseconds(300))
        let error = await #expect(throws: StatusError.self) { _ = try await client.status() }
        #expect(error?.code == .timedOut)
        #expect(
            error?.message.hasPrefix("the status server at 127.0.0.1:\(port) did not answer GET /status within") == true
        )
        try await silent.close()
    }

    @Test func aServerThatIsNotAStatusServerIsABadResponse() async throws {
        try await withStatusServer { _, client in
            // /metrics is not JSON: decoding it as a status fails with a sentence.
            var metricsClient = client
            metricsClient.maximumResponseBytes = 4
            let error = await #expect(throws: StatusError.self) { _ = try await metricsClient.get("/status") }
            #expect(error?.code == .badResponse)
            #expect(error?.message.contains("is larger than 4 bytes") == true)
        }
    }
}
