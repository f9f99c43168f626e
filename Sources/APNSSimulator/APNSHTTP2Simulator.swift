import APNSCore
import APNSHTTP2Core
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// A faithful stand-in for Apple's HTTP/2 provider API (§3, §4, §6.8-§6.13) over real TLS
/// (ALPN `h2` only), with fault injection.
///
/// A connection that presents a client certificate chaining to ``Configuration/clientCAPEM``
/// is a certificate connection: its requests need no `authorization` (§3.3) and it starts at
/// ``Configuration/maxConcurrentStreams``. Any other connection uses provider tokens: it starts
/// with `SETTINGS_MAX_CONCURRENT_STREAMS` = 1 and is raised to the configured limit by a
/// SETTINGS frame once the first request's provider token has been accepted (§3.2, §6.8).
///
/// Every request is checked in this order and answered with the first failing rule's status
/// and `{"reason":"…"}` (§3.4), or 200 with an empty body and END_STREAM on HEADERS; `apns-id`
/// is echoed or generated, and the sandbox environment adds `apns-unique-id`:
///
/// | Rule | Status, reason |
/// |---|---|
/// | a header the simulator reads (`:method`, `:path`, `:scheme`, `:authority`, `authorization`, `apns-*`) appears twice | 400 `DuplicateHeaders` |
/// | `:method` is not `POST` | 405 `MethodNotAllowed` |
/// | `:path` is not `/3/device/…` | 404 `BadPath` |
/// | `:path` has no token | 400 `MissingDeviceToken` |
/// | the token is not hex (even number of digits, at most 100 bytes) | 400 `BadDeviceToken` |
/// | certificate connection: the certificate has no APNs environment extension | 403 `BadCertificate` |
/// | certificate connection: the certificate's environments exclude the simulator's | 403 `BadCertificateEnvironment` |
/// | token connection: no or empty `authorization` | 403 `MissingProviderToken` |
/// | token connection: no ``Configuration/verifier``, or the JWT is invalid (§4) or of another team than the connection's first | 403 `InvalidProviderToken` |
/// | token connection: `iat` older than one hour; with ``Configuration/expiredTokenSticks``, every later request on that connection too (§6.10) | 403 `ExpiredProviderToken` |
/// | token connection: the key is topic-specific and differs from the connection's first key | 403 `UnrelatedKeyIdInToken` |
/// | token connection: the key is not for the simulator's environment | 403 `BadEnvironmentKeyIdInToken` |
/// | token connection: the token changed less than 20 minutes after the previous change (§4) | 429 `TooManyProviderTokenUpdates` |
/// | `apns-push-type` is unknown, or `location` on a certificate connection | 400 `InvalidPushType` |
/// | token connection without `apns-topic` | 400 `MissingTopic` |
/// | the topic has whitespace or control characters, or lacks the push type's suffix | 400 `BadTopic` |
/// | ``Configuration/allowedTopics`` is set and lacks the topic | 400 `TopicDisallowed` |
/// | `apns-id` is not an 8-4-4-4-12 UUID | 400 `BadMessageId` |
/// | `apns-priority` is not 10, 5 or 1, or is 10 with push type `background`, or 1 with `liveactivity` | 400 `BadPriority` |
/// | `apns-expiration` is not a non-negative integer | 400 `BadExpirationDate` |
/// | `apns-collapse-id` is empty, over 64 bytes or has control characters | 400 `BadCollapseId` |
/// | the body is empty | 400 `PayloadEmpty` |
/// | the body is over 4096 bytes (5120 for `voip`) | 413 `PayloadTooLarge` |
/// | the token is in ``Configuration/badTokens`` | 400 `BadDeviceToken` |
/// | the token is in ``Configuration/unregistered`` | 410 `Unregistered` with `"timestamp"` in ms |
/// | every Nth request that passed all rules, over all connections (``Configuration/status429Every``) | 429 `TooManyRequests` |
/// | the first N requests that passed all rules, over all connections (``Configuration/answerFirst``) | its status and reason |
///
/// An idle connection (``Configuration/idleTimeout``) gets a GOAWAY whose debug data is
/// `{"reason":"IdleTimeout"}` and is closed. ``Configuration/goAwayEvery`` and
/// ``sendGoAwayToAll(debugData:)`` send GOAWAY too (see below).
///
/// Never produced: `DeviceTokenNotForTopic`, `Forbidden`, `ExpiredToken`, `InternalServerError`,
/// `ServiceUnavailable` and `Shutdown` as a response reason (`Shutdown` appears as GOAWAY
/// debug data), except through ``Configuration/answerFirst``. The body is not parsed as JSON: APNs documents no reason for a
/// malformed payload.
///
/// Stream limits: with ``Configuration/dropStreamsToOneAfterError`` the limit drops to 1
/// after any error answer except 410 and is restored after the connection's next 200 (§6.8).
/// A request that arrives while the connection already has its acknowledged limit of open
/// streams is a connection error in NIOHTTP2: the connection gets GOAWAY (`PROTOCOL_ERROR`)
/// and is closed, which is close to what clients observed from APNs (§6.8: GOAWAY with
/// `REFUSED_STREAM`); it is counted in ``Statistics/streamLimitViolations``.
///
/// GOAWAY (``Configuration/goAwayEvery``, ``sendGoAwayToAll(debugData:)``): error `NO_ERROR`,
/// last-stream-ID the highest stream whose HEADERS arrived; those streams are answered, streams
/// above it are refused with `RST_STREAM(REFUSED_STREAM)` and never recorded (RFC 9113 §6.8,
/// §3.5), and the connection closes once every answered stream is done. The debug data cycles
/// through JSON `{"reason":"Shutdown"}`, plain text and empty (§6.9).
///
/// Channel management and broadcasts (§7) share the listener; their rules are on
/// ``channels(bundleID:)``'s extension (`HTTP2SimulatorChannels.swift`).
///
/// Performance: frames of all streams arrive on the connection channel (no child channel per
/// stream); answers are flushed once per read burst, and accepted requests are recorded under
/// one lock per burst.
public final class APNSHTTP2Simulator: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// 0 picks a free port.
        public var port = 0
        public var certificateChainPEM: String
        public var privateKeyPEM: String
        /// When set, a client certificate is requested but optional: a connection presenting one
        /// (which must chain to this CA) is a certificate connection, any other a token connection.
        public var clientCAPEM: String?
        /// The environment the simulator plays: checked against client certificates, and the
        /// sandbox adds `apns-unique-id` to responses (§3.4).
        public var environment: APNSEnvironment = .production
        /// The keys for token authentication; `nil` refuses every token (`InvalidProviderToken`).
        public var verifier: APNSJWTVerifier?
        /// Tokens answered with 400 `BadDeviceToken`.
        public var badTokens: Set<DeviceToken> = []
        /// Tokens answered with 410 `Unregistered` and this `timestamp` (§3.4).
        public var unregistered: [DeviceToken: Date] = [:]
        /// `nil` allows any topic; otherwise other topics get 400 `TopicDisallowed`.
        public var allowedTopics: Set<String>?
        /// `SETTINGS_MAX_CONCURRENT_STREAMS` of certificate connections and of token connections
        /// once authenticated (§3.2; APNs has advertised 500, 1000 and 1500, §6.8).
        public var maxConcurrentStreams = 1000
        /// After an error answer other than 410, drop the limit to 1 until the next 200 (§6.8).
        public var dropStreamsToOneAfterError = false
        /// After every N accepted requests on a connection, GOAWAY and close (§3.5, §6.9).
        public var goAwayEvery: Int?
        /// Every Nth request that passed validation, over all connections: 429 `TooManyRequests`.
        public var status429Every: Int?
        /// The first `count` requests that passed validation, over all connections, are answered
        /// with `reason` and its documented status (`IdleTimeout`, `Shutdown`, …).
        public var answerFirst: (reason: APNSReason, count: Int)?
        /// Delay before each answer (scheduled on the event loop).
        public var responseDelay: Duration = .zero
        /// While set and closed, answers are held (streams stay open) until ``AnswerGate/open()``;
        /// a test that must see requests in flight waits on the client, not on a clock.
        public var answerGate: AnswerGate?
        /// A connection without reads for this long gets GOAWAY `{"reason":"IdleTimeout"}` and
        /// is closed (§6.11).
        public var idleTimeout: Duration?
        /// After `ExpiredProviderToken` a connection keeps answering it (§6.10).
        public var expiredTokenSticks = true
        /// Write one JSON line per accepted request (with `"api":"http2"`) to this file, which
        /// is emptied at start and appended to, so the binary simulator may share it.
        public var recordPath: String?
        /// How many accepted requests ``accepted`` keeps, and how many entries
        /// ``channelOperations`` and ``broadcasts`` keep (the counts cover all of them).
        public var acceptedListLimit = 1_000_000
        /// Channels per app and environment; one more is 400 `CannotCreateChannelConfig` (§7.1).
        public var maxChannelsPerApp = 10_000
        /// The clock for provider-token checks (§4).
        public var now: @Sendable () -> Date = { Date() }
        /// The HTTP/2 frame layer the endpoint runs on.
        public var framing: Framing = .native

        /// The HTTP/2 frame layer under the simulator's request handling.
        public enum Framing: String, Sendable, CaseIterable {
            /// The project's frame layer in its server role (the client runs on its client
            /// role): a fraction of the CPU per request, for benchmarks and everyday tests.
            case native
            /// swift-nio-http2's `NIOHTTP2Handler`: an HTTP/2 implementation the project did
            /// not write, with its general stream state machines, so a client is also checked
            /// by an independent server.
            case nioHTTP2 = "nio-http2"
        }

        public init(certificateChainPEM: String, privateKeyPEM: String, clientCAPEM: String?) {
            self.certificateChainPEM = certificateChainPEM
            self.privateKeyPEM = privateKeyPEM
            self.clientCAPEM = clientCAPEM
        }
    }

    /// How an accepted request was authenticated.
    public enum Authorization: Sendable, Hashable {
        /// A client certificate (§3.2).
        case certificate
        /// A provider token (§4).
        case token(teamID: String, keyID: String)
    }

    /// One accepted (200) request.
    public struct Accepted: Sendable, Hashable {
        public var connection: Int
        public var streamID: Int
        public var token: DeviceToken
        /// `apns-id` as answered: echoed or generated.
        public var apnsID: String
        public var topic: String?
        public var pushType: String?
        public var priority: Int?
        /// `apns-expiration` as sent (UNIX seconds; 0: do not store), `nil` when absent.
        public var expiration: Int? = nil
        public var payloadLength: Int
        public var authorization: Authorization
    }

    /// Counters since start.
    public struct Statistics: Sendable, Hashable {
        public var connections = 0
        /// Requests answered (accepted + rejected).
        public var requests = 0
        public var accepted = 0
        public var rejected = 0
        public var rejectionsByReason: [String: Int] = [:]
        public var goAways = 0
        public var tooManyRequests = 0
        /// The most streams open at once on any connection.
        public var maxConcurrentStreamsSeen = 0
        /// Requests that arrived while their connection already had its acknowledged limit of
        /// open streams (each closes its connection).
        public var streamLimitViolations = 0
        /// SETTINGS frames sent after the connection preface (limit raised, dropped, restored or changed).
        public var settingsChanges = 0
        /// Successful channel-management requests (§7.2).
        public var channelOperations = 0
        /// Accepted broadcasts (§7.3).
        public var broadcasts = 0
        /// Channels that exist now, over all apps.
        public var channels = 0
    }

    struct State {
        var acceptedByToken: [DeviceToken: Int] = [:]
        var accepted: [Accepted] = []
        var statistics = Statistics()
        var lists: Lists
        var maxConcurrentStreams: Int
        var nextConnection = 1
        var recordBuffer: [UInt8] = []
        var connections: [Int: Connection] = [:]
        var channels = HTTP2SimulatorChannelStore()
        var channelOperations: [ChannelOperation] = []
        var broadcasts: [Broadcast] = []
    }

    /// An open connection: its channel, and its handler for calls on its event loop.
    struct Connection: Sendable {
        var channel: any Channel
        var handler: NIOLoopBound<HTTP2SimulatorConnectionHandler>
    }

    /// The token lists, handed to connections as one value.
    struct Lists: Sendable {
        var badTokens: Set<DeviceToken>
        /// Each token's 410 timestamp, as the JSON number written.
        var unregistered: [DeviceToken: String]
    }

    /// Counters a connection gathers during one read burst.
    struct Delta {
        var requests = 0
        var rejected = 0
        var rejectionsByReason: [String: Int] = [:]
        var goAways = 0
        var tooManyRequests = 0
        var maxOpenStreams = 0
        var streamLimitViolations = 0
        var settingsChanges = 0

        var isEmpty: Bool {
            requests == 0 && goAways == 0 && maxOpenStreams == 0 && streamLimitViolations == 0 && settingsChanges == 0
        }
    }

    public let configuration: Configuration
    public let port: Int
    let state: Mutex<State>
    /// Requests that passed validation, over all connections (`status429Every`).
    let validRequests = Atomic<Int>(0)
    /// Requests answered by ``Configuration/answerFirst`` so far.
    let answeredFirst = Atomic<Int>(0)
    /// Bumped whenever the token lists change, so connections reload them.
    let listsVersion = Atomic<Int>(0)
    /// GOAWAYs sent with rotating debug data (§6.9).
    let goAwayRotation = Atomic<Int>(0)
    /// The server side of TLS, whose trusted client CA ``trustClients(caPEM:)`` changes.
    let tls: SimulatorTLS
    /// The provider-token keys in force: ``Configuration/verifier`` until
    /// ``acceptProviderTokens(_:)`` replaces them; `version` counts the replacements, so that a
    /// connection verifies again a token it admitted under other keys.
    let tokenKeys: Mutex<(verifier: APNSJWTVerifier?, version: Int)>
    private let channel: ServerChannelBox
    private let recordFile: FileHandle?
    let logger: Logger

    private init(
        configuration: Configuration,
        port: Int,
        tls: SimulatorTLS,
        channel: ServerChannelBox,
        recordFile: FileHandle?,
        logger: Logger
    ) {
        self.configuration = configuration
        self.port = port
        self.tls = tls
        self.tokenKeys = Mutex((configuration.verifier, 0))
        self.channel = channel
        self.recordFile = recordFile
        self.logger = logger
        self.state = Mutex(
            State(
                lists: Lists(
                    badTokens: configuration.badTokens,
                    unregistered: configuration.unregistered.mapValues(Self.milliseconds)
                ),
                maxConcurrentStreams: configuration.maxConcurrentStreams
            )
        )
    }

    /// Starts the server and returns once it listens.
    public static func start(
        configuration: Configuration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns.simulator.http2")
    ) async throws -> APNSHTTP2Simulator {
        guard configuration.maxConcurrentStreams >= 1 else {
            throw APNSError(
                .invalidConfiguration,
                "maxConcurrentStreams must be at least 1, not \(configuration.maxConcurrentStreams)"
            )
        }
        if let n = configuration.goAwayEvery, n < 1 {
            throw APNSError(.invalidConfiguration, "goAwayEvery must be at least 1, not \(n)")
        }
        guard configuration.maxChannelsPerApp >= 0 else {
            throw APNSError(
                .invalidConfiguration,
                "maxChannelsPerApp must be zero or more, not \(configuration.maxChannelsPerApp)"
            )
        }
        if let n = configuration.status429Every, n < 1 {
            throw APNSError(.invalidConfiguration, "status429Every must be at least 1, not \(n)")
        }
        // §3.1: HTTP/2 over TLS 1.2 or later, negotiated with ALPN. A client certificate is
        // asked for but optional: connections without one use tokens.
        let tls = try SimulatorTLS(
            certificateChainPEM: configuration.certificateChainPEM,
            privateKeyPEM: configuration.privateKeyPEM,
            clientCAPEM: configuration.clientCAPEM,
            clientVerification: .optionalVerification,
            minimumTLSVersion: .tlsv12,
            applicationProtocols: ["h2"]
        )
        let recordFile = try configuration.recordPath.map(RecordFile.open)

        // The handlers need the simulator, which needs the bound port: bind with a box that is
        // filled in right after.
        let box = SimulatorBox<APNSHTTP2Simulator>()
        let server = try await ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let simulator = try box.started()
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLServerHandler(context: simulator.tls.context))
                    try sync.addHandler(HTTP2SimulatorSetupHandler(simulator: simulator))
                }
            }
            .bind(host: configuration.host, port: configuration.port)
            .get()
        let simulator = APNSHTTP2Simulator(
            configuration: configuration,
            port: server.localAddress!.port!,
            tls: tls,
            channel: ServerChannelBox(channel: server),
            recordFile: recordFile,
            logger: logger
        )
        box.simulator = simulator
        return simulator
    }

    /// Stops listening, closes every connection and flushes the record file.
    public func stop() async {
        try? await channel.channel.close()
        let open = state.withLock { Array($0.connections.values) }
        for connection in open {
            try? await connection.channel.close()
        }
        flushRecord()
        RecordFile.close(recordFile, logger: logger)
    }

    /// How often each token was accepted.
    public var acceptedByToken: [DeviceToken: Int] {
        state.withLock { $0.acceptedByToken }
    }

    /// The accepted requests in the order they were recorded (at most
    /// ``Configuration/acceptedListLimit``).
    public var accepted: [Accepted] {
        state.withLock { $0.accepted }
    }

    /// Connections open now.
    public var openConnections: Int {
        state.withLock { $0.connections.count }
    }

    public var statistics: Statistics {
        state.withLock { $0.statistics }
    }

    /// Replaces the tokens answered with 400 `BadDeviceToken`; open connections pick the list
    /// up with their next request.
    public func setBadTokens(_ tokens: Set<DeviceToken>) {
        state.withLock { $0.lists.badTokens = tokens }
        listsVersion.add(1, ordering: .releasing)
    }

    /// Replaces the tokens answered with 410 `Unregistered` and their timestamps.
    public func setUnregistered(_ tokens: [DeviceToken: Date]) {
        let converted = tokens.mapValues(Self.milliseconds)
        state.withLock { $0.lists.unregistered = converted }
        listsVersion.add(1, ordering: .releasing)
    }

    /// Changes the stream limit and announces it with a SETTINGS frame on every open connection
    /// that is authenticated and not held at 1 after an error (§3.2, §6.8); the others take it
    /// when they get there.
    public func setMaxConcurrentStreams(_ n: Int) {
        let limit = max(1, n)
        let open = state.withLock { s in
            s.maxConcurrentStreams = limit
            return Array(s.connections.values)
        }
        for connection in open {
            let handler = connection.handler
            handler.eventLoop.execute { handler.value.changeLimit(to: limit) }
        }
    }

    /// Sends GOAWAY on every open connection: last-stream-ID is the highest stream received,
    /// those streams are still answered, then the connection closes (§3.5).
    public func sendGoAwayToAll(debugData: APNSGoAwayDebugData = .reason(.shutdown)) {
        let open = state.withLock { Array($0.connections.values) }
        for connection in open {
            let handler = connection.handler
            handler.eventLoop.execute { handler.value.goAway(debugData: debugData) }
        }
    }

    /// Writes buffered record lines to the record file.
    public func flushRecord() {
        guard let recordFile else { return }
        let bytes = state.withLock { s -> [UInt8] in
            defer { s.recordBuffer.removeAll(keepingCapacity: true) }
            return s.recordBuffer
        }
        if !bytes.isEmpty { recordFile.write(Data(bytes)) }
    }

    // MARK: Connection support

    func register(_ connection: Connection) -> (connection: Int, limit: Int, lists: Lists) {
        state.withLock { s in
            s.statistics.connections += 1
            let id = s.nextConnection
            s.nextConnection += 1
            s.connections[id] = connection
            return (id, s.maxConcurrentStreams, s.lists)
        }
    }

    func unregister(_ connection: Int) {
        _ = state.withLock { $0.connections.removeValue(forKey: connection) }
    }

    func currentLists() -> Lists {
        state.withLock { $0.lists }
    }

    /// Merges one read burst of a connection: counters and accepted requests, under one lock.
    func record(_ accepted: [Accepted], _ delta: Delta) {
        let recording = recordFile != nil
        let limit = configuration.acceptedListLimit
        let shouldFlush = state.withLock { s -> Bool in
            s.statistics.requests += delta.requests
            s.statistics.accepted += accepted.count
            s.statistics.rejected += delta.rejected
            for (reason, count) in delta.rejectionsByReason {
                s.statistics.rejectionsByReason[reason, default: 0] += count
            }
            s.statistics.goAways += delta.goAways
            s.statistics.tooManyRequests += delta.tooManyRequests
            s.statistics.streamLimitViolations += delta.streamLimitViolations
            s.statistics.settingsChanges += delta.settingsChanges
            if delta.maxOpenStreams > s.statistics.maxConcurrentStreamsSeen {
                s.statistics.maxConcurrentStreamsSeen = delta.maxOpenStreams
            }
            for a in accepted {
                s.acceptedByToken[a.token, default: 0] += 1
            }
            let room = limit - s.accepted.count
            if room > 0 {
                s.accepted += room >= accepted.count ? accepted[...] : accepted.prefix(room)
            }
            if recording {
                for a in accepted { Self.appendRecordLine(a, to: &s.recordBuffer) }
            }
            return recording && s.recordBuffer.count >= 1 << 16
        }
        if shouldFlush { flushRecord() }
    }

    /// A JSON string literal for a record line; `null` for `nil`.
    static func jsonString(_ value: String?) -> String {
        value.map { String(decoding: JSONValue.string($0).serialized(), as: UTF8.self) } ?? "null"
    }

    /// A record line's `authorization` value.
    static func recordAuthorization(_ authorization: Authorization) -> String {
        switch authorization {
        case .certificate: "\"certificate\""
        case .token(let team, let key): "{\"team\":\(jsonString(team)),\"kid\":\(jsonString(key))}"
        }
    }

    private static func appendRecordLine(_ a: Accepted, to buffer: inout [UInt8]) {
        let string = jsonString
        let authorization = recordAuthorization(a.authorization)
        let line =
            "{\"api\":\"http2\",\"connection\":\(a.connection),\"streamID\":\(a.streamID),\"token\":\"\(a.token.hex)\",\"apnsID\":\(string(a.apnsID)),\"topic\":\(string(a.topic)),\"pushType\":\(string(a.pushType)),\"priority\":\(a.priority.map(String.init) ?? "null"),\"payloadLength\":\(a.payloadLength),\"authorization\":\(authorization)}\n"
        buffer += line.utf8
    }

    /// §3.4: the 410 timestamp is in milliseconds since the epoch.
    /// A date as the milliseconds a 410 carries: whole, or, for a date beyond 64 bits of them (a
    /// fault to inject), the number as JSON writes a double (`1e+19`).
    static func milliseconds(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
        if let whole = Int64(exactly: milliseconds) { return String(whole) }
        return String(decoding: JSONValue.double(milliseconds).serialized(), as: UTF8.self)
    }
}

