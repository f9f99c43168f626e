import APNSCore
import Foundation
import PushTestSupport
import PushWorker
import Testing

/// `apn-worker run` behind an HTTP proxy: with `HTTPS_PROXY` set, the binary gateway and the
/// HTTP/2 API are both reached through tinyproxy's `CONNECT` tunnels.
@Suite("Proxy end to end", .serialized, .timeLimit(.minutes(3)))
struct ProxyEndToEndTests {
    @Test("With HTTPS_PROXY, jobs for a binary and an HTTP/2 app are delivered through the proxy")
    func deliveryThroughTheProxy() async throws {
        let proxy = try TinyProxy(extra: ["BasicAuth worker s3cret"])
        try await proxy.start()
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        do {
            try await stack.startWorker(
                "w1",
                environment: ["HTTPS_PROXY": proxy.url(user: "worker", password: "s3cret")]
            )
            let jobs = (0..<20).map { i in
                let app = i % 2 == 0 ? WorkerStack.app : WorkerStack.http2App
                let token = DeviceToken.numbered(500 + i)
                return (
                    "proxy-\(i)", token,
                    Array(#"{"id":"proxy-\#(i)","app":"\#(app)","token":"\#(token.hex)","alert":"a"}"#.utf8)
                )
            }
            try await stack.produce(jobs.map(\.2))
            let results = try await ConfigFeaturesEndToEndTests.results(stack, for: jobs.map { ($0.0, $0.1) })
            #expect(results.count == 20)
            #expect(results.values.allSatisfy { $0["type"] == "transmitted" })
            let log = proxy.log
            #expect(log.contains("CONNECT 127.0.0.1:\(stack.simulator.binaryPort) HTTP/1.1"), "\(log)")
            let http2Port = try #require(stack.http2Simulator?.port)
            #expect(log.contains("CONNECT 127.0.0.1:\(http2Port) HTTP/1.1"), "\(log)")
            // The worker logged its pools with the proxy, the password masked.
            let workerLog = stack.fullLog(of: "w1")
            #expect(workerLog.contains("http://worker:***@127.0.0.1:\(proxy.port)"))
            #expect(!workerLog.contains("s3cret"))
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
        await proxy.stop()
    }
}
