import APNSCore
import PushConfiguration
import Testing

@testable import PushWorker

/// Each client of an app environment gets the proxy for its own host: the gateway, the feedback
/// service and the channel management API are matched against `no_proxy` one by one.
@Suite struct PoolProxyTests {
    static let credentials = """
        certificatePemEnv: CERT
        keyPemEnv: KEY
        gateway: gateway.push.apple.com:2195
        feedback: feedback.internal:2196
        channelManagement: channels.internal:2196
        """

    static func configuration(transport: String, proxyVariables: [String: String]) throws -> WorkerConfiguration {
        try PoolSettingsTests.configuration(
            transport: transport,
            credentials: credentials,
            environment: [
                "CERT": PoolSettingsTests.certificates.client.certificatePEM,
                "KEY": PoolSettingsTests.certificates.client.keyPEM,
            ].merging(proxyVariables) { $1 }
        )
    }

    @Test("A binary pool and its feedback client: the gateway through the proxy, the feedback service not")
    func binary() throws {
        let configuration = try Self.configuration(
            transport: "binary",
            proxyVariables: ["HTTPS_PROXY": "http://bob:pw@proxy.internal:3128", "NO_PROXY": ".internal"]
        )
        let pool = try #require(try PoolSettings.all(for: configuration).first?.value)
        guard case .binary(let gateway) = pool.transport else {
            Issue.record("not a binary pool")
            return
        }
        let proxy = APNSProxy(host: "proxy.internal", port: 3128, username: "bob", password: "pw")
        #expect(gateway.proxy == proxy)
        #expect(pool.feedback?.proxy == nil)
        #expect(pool.transport.proxyDescription == "http://bob:***@proxy.internal:3128")
    }

    @Test("An HTTP/2 pool through the proxy, its channel manager directly")
    func http2() throws {
        let configuration = try Self.configuration(
            transport: "http2",
            proxyVariables: ["https_proxy": "http://proxy.internal:3128", "no_proxy": "channels.internal"]
        )
        let pool = try #require(try PoolSettings.all(for: configuration).first?.value)
        guard case .http2(let gateway) = pool.transport else {
            Issue.record("not an HTTP/2 pool")
            return
        }
        #expect(gateway.proxy == APNSProxy(host: "proxy.internal", port: 3128))
        let manager = try ChannelManagement.manager(for: configuration, app: "a", environment: nil)
        #expect(manager.configuration.host == "channels.internal")
        #expect(manager.configuration.proxy == nil)

        let everywhere = try Self.configuration(
            transport: "http2",
            proxyVariables: ["https_proxy": "http://proxy.internal:3128"]
        )
        let managed = try ChannelManagement.manager(for: everywhere, app: "a", environment: nil)
        #expect(managed.configuration.proxy == APNSProxy(host: "proxy.internal", port: 3128))
    }

    @Test(
        "broadcastGateway: the environment's broadcasts get a pool of their own there, with the same credentials and the proxy for its host; none when it is the gateway; a binary app refuses it"
    )
    func broadcastGateway() throws {
        let lines = Self.credentials.replacingOccurrences(of: "gateway: gateway.push.apple.com:2195", with: "")
        let variables = [
            "CERT": PoolSettingsTests.certificates.client.certificatePEM,
            "KEY": PoolSettingsTests.certificates.client.keyPEM,
            "https_proxy": "http://proxy.internal:3128", "no_proxy": "broadcast.internal",
        ]
        let configuration = try PoolSettingsTests.configuration(
            transport: "http2",
            credentials: lines + "\nbroadcastGateway: broadcast.internal",
            environment: variables
        )
        let pools = try PoolSettings.all(for: configuration)
        #expect(pools.count == 2)
        let push = try #require(pools[PoolKey(app: "a", environment: .production)])
        let broadcasts = try #require(pools[PoolKey(app: "a", environment: .production, broadcasts: true)])
        guard case .http2(let gateway) = push.transport, case .http2(let broadcast) = broadcasts.transport else {
            Issue.record("not HTTP/2 pools")
            return
        }
        #expect("\(gateway.host):\(gateway.port)" == "api.push.apple.com:443")
        #expect(gateway.proxy == APNSProxy(host: "proxy.internal", port: 3128))
        #expect("\(broadcast.host):\(broadcast.port)" == "broadcast.internal:443")
        #expect(broadcast.proxy == nil)
        #expect(broadcasts.certificate?.subject == push.certificate?.subject && push.certificate != nil)
        #expect(broadcasts.feedback == nil && broadcasts.channelManager == nil)
        #expect(
            DeliveryStage.transportLabel(PoolKey(app: "a", environment: .production, broadcasts: true), broadcasts)
                == "http2-broadcast"
        )

        // The gateway itself, spelled out: no pool of its own.
        let same = try PoolSettingsTests.configuration(
            transport: "http2",
            credentials: lines + "\nbroadcastGateway: api.push.apple.com:443",
            environment: variables
        )
        #expect(try PoolSettings.all(for: same).count == 1)

        #expect(throws: ConfigurationError.self) {
            try PoolSettingsTests.configuration(
                transport: "binary",
                credentials: Self.credentials + "\nbroadcastGateway: broadcast.internal",
                environment: variables
            )
        }
        // A parked record's key names the pool of broadcasts, and is read back as it.
        let key = ParkedRecord.key(PoolKey(app: "a.b", environment: .sandbox, broadcasts: true), partition: 7)
        #expect(String(decoding: key, as: UTF8.self) == "a.b/sandbox+broadcast/7")
        #expect(ParkedRecord.pool(key: key) == PoolKey(app: "a.b", environment: .sandbox, broadcasts: true))
        #expect(ParkedRecord.pool(key: Array("a.b/sandbox/7".utf8)) == PoolKey(app: "a.b", environment: .sandbox))
    }
}
