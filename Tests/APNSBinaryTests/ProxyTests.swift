import APNSCore
import APNSSimulator
import Foundation
import NIOCore
import NIOPosix
import PushTestSupport
import Testing

@testable import APNSBinary

#if canImport(Glibc)
import Glibc
#endif

/// The binary gateway and the feedback service through a real HTTP proxy (tinyproxy), with
/// `CONNECT` tunnels (``APNSConnector``), and the sentences of a tunnel that cannot be opened.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ProxyTests {
    static func submissions(_ range: Range<Int>) -> [APNSSubmission] {
        let n = Harness.notification()
        return range.map { APNSSubmission(tag: UInt64($0), token: Harness.token($0), notification: n) }
    }

    /// Opens a tunnel to `port` through `proxy` with no handler behind it, and returns the
    /// error it fails with.
    static func tunnelError(
        to port: Int,
        through proxy: APNSProxy,
        timeout: TimeAmount = .seconds(5)
    ) async -> APNSError? {
        do {
            let channel = try await APNSConnector.connect(
                host: "127.0.0.1",
                port: port,
                proxy: proxy,
                group: MultiThreadedEventLoopGroup.singleton,
                connectTimeout: timeout
            ) { $0 }.get()
            try? await channel.close()
            return nil
        } catch {
            return error as? APNSError
        }
    }

    @Test("2,000 notifications through tinyproxy: each accepted once, reported transmitted once")
    func deliveryThroughProxy() async throws {
        let proxy = try TinyProxy()
        try await proxy.start()
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator) {
            $0.proxy = try? APNSProxy(url: proxy.url())
            $0.maxConnections = 2
        }
        let run = try await Harness.run(client, Self.submissions(0..<2_000))
        let accepted = simulator.acceptedByToken
        await simulator.stop()
        let log = proxy.log
        await proxy.stop()

        #expect(run.duplicateOutcomes == 0)
        #expect(run.outcomes.count == 2_000)
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted && !$0.possibleDuplicate })
        #expect(accepted.count == 2_000 && accepted.values.allSatisfy { $0 == 1 })
        // The connections went through the proxy, not around it.
        #expect(log.contains("CONNECT 127.0.0.1:\(simulator.binaryPort) HTTP/1.1"), "tinyproxy's log: \(log)")
    }

    @Test("The feedback service through tinyproxy with Basic authentication returns every tuple")
    func feedbackThroughProxy() async throws {
        let proxy = try TinyProxy(extra: ["BasicAuth alice s3cret"])
        try await proxy.start()
        let simulator = try await Harness.simulator()
        let tuples = (0..<50).map { FeedbackTuple(timestamp: 1_700_000_000 + UInt32($0), token: Harness.token($0)) }
        simulator.setFeedback(tuples)
        var config = APNSFeedbackClient.Configuration(
            host: "127.0.0.1",
            port: try #require(simulator.feedbackPort),
            credentials: try Harness.clientCredentials()
        )
        config.proxy = try APNSProxy(url: proxy.url(user: "alice", password: "s3cret"))
        config.readTimeout = .seconds(2)
        let read = try await APNSFeedbackClient(configuration: config).fetch()
        await simulator.stop()
        let log = proxy.log
        await proxy.stop()

        #expect(read == tuples)
        #expect(log.contains("CONNECT 127.0.0.1:\(config.port) HTTP/1.1"), "tinyproxy's log: \(log)")
    }

    /// The feedback client wraps its channel in a `NIOAsyncChannel` before the tunnel is open; a
    /// tunnel refused after the TCP connect must end in the error each time (and the channel be
    /// closed before that wrapper is released: SwiftNIO traps on one released while open).
    @Test("The feedback service through a proxy that refuses the tunnel (407, 403): an error naming it, each time")
    func feedbackThroughARefusingProxy() async throws {
        let proxy = try TinyProxy(extra: ["BasicAuth alice s3cret", "ConnectPort 9"])
        try await proxy.start()
        let simulator = try await Harness.simulator()
        var config = APNSFeedbackClient.Configuration(
            host: "127.0.0.1",
            port: try #require(simulator.feedbackPort),
            credentials: try Harness.clientCredentials()
        )
        config.readTimeout = .seconds(2)
        for (url, answer) in [(proxy.url(), "407"), (proxy.url(user: "alice", password: "s3cret"), "403")] {
            config.proxy = try APNSProxy(url: url)
            for _ in 0..<20 {
                do {
                    _ = try await APNSFeedbackClient(configuration: config).fetch()
                    Issue.record("the feedback service was read through a proxy that refuses the tunnel")
                } catch {
                    #expect("\(error)".contains(answer), "\(error)")
                }
            }
        }
        await simulator.stop()
        await proxy.stop()
    }

    @Test("A proxy that wants Basic authentication: 407 without or with wrong credentials, in one sentence")
    func authenticationRefused() async throws {
        let proxy = try TinyProxy(extra: ["BasicAuth alice s3cret"])
        try await proxy.start()
        let simulator = try await Harness.simulator()
        let port = simulator.binaryPort
        let endpoint = "127.0.0.1:\(proxy.port)"

        let anonymous = await Self.tunnelError(to: port, through: try APNSProxy(url: proxy.url()))
        #expect(anonymous?.code == .proxyRefused)
        #expect(
            anonymous?.message
                == "the proxy at \(endpoint) requires authentication (407 Proxy Authentication Required) for the "
                + "tunnel to 127.0.0.1:\(port); give a user and password in the proxy URL (http://user:password@host:port)"
        )

        let wrong = await Self.tunnelError(
            to: port,
            through: try APNSProxy(url: proxy.url(user: "alice", password: "not-the-password"))
        )
        // tinyproxy answers credentials it rejects with 401 rather than 407.
        #expect(wrong?.code == .proxyRefused)
        #expect(
            wrong?.message
                == "the proxy at \(endpoint) refused the credentials in the proxy URL (401 Unauthorized) for the "
                + "tunnel to 127.0.0.1:\(port); check the user and password"
        )

        // Through the pool: a failed connect like any other; past the retry limit the
        // notification fails with the sentence, and the password is nowhere in it.
        let client = try Harness.client(simulator) {
            $0.proxy = try? APNSProxy(url: proxy.url(user: "alice", password: "not-the-password"))
            $0.connectionRetryLimit = 2
            $0.reconnectBaseDelay = .milliseconds(1)
            $0.reconnectMaxDelay = .milliseconds(5)
        }
        let run = try await Harness.run(client, Self.submissions(0..<3))
        await simulator.stop()
        await proxy.stop()
        #expect(run.outcomes.count == 3)
        for outcome in run.outcomes.values {
            #expect(outcome.status == .connectionFailed)
            #expect(outcome.message?.contains("refused the credentials in the proxy URL") == true, "\(outcome)")
            #expect(outcome.message?.contains("not-the-password") == false)
        }
        #expect(client.snapshot().connectFailures[.refused, default: 0] >= 2)
    }

    @Test("A proxy whose rules deny the destination: 403 in one sentence naming it")
    func destinationDenied() async throws {
        // tinyproxy allows CONNECT only to the ports listed in ConnectPort.
        let proxy = try TinyProxy(extra: ["ConnectPort 9"])
        try await proxy.start()
        let simulator = try await Harness.simulator()
        let port = simulator.binaryPort
        let error = await Self.tunnelError(to: port, through: try APNSProxy(url: proxy.url()))
        await simulator.stop()
        await proxy.stop()
        #expect(error?.code == .proxyRefused)
        #expect(
            error?.message
                == "the proxy at 127.0.0.1:\(proxy.port) refused the tunnel to 127.0.0.1:\(port) (403 Access violation); "
                + "the proxy's rules must allow CONNECT to that host and port"
        )
    }

    @Test("A proxy that cannot be reached, and one that never answers the CONNECT")
    func unreachableAndSilent() async throws {
        let refusing = try RefusingPort()
        let unreachable = await Self.tunnelError(to: 2195, through: APNSProxy(host: "127.0.0.1", port: refusing.port))
        #expect(unreachable?.code == .proxyUnreachable)
        #expect(unreachable?.message == "cannot reach the proxy at 127.0.0.1:\(refusing.port)")
        #expect(unreachable.map { APNSPoolSnapshot.ConnectFailure(connectError: $0) } == .refused)

        let silent = try SilentListener()
        let timedOut = await Self.tunnelError(
            to: 2195,
            through: APNSProxy(host: "127.0.0.1", port: silent.port),
            timeout: .milliseconds(300)
        )
        #expect(timedOut?.code == .timeout)
        #expect(
            timedOut?.message
                == "the proxy at 127.0.0.1:\(silent.port) did not open the tunnel to 127.0.0.1:2195 within 300 ms"
        )
    }

    @Test("The proxy goes away mid-run and comes back on its port: the pool reconnects through it, nothing is lost")
    func proxyRestart() async throws {
        let proxy = try TinyProxy()
        try await proxy.start()
        let simulator = try await Harness.simulator()
        let client = try Harness.client(simulator) {
            $0.proxy = try? APNSProxy(url: proxy.url())
            $0.maxConnections = 2
            $0.minConnections = 1
            $0.connectionRetryLimit = nil
            $0.reconnectBaseDelay = .milliseconds(20)
            $0.reconnectMaxDelay = .milliseconds(100)
        }
        let first = Self.submissions(0..<1_500)
        let second = Self.submissions(1_500..<3_000)
        let count = first.count + second.count
        let (proxyDown, announceProxyDown) = AsyncStream<Void>.makeStream()
        // Once the first half has its outcomes, the reader kills the proxy (cutting the open
        // tunnels) and lets the sender hand over the second half, which waits in the pool while
        // its connects are refused; then it starts the proxy again on the same port.
        let (run, downtime) = try await withThrowingTaskGroup(of: (DeliveryRun, APNSPoolSnapshot)?.self) { group in
            group.addTask {
                try await client.send(first)
                for await _ in proxyDown { break }
                try await client.send(second)
                return nil
            }
            group.addTask {
                var run = DeliveryRun()
                var downtime: APNSPoolSnapshot?
                for await event in client.events {
                    guard let outcome = event.outcome else { continue }
                    if run.outcomes.updateValue(outcome, forKey: outcome.tag) != nil { run.duplicateOutcomes += 1 }
                    if run.outcomes.count == count { break }
                    if downtime == nil && run.outcomes.count >= first.count {
                        await proxy.stop()
                        announceProxyDown.yield()
                        announceProxyDown.finish()
                        downtime = try await DeliveryHarness.snapshot(of: client, "queued work and a refused connect") {
                            $0.queued > 0 && $0.connectFailures[.refused, default: 0] >= 1
                        }
                        try await proxy.start()
                    }
                }
                return (run, downtime ?? APNSPoolSnapshot())
            }
            var result: (DeliveryRun, APNSPoolSnapshot)?
            while let next = try await group.next() {
                if let next { result = next }
            }
            return result ?? (DeliveryRun(), APNSPoolSnapshot())
        }
        let after = client.snapshot()
        await client.shutdown(gracePeriod: .seconds(10))
        let accepted = simulator.acceptedByToken
        await simulator.stop()
        let log = proxy.log
        await proxy.stop()

        #expect(run.duplicateOutcomes == 0)
        #expect(run.outcomes.count == count)
        #expect(run.outcomes.values.allSatisfy { $0.isTransmitted })
        // Every notification reached the gateway; one accepted twice was resent after the cut
        // and says so.
        for i in 0..<count {
            let times = accepted[Harness.token(i)] ?? 0
            #expect(times >= 1, "token \(i) never accepted")
            if times > 1 { #expect(run.outcomes[UInt64(i)]?.possibleDuplicate == true) }
        }
        #expect(downtime.queued > 0)
        #expect(after.connectionsOpened > downtime.connectionsOpened)
        // The restarted proxy (a new log) carried the new connections.
        #expect(log.contains("CONNECT 127.0.0.1:\(simulator.binaryPort) HTTP/1.1"), "tinyproxy's log: \(log)")
    }
}

/// A port on 127.0.0.1 that completes TCP connections (the kernel's backlog) but never reads
/// or answers: a proxy that hangs.
final class SilentListener {
    let port: Int
    private let descriptor: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(fd, raw, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, raw, &length) == 0
            }
        }
        guard listening else {
            let code = errno
            close(fd)
            throw POSIXError(.init(rawValue: code) ?? .EIO)
        }
        descriptor = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(descriptor) }
}
