import APNSBinary
import APNSCore
import APNSHTTP2Core
import APNSSimulator
import Foundation

extension LocalStack {
    /// What a stack starts and the worker configuration it writes.
    public struct Options: Sendable {
        /// The app delivered over the binary protocol to the binary simulator.
        public var appName = LocalStack.app
        /// The workers' consumer group (`kafka.groupId`); `nil` leaves it out of the file.
        public var groupId: String? = "apn-local"
        /// The `apn-worker` that ``LocalStack/startWorker(id:environment:)`` runs: by default the
        /// one in the directory of the running executable.
        public var workerExecutable = LocalStack.executableBesideThisOne("apn-worker")
        /// A Redis (URL) to use instead of starting redis-server.
        public var redis: String?
        /// The redis-server to start: a path, or a name looked up on PATH.
        public var redisServer = "redis-server"
        /// Extra arguments of the one redis-server (`--appendonly yes`).
        public var redisArguments: [String] = []
        /// The one redis-server listens with TLS only and the workers connect with `rediss://`,
        /// trusting the stack's CA.
        public var redisTLS = false
        /// Instead of one redis-server: a Redis Cluster of this many primaries, made with
        /// `redis-cli --cluster create`, which the workers use with `redis.urls`.
        public var redisClusterPrimaries = 0
        /// Replicas of each primary of the cluster.
        public var redisClusterReplicas = 0
        /// Extra YAML under `redis:`.
        public var redisSettings: [String: String] = [:]
        /// Tokens the simulators reject (status 8 on the binary gateway).
        public var badTokens: Set<DeviceToken> = []
        /// What the feedback service reports.
        public var feedback: [FeedbackTuple] = []
        /// How long the binary gateway waits before it answers a rejected notification.
        public var errorDelay: Duration = .zero
        /// The binary simulator writes a line per accepted notification to
        /// `binary-record.jsonl` in the working directory.
        public var binaryRecord = false
        /// Priority lanes (`kafka.requestsTopics`), highest first: each is made beside
        /// `apn.requests` (which may be one of them), with 12 partitions. Empty: the workers read
        /// `apn.requests` alone.
        public var requestsTopics: [String] = []
        /// `kafka.parkedTopic`: made with 12 partitions, where the notifications of an app whose
        /// gateway cannot be reached move aside. `nil`: they wait in memory.
        public var parkedTopic: String?
        /// Extra librdkafka properties for the workers.
        public var kafkaProperties: [String: String] = [:]
        /// The workers' `session.timeout.ms` (heartbeats every twelfth of it); `nil` keeps the
        /// worker's defaults.
        public var sessionTimeoutMs: Int? = 6000
        /// Brokers of the embedded Kafka.
        public var brokers = 1
        /// Replicas of each partition of `apn.requests` and `apn.results` (at most ``brokers``).
        public var replicationFactor = 1
        /// Extra YAML under `worker:` (each worker's status server is on a free port unless
        /// `statusAddress` says otherwise).
        public var worker: [String: String] = [:]
        /// YAML under `limits:`.
        public var limits: [String: String] = [:]
        /// Extra YAML under the binary app.
        public var app: [String: String] = [:]
        /// Keep the working directory instead of removing it at the end.
        public var keepDirectory = false
        /// A second app, delivered over HTTP/2 to an HTTP/2 simulator.
        public var http2App: HTTP2App?
        /// With it, the binary app also configures `sandbox`, served by a binary simulator of its
        /// own that refuses these tokens with status 8 (as the production one refuses
        /// ``badTokens``).
        public var sandboxBadTokens: Set<DeviceToken>?
        /// Each worker runs in a network namespace of its own, reaching Kafka, Redis and the
        /// simulators through a forwarder per path, which ``LocalStack/cut(_:from:_:)`` cuts
        /// (docs/architecture.md, "The partition harness"). Needs root and iproute2, and the
        /// stack's own redis-server; a worker's status server is then reachable only inside its
        /// namespace.
        public var partitionable = false

        public init() {}
    }

    /// An app delivered over HTTP/2, with a provider token unless ``certificateAuthentication``.
    public struct HTTP2App: Sendable {
        /// The provider token's team and key (the simulator knows the key).
        public static let teamID = "DEMOTEAM01"
        public static let keyID = "DEMOKEY001"

        public var name: String
        /// Tokens the HTTP/2 simulator answers with 400 `BadDeviceToken`.
        public var badTokens: Set<DeviceToken>
        /// Tokens the HTTP/2 simulator answers with 410 `Unregistered`, and since when.
        public var unregistered: [DeviceToken: Date] = [:]
        /// Client certificates instead of a provider token.
        public var certificateAuthentication = false
        /// The app's one environment is `sandbox` (whose answers carry `apns-unique-id`), not
        /// `production`.
        public var sandbox = false
        /// The simulator answers every Nth request with 429 `TooManyRequests`.
        public var status429Every: Int?
        /// How long the simulator waits before it answers each request (a slow gateway).
        public var responseDelay: Duration = .zero
        /// The simulator answers its first `count` requests with `reason` (its status).
        public var answerFirst: (reason: APNSReason, count: Int)?
        /// With it, the app configures both environments: `production` served by the simulator of
        /// ``badTokens``, `sandbox` by a second one that answers these tokens with 400
        /// `BadDeviceToken` (``sandbox`` is then ignored).
        public var sandboxBadTokens: Set<DeviceToken>?
        /// Extra YAML under the app; `poolSize` is the binary app's, or 2.
        public var settings: [String: String] = [:]
        /// Broadcasts go to a simulator of their own (``LocalStack/broadcastHTTP2Simulator``),
        /// which each environment names as its `broadcastGateway`.
        public var broadcastGateway = false

