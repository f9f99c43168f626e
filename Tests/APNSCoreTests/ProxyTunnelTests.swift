import NIOCore
import NIOEmbedded
import Testing

@testable import APNSCore

/// ``APNSProxy``'s URLs and ``HTTPConnectTunnelHandler`` on an `EmbeddedChannel`: the request
/// it writes, the answers it accepts and refuses, and what the handlers behind it see.
@Suite struct ProxyTunnelTests {
    @Test("Proxy URLs: scheme optional, credentials percent-decoded, curl's default port, password never shown")
    func urls() throws {
        let full = try APNSProxy(url: "http://al%69ce:p%40ss:word@proxy.internal:3128/")
        #expect(full == APNSProxy(host: "proxy.internal", port: 3128, username: "alice", password: "p@ss:word"))
        #expect(full.description == "http://alice:***@proxy.internal:3128")
        #expect(!String(reflecting: full).contains("p@ss"))
        var dumped = ""
        dump(full, to: &dumped)
        #expect(!dumped.contains("p@ss"))
        #expect(full.authorization == "Basic YWxpY2U6cEBzczp3b3Jk")

        #expect(try APNSProxy(url: "proxy:8080") == APNSProxy(host: "proxy", port: 8080))
        #expect(try APNSProxy(url: "HTTP://proxy") == APNSProxy(host: "proxy", port: 1080))
        #expect(try APNSProxy(url: "http://[::1]:3128") == APNSProxy(host: "::1", port: 3128))
        #expect(try APNSProxy(url: "http://[::1]:3128").endpoint == "[::1]:3128")
        #expect(try APNSProxy(url: "http://bob@proxy:1").authorization == "Basic Ym9iOg==")

        for bad in [
            "http://alice:pw@proxy:0", "ftp://proxy:21", "http://proxy:3128/path", "http://:3128", "http://a:b:c",
        ] {
            #expect(throws: APNSError.self, "\(bad)") { try APNSProxy(url: bad) }
        }
        do {
            _ = try APNSProxy(url: "https://alice:topsecret@proxy:443")
            Issue.record("an https proxy URL was accepted")
        } catch {
            #expect(!error.message.contains("topsecret"))
            #expect(error.message.contains("alice:***@proxy:443"))
        }
    }

    @Test("A password with /, ?, # or @ is read whole, up to the last @, and masked whole in a refused URL's sentence")
    func passwordsWithURLCharacters() throws {
        let proxy = try APNSProxy(url: "http://alice:Pw/Secret7?#@x@proxy.internal:3128")
        #expect(proxy == APNSProxy(host: "proxy.internal", port: 3128, username: "alice", password: "Pw/Secret7?#@x"))
        #expect(proxy.description == "http://alice:***@proxy.internal:3128")
        for bad in [
            "http://alice:Pw/Secret7@proxy.internal:port", "alice:Pw/Secret7@proxy:0", "socks5://alice:Pw/Secret7@p",
        ] {
            do {
                _ = try APNSProxy(url: bad)
                Issue.record("\(bad) was accepted")
            } catch {
                #expect(!error.message.contains("Secret7"), "\(error.message)")
                #expect(error.message.contains("alice:***@"), "\(error.message)")
            }
        }
    }