/// The listening channel.
private struct ServerChannelBox: Sendable {
    let channel: any Channel
}

extension APNSHTTP2Simulator {
    /// A verifier for one team's keys (§4), from PEM texts by key ID. Each text is the `.p8`
    /// private key (`BEGIN PRIVATE KEY`) or the P-256 public key (`BEGIN PUBLIC KEY`). Throws
    /// `invalidCredentials` naming the problem: a team or key ID that is not 10 letters or
    /// digits, or a text that is not a P-256 key.
    public static func verifier(teamID: String, keys: [String: String]) throws(APNSError) -> APNSJWTVerifier {
        try validateIdentifier(teamID, what: "team ID")
        var publicKeys: [String: P256.Signing.PublicKey] = [:]
        for (keyID, pem) in keys {
            try validateIdentifier(keyID, what: "key ID")
            if pem.contains("PRIVATE KEY") {
                publicKeys[keyID] = try APNSSigningKey(keyID: keyID, pem: pem).publicKey
            } else {
                do {
                    publicKeys[keyID] = try P256.Signing.PublicKey(pemRepresentation: pem)
                } catch {
                    throw APNSError(
                        .invalidCredentials,
                        "the key for \(keyID) is neither a .p8 private key nor a P-256 public key in PEM form",
                        underlying: error
                    )
                }
            }
        }
        return APNSJWTVerifier(teamID: teamID, keys: publicKeys)
    }

    /// §4: team and key IDs are 10 letters or digits.
    private static func validateIdentifier(_ value: String, what: String) throws(APNSError) {
        let valid =
            value.utf8.count == 10
            && value.utf8.allSatisfy { byte in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            }
        guard valid else {
            throw APNSError(
                .invalidCredentials,
                "the \(what) \"\(value.prefix(20))\" is not valid; it must be 10 letters and digits, such as ABCDE12345"
            )
        }
    }
}

/// Holds the HTTP/2 simulator's answers until it is opened (``APNSHTTP2Simulator/Configuration/answerGate``).
public final class AnswerGate: Sendable {
    private let state = Mutex<(isOpen: Bool, waiting: [@Sendable () -> Void])>((false, []))

    public init() {}

    /// Lets every held answer go, and every later one at once.
    public func open() {
        let waiting = state.withLock { state in
            state.isOpen = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for action in waiting { action() }
    }

    /// Runs `action` once the gate is open (at once if it is).
    func whenOpen(_ action: @escaping @Sendable () -> Void) {
        let now = state.withLock { state in
            if state.isOpen { return true }
            state.waiting.append(action)
            return false
        }
        if now { action() }
    }
}