        public init(name: String, badTokens: Set<DeviceToken> = []) {
            self.name = name
            self.badTokens = badTokens
        }
    }

    /// The executable `name` in the directory of the running executable (`/proc/self/exe`).
    public static func executableBesideThisOne(_ name: String) -> String {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent(name).path
    }

    /// The workers' configuration file.
    static func workerConfiguration(
        _ options: Options,
        directory: String,
        kafka: String,
        redis: RedisSetup,
        simulator: APNSSimulator,
        http2Port: Int?,
        sandbox: (binary: APNSSimulator?, http2Port: Int?) = (nil, nil),
        broadcastPort: Int? = nil
    ) -> String {
        func block(_ settings: [String: String], indent: String) -> String {
            settings.sorted { $0.key < $1.key }.map { "\(indent)\($0.key): \($0.value)\n" }.joined()
        }
        var properties: [String: String] = [:]
        if let timeout = options.sessionTimeoutMs {
            properties["session.timeout.ms"] = "\(timeout)"
            properties["heartbeat.interval.ms"] = "\(max(100, timeout / 12))"
        }
        properties.merge(options.kafkaProperties) { _, given in given }
        var text = "kafka:\n  bootstrapServers: \"\(kafka)\"\n"
        if let group = options.groupId { text += "  groupId: \(group)\n" }
        if !options.requestsTopics.isEmpty {
            text += "  requestsTopics: [\(options.requestsTopics.joined(separator: ", "))]\n"
        }
        if let parked = options.parkedTopic { text += "  parkedTopic: \(parked)\n" }
        if !properties.isEmpty {
            text += "  properties:\n" + block(properties.mapValues { "\"\($0)\"" }, indent: "    ")
        }

        text += "redis:\n"
        if redis.clusterURLs.isEmpty {
            text += "  url: \"\(redis.url)\"\n" + (redis.caFile.map { "  caFile: \"\($0)\"\n" } ?? "")
        } else {
            text += "  urls: [\(redis.clusterURLs.map { "\"\($0)\"" }.joined(separator: ", "))]\n  cluster: true\n"
        }
        text += block(options.redisSettings, indent: "  ")

        let worker = options.worker.merging(["statusAddress": "\"127.0.0.1:0\""]) { given, _ in given }
        text += "worker:\n  logFormat: json\n" + block(worker, indent: "  ")
        if !options.limits.isEmpty { text += "limits:\n" + block(options.limits, indent: "  ") }

        let certs = directory + "/certs"
        func binaryEnvironment(_ name: String, _ simulator: APNSSimulator) -> String {
            "      \(name):\n"
                + [
                    "certificate: \(certs)/client.pem", "key: \(certs)/client-key.pem", "ca: \(certs)/ca.pem",
                    "gateway: 127.0.0.1:\(simulator.binaryPort)", "feedback: 127.0.0.1:\(simulator.feedbackPort ?? 0)",
                ].map { "        \($0)\n" }.joined()
        }
        text += """
            apps:
              \(options.appName):
            \(block(options.app, indent: "    "))    environments:

            """
        text +=
            binaryEnvironment("production", simulator) + (sandbox.binary.map { binaryEnvironment("sandbox", $0) } ?? "")
        if let app = options.http2App, let http2Port {
            let settings = ["poolSize": options.app["poolSize"] ?? "2"].merging(app.settings) { _, given in given }
            let credentials =
                app.certificateAuthentication
                ? ["certificate: \(certs)/client.pem", "key: \(certs)/client-key.pem"]
                : ["signingKey: \(certs)/AuthKey.p8", "keyId: \(HTTP2App.keyID)", "teamId: \(HTTP2App.teamID)"]
            func environment(_ name: String, port: Int) -> String {
                "      \(name):\n"
                    + (credentials + [
                        "ca: \(certs)/ca.pem", "gateway: 127.0.0.1:\(port)", "channelManagement: 127.0.0.1:\(port)",
                    ] + (broadcastPort.map { ["broadcastGateway: 127.0.0.1:\($0)"] } ?? []))
                    .map { "        \($0)\n" }.joined()
            }
            text += """
                  \(app.name):
                    transport: http2
                \(block(settings, indent: "    "))    environments:

                """
            if let sandboxPort = sandbox.http2Port {
                text += environment("production", port: http2Port) + environment("sandbox", port: sandboxPort)
            } else {
                text += environment(app.sandbox ? "sandbox" : "production", port: http2Port)
            }
        }
        return text
    }
}
