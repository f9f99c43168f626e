import APNSCore
import Foundation
import PushConfiguration
import Testing

/// `proxy` in `worker` and in an app environment, the `https_proxy` / `no_proxy` variables
/// beneath them, and the sentence of a URL that is not a proxy's.
@Suite struct ProxyConfigurationTests {
    typealias Files = AppSettingsTests.Files

    /// App `a` with a production and a sandbox environment; `workerProxy` under `worker`,
    /// `productionProxy` under production.
    static func yaml(workerProxy: String? = nil, productionProxy: String? = nil, files: Files) -> String {
        let credentials = "certificate: \(files.path("cert.pem"))\n        key: \(files.path("key.pem"))"
        return """
            worker:
              id: w
            \(workerProxy.map { "  proxy: \($0)" } ?? "")
            kafka:
              bootstrapServers: "127.0.0.1:9092"
            redis:
              url: "redis://127.0.0.1:6379/0"
            apps:
              a:
                environments:
                  production:
                    \(credentials)
            \(productionProxy.map { "        proxy: \($0)" } ?? "")
                  sandbox:
                    \(credentials)

            """
    }

    static func parse(_ text: String, environment: [String: String] = [:]) throws -> WorkerConfiguration {
        try AppSettingsTests.parse(text, environment: environment)
    }

    static func route(
        _ configuration: WorkerConfiguration,
        _ environment: APNSEnvironment
    ) -> WorkerConfiguration.ProxyRoute? {
        configuration.apps["a"]?.environments[environment]?.proxy
    }

    @Test("worker.proxy serves every environment; an environment's own proxy wins; none means directly")
    func settings() throws {
        let files = try Files()
        let variables = ["HTTPS_PROXY": "http://env-proxy:3128"]

        let worker = try Self.parse(
            Self.yaml(workerProxy: "\"http://alice:s%40cret@proxy.internal:3128\"", files: files),
            environment: variables
        )
        for environment in [APNSEnvironment.production, .sandbox] {
            let route = try #require(Self.route(worker, environment))
            #expect(route.source == "worker.proxy")
            #expect(
                route.proxy == APNSProxy(host: "proxy.internal", port: 3128, username: "alice", password: "s@cret")
            )
            #expect(route.proxy(for: "gateway.push.apple.com") == route.proxy)
        }

        let own = try Self.parse(
            Self.yaml(
                workerProxy: "http://proxy.internal:3128",
                productionProxy: "http://eu-proxy.internal:8080",
                files: files
            )
        )
        #expect(Self.route(own, .production)?.proxy == APNSProxy(host: "eu-proxy.internal", port: 8080))
        #expect(Self.route(own, .production)?.source == "apps.a.environments.production.proxy")
        #expect(Self.route(own, .sandbox)?.proxy == APNSProxy(host: "proxy.internal", port: 3128))

        // none: directly, whatever the variables say.
        let direct = try Self.parse(
            Self.yaml(workerProxy: "http://proxy.internal:3128", productionProxy: "none", files: files),
            environment: variables
        )
        #expect(Self.route(direct, .production) == nil)
        #expect(Self.route(direct, .sandbox)?.source == "worker.proxy")
        let noneAtAll = try Self.parse(Self.yaml(workerProxy: "none", files: files), environment: variables)
        #expect(Self.route(noneAtAll, .production) == nil && Self.route(noneAtAll, .sandbox) == nil)