    @Test("Answer heads are found only once complete, whatever the split")
    func heads() {
        let answer = Array("HTTP/1.1 200 Connection established\r\nProxy-Agent: x\r\n\r\n".utf8)
        for cut in 0..<answer.count {
            let head = HTTPConnectTunnelHandler.parseHead(answer[..<cut])
            #expect(head == nil, "cut at \(cut)")
        }
        #expect(
            HTTPConnectTunnelHandler.parseHead(answer + Array("tls".utf8))
                == .answer(status: 200, reason: "Connection established", length: answer.count)
        )
        #expect(HTTPConnectTunnelHandler.parseHead(Array("SSH-2.0-OpenSSH\r\n\r\n".utf8)) == .malformed)
        #expect(HTTPConnectTunnelHandler.parseHead(Array("HTTP/1.1 2000 x\r\n\r\n".utf8)) == .malformed)
        #expect(
            HTTPConnectTunnelHandler.parseHead(Array("HTTP/1.0 407\r\n\r\n".utf8))
                == .answer(status: 407, reason: "", length: 16)
        )
    }

    /// Records the events that reach the handlers behind the tunnel.
    final class Recorder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        var events: [String] = []
        func channelActive(context: ChannelHandlerContext) { events.append("active") }
        func channelInactive(context: ChannelHandlerContext) { events.append("inactive") }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            events.append("read " + String(buffer: unwrapInboundIn(data)))
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { events.append("error") }
    }

    static func tunnel(
        proxy: APNSProxy = APNSProxy(host: "proxy", port: 3128, username: "alice", password: "pw")
    ) throws -> (EmbeddedChannel, Recorder, EventLoopPromise<Void>) {
        let channel = EmbeddedChannel()
        let established = channel.eventLoop.makePromise(of: Void.self)
        let recorder = Recorder()
        try channel.pipeline.syncOperations.addHandler(
            HTTPConnectTunnelHandler(
                proxy: proxy,
                target: "api.push.apple.com:443",
                timeout: .seconds(5),
                established: established
            )
        )
        try channel.pipeline.syncOperations.addHandler(recorder)
        return (channel, recorder, established)
    }

    @Test("200: the handlers behind see channelActive and the bytes after the head, and the handler leaves")
    func established() throws {
        let (channel, recorder, established) = try Self.tunnel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 3128)).wait()
        let request = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(
            String(buffer: request)
                == "CONNECT api.push.apple.com:443 HTTP/1.1\r\nHost: api.push.apple.com:443\r\n"
                + "Proxy-Authorization: Basic YWxpY2U6cHc=\r\n\r\n"
        )
        #expect(recorder.events.isEmpty)

        // The answer arrives in pieces, the last with the first bytes of the server's.
        try channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 Connection"))
        #expect(recorder.events.isEmpty)
        try channel.writeInbound(ByteBuffer(string: " established\r\n\r\nhello"))
        #expect(recorder.events == ["active", "read hello"])
        try established.futureResult.wait()
        #expect(throws: (any Error).self) {
            try channel.pipeline.syncOperations.handler(type: HTTPConnectTunnelHandler.self)
        }

        try channel.writeInbound(ByteBuffer(string: "more"))
        #expect(recorder.events == ["active", "read hello", "read more"])
        _ = try channel.finish(acceptAlreadyClosed: true)
    }

    @Test("407, 403 and a close before the answer fail the tunnel; the handlers behind see nothing")
    func refused() throws {
        for (answer, code, words) in [
            (
                "HTTP/1.0 407 Proxy Authentication Required\r\n\r\n", APNSError.Code.proxyRefused,
                "refused the credentials"
            ),
            (
                "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", .proxyRefused,
                "refused the tunnel to api.push.apple.com:443"
            ),
            ("SSH-2.0-OpenSSH_9.2\r\n", .proxyUnreachable, "not HTTP/1.x"),
        ] {
            let (channel, recorder, established) = try Self.tunnel()
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 3128)).wait()
            _ = try channel.readOutbound(as: ByteBuffer.self)
            try channel.writeInbound(ByteBuffer(string: answer))
            #expect(!channel.isActive)
            #expect(recorder.events.isEmpty)
            #expect(throws: APNSError.self) { try established.futureResult.wait() }
            do {
                try established.futureResult.wait()
            } catch let error as APNSError {
                #expect(error.code == code)
                #expect(error.message.contains(words), "\(error.message)")
                #expect(!error.message.contains("pw"))
            }
        }

        let (channel, recorder, established) = try Self.tunnel(proxy: APNSProxy(host: "proxy", port: 3128))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 3128)).wait()
        let request = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(!String(buffer: request).contains("Proxy-Authorization"))
        try channel.close().wait()
        #expect(recorder.events.isEmpty)
        do {
            try established.futureResult.wait()
            Issue.record("the tunnel was established")
        } catch let error as APNSError {
            #expect(
                error.message
                    == "the proxy at proxy:3128 closed the connection before answering the CONNECT to api.push.apple.com:443"
            )
        }
    }
}