        // Without any: directly.
        let plain = try Self.parse(Self.yaml(files: files))
        #expect(Self.route(plain, .production) == nil)
    }

    @Test("https_proxy and HTTPS_PROXY when no setting names a proxy; no_proxy as curl matches it")
    func variables() throws {
        let files = try Files()
        let text = Self.yaml(files: files)

        let upper = try Self.parse(text, environment: ["HTTPS_PROXY": "proxy.internal:3128"])
        #expect(Self.route(upper, .production)?.proxy == APNSProxy(host: "proxy.internal", port: 3128))
        #expect(Self.route(upper, .production)?.source == "HTTPS_PROXY")

        // curl reads the lowercase variable first; an empty one counts as unset.
        let both = try Self.parse(
            text,
            environment: ["https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"]
        )
        #expect(Self.route(both, .production)?.proxy.host == "lower")
        let emptyLower = try Self.parse(text, environment: ["https_proxy": " ", "HTTPS_PROXY": "http://upper:2"])
        #expect(Self.route(emptyLower, .production)?.proxy.host == "upper")
        // A proxy URL without a port: curl's 1080.
        let noPort = try Self.parse(text, environment: ["https_proxy": "http://proxy.internal"])
        #expect(Self.route(noPort, .production)?.proxy.port == 1080)

        let bypassed = try Self.parse(
            text,
            environment: ["HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "localhost, .apple.com,10.0.0.7"]
        )
        let route = try #require(Self.route(bypassed, .production))
        #expect(route.proxy(for: "api.push.apple.com") == nil)
        #expect(route.proxy(for: "apple.com") == nil)
        #expect(route.proxy(for: "API.PUSH.APPLE.COM.") == nil)
        #expect(route.proxy(for: "notapple.com") != nil)
        #expect(route.proxy(for: "10.0.0.7") == nil)
        #expect(route.proxy(for: "10.0.0.70") != nil)
        #expect(route.proxy(for: "localhost") == nil)

        let all = try Self.parse(text, environment: ["HTTPS_PROXY": "http://proxy:3128", "no_proxy": "*"])
        #expect(Self.route(all, .production)?.proxy(for: "api.push.apple.com") == nil)

        // no_proxy only qualifies the variables: a proxy the file names is used for every host.
        let named = try Self.parse(
            Self.yaml(workerProxy: "http://proxy:3128", files: files),
            environment: ["NO_PROXY": "*"]
        )
        #expect(Self.route(named, .production)?.proxy(for: "api.push.apple.com") != nil)
    }

    @Test("A URL that is not a proxy's: one sentence naming the setting, the password masked")
    func invalid() throws {
        let files = try Files()
        func error(_ text: String, _ environment: [String: String] = [:]) -> String? {
            AppSettingsTests.error(text, environment: environment)
        }
        #expect(
            error(Self.yaml(workerProxy: "\"http://alice:s3cret@proxy:port\"", files: files))
                == "worker.proxy: \"http://alice:***@proxy:port\" is not a proxy URL of the form "
                + "http://[user:password@]host:port: the port must be a number from 1 to 65535; write none to connect "
                + "directly."
        )
        #expect(
            error(Self.yaml(productionProxy: "\"https://proxy:443\"", files: files))
                == "apps.a.environments.production.proxy: \"https://proxy:443\" is not a proxy URL of the form "
                + "http://[user:password@]host:port: a TLS connection to the proxy itself (https://) is not supported; "
                + "use http://; write none to connect directly."
        )
        #expect(
            error(Self.yaml(files: files), ["HTTPS_PROXY": "socks5://bob:pw@proxy:1080"])
                == "HTTPS_PROXY: \"socks5://bob:***@proxy:1080\" is not a proxy URL of the form "
                + "http://[user:password@]host:port: the scheme must be http, not socks5; write none to connect directly."
        )
        #expect(
            error(Self.yaml(workerProxy: "[a, b]", files: files))
                == "worker.proxy must be a proxy URL (http://[user:password@]host:port) or none, not a list."
        )
    }

    @Test("The printed configuration shows where the proxy came from, never its password")
    func printed() throws {
        let files = try Files()
        let configuration = try Self.parse(
            Self.yaml(workerProxy: "\"http://alice:s3cret@proxy.internal:3128\"", files: files)
        )
        var dumped = ""
        dump(configuration, to: &dumped)
        #expect("\(configuration)".contains("http://alice:***@proxy.internal:3128 (worker.proxy)"))
        for text in [String(describing: configuration), String(reflecting: configuration), dumped] {
            #expect(!text.contains("s3cret"))
        }
    }
}
