import APNSCore
import APNSHTTP2Core
import Foundation
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL

/// How a broadcast channel keeps updates for devices that are offline
/// (`docs/apns-protocol.md` §7.2, `message-storage-policy`).
public enum APNSChannelStoragePolicy: Int, Sendable, Hashable, CaseIterable {
    /// *No Message Stored*: a device that is offline misses the update; broadcasts to the
    /// channel must have `apns-expiration` 0 (§7.3).
    case none = 0
    /// *Most Recent Message Stored*: APNs keeps the latest broadcast for a device that comes
    /// online.
    case mostRecent = 1

    /// The name used on the command line and in jobs: `none` or `most-recent`.
    public var name: String {
        switch self {
        case .none: "none"
        case .mostRecent: "most-recent"
        }
    }

    public init?(name: String) {
        guard let policy = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = policy
    }
}

/// Apple's answer to a channel management request that failed: its status and reason
/// (`docs/apns-protocol.md` §7.4).
public struct APNSChannelError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The HTTP status; 0 when no answer came (the connection failed).
    public var status: Int
    /// Apple's reason, or what went wrong on the way.
    public var reason: String
    /// The `apns-request-id` of the answer.
    public var requestID: String?

    public init(status: Int, reason: String, requestID: String? = nil) {
        self.status = status
        self.reason = reason
        self.requestID = requestID
    }

    public var description: String {
        switch (status, reason) {
        case (_, "CannotCreateChannelConfig"):
            "APNs refused to create the channel (400 CannotCreateChannelConfig): the app may have reached Apple's limit of 10,000 channels per environment; delete channels it no longer uses"
        case (0, _): reason
        default: "APNs answered \(status) \(reason)"
        }
    }
}

/// Apple's broadcast channel management API (`docs/apns-protocol.md` §7.1, §7.2): creates,
/// reads, lists and deletes the channels of one app in one environment, with the app's
/// certificate or provider token. Its requests share one HTTP/2 connection, opened with the first
/// and opened again when it has closed (Apple asks providers to keep their connections open);
/// copies of a manager share it too. Each request carries an `apns-request-id` of its own.
///
/// The configuration's `host` and `port` are the management endpoint
/// (`api-manage-broadcast.push.apple.com:2196` in production), its `topic` the app's bundle ID.
public struct APNSChannelManager: Sendable {
    public var configuration: APNSHTTP2Configuration
    /// The environment whose channels these are (channels of one are unknown in the other).
    public var environment: APNSEnvironment
    /// How long one request may take, connection included.
    public var timeout: Duration = .seconds(15)
    /// The connection the requests share.
    private let connection = ManagementConnection()

    public init(configuration: APNSHTTP2Configuration, environment: APNSEnvironment) {
        self.configuration = configuration
        self.environment = environment
    }

    /// Closes the shared connection (the next request opens another).
    public func close() async { await connection.close() }

    /// Creates a channel; returns its id (`apns-channel-id`).
    public func create(storagePolicy: APNSChannelStoragePolicy) async throws(APNSChannelError) -> String {
        let body = #"{"message-storage-policy":\#(storagePolicy.rawValue),"push-type":"LiveActivity"}"#
        let answer = try await request("POST", "/1/apps/\(configuration.topic)/channels", body: Array(body.utf8))
        guard answer.status == 201, let id = answer.header("apns-channel-id"), !id.isEmpty else {
            throw answer.error(expected: 201)
        }
        return id
    }

    /// The storage policy of a channel.
    public func read(channelID: String) async throws(APNSChannelError) -> APNSChannelStoragePolicy {
        let answer = try await request(
            "GET",
            "/1/apps/\(configuration.topic)/channels",
            headers: [("apns-channel-id", channelID)]
        )
        guard answer.status == 200 else { throw answer.error(expected: 200) }
        guard let value = (try? JSONValue.parse(answer.body))?["message-storage-policy"]?.intValue,
            let policy = APNSChannelStoragePolicy(rawValue: Int(value))
        else {
            throw APNSChannelError(status: 200, reason: "the answer has no message-storage-policy APNs documents")
        }
        return policy
    }

    /// Every channel id of the app in this environment.
    public func list() async throws(APNSChannelError) -> [String] {
        let answer = try await request("GET", "/1/apps/\(configuration.topic)/all-channels")
        guard answer.status == 200 else { throw answer.error(expected: 200) }
        guard let channels = (try? JSONValue.parse(answer.body))?["channels"]?.arrayValue else {
            throw APNSChannelError(status: 200, reason: "the answer has no channels list")
        }
        return channels.compactMap(\.stringValue)
    }

    /// Deletes a channel.
    public func delete(channelID: String) async throws(APNSChannelError) {
        let answer = try await request(
            "DELETE",
            "/1/apps/\(configuration.topic)/channels",
            headers: [("apns-channel-id", channelID)]
        )
        guard answer.status == 204 || answer.status == 200 else { throw answer.error(expected: 204) }
    }

    // MARK: One request

    struct Answer: Sendable {
        var status: Int
        var headers: [(String, String)]
        var body: [UInt8]

        func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }

        func error(expected: Int) -> APNSChannelError {
            let reason = (try? JSONValue.parse(body))?["reason"]?.stringValue ?? "no reason (expected \(expected))"
            return APNSChannelError(status: status, reason: reason, requestID: header("apns-request-id"))
        }
    }

    func request(
        _ method: String,
        _ path: String,
        headers extra: [(String, String)] = [],
        body: [UInt8]? = nil
    ) async throws(APNSChannelError) -> Answer {
        var headers: [(String, String)] = [
            (":method", method), (":scheme", "https"), (":path", path),
            (":authority", configuration.host),
        ]
        headers += extra
        headers.append(("apns-request-id", UUID().uuidString.lowercased()))
        if case .token(let provider) = configuration.authentication {
            do {
                headers.append(("authorization", "bearer \(try provider.currentToken().jwt)"))
            } catch {
                throw APNSChannelError(status: 0, reason: "cannot sign a provider token: \(error.message)")
            }
        }
        if body != nil { headers.append(("content-type", "application/json")) }
        let requestHeaders = HPACKHeaders(headers)
        do {
            return try await withThrowingTaskGroup(of: Answer?.self) { group in
                group.addTask { try await self.exchange(requestHeaders, body: body) }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let answer = first else {
                    throw APNSChannelError(
                        status: 0,
                        reason:
                            "no answer from \(configuration.host):\(configuration.port) within \(timeout); check the channel management endpoint"
                    )
                }
                return answer
            }
        } catch let error as APNSChannelError {
            throw error
        } catch {
            throw APNSChannelError(
                status: 0,
                reason: "cannot reach \(configuration.host):\(configuration.port): \(error)"
            )
        }
    }

    private func exchange(_ headers: HPACKHeaders, body: [UInt8]?) async throws -> Answer {
        let streams = try await connection.streams { [configuration, timeout] in
            let context = try NIOSSLContext(configuration: configuration.tlsConfiguration())
            var settings = configuration
            settings.connectTimeout = timeout
            let gateway = settings.gateway(sslContext: context, group: MultiThreadedEventLoopGroup.singleton)
            return try await gateway.connect { channel in
                let sync = channel.pipeline.syncOperations
                // The delivery pools' frame layer: preface, SETTINGS, HPACK, flow control.
                try sync.addHandler(HTTP2FrameCodec())
                let retired = ManagementStreamsRetired()
                let streams = ManagementStreams(retired: retired)
                try sync.addHandler(streams)
                return ManagementConnection.Open(
                    channel: channel,
                    streams: NIOLoopBound(streams, eventLoop: channel.eventLoop),
                    retired: retired
                )
            }.get()
        }
        let eventLoop = streams.channel.eventLoop
        let promise = eventLoop.makePromise(of: Answer.self)
        let handler = streams.streams
        return try await withTaskCancellationHandler {
            eventLoop.execute { handler.value.send(headers, body: body, promise: promise) }
            return try await promise.futureResult.get()
        } onCancel: {
            eventLoop.execute { handler.value.cancel(promise) }
        }
    }
}

/// The one HTTP/2 connection of a channel manager and its copies: opened by the first request,
/// and again by the first after it closed.
actor ManagementConnection {
    struct Open: Sendable {
        let channel: any Channel
        let streams: NIOLoopBound<ManagementStreams>
        let retired: ManagementStreamsRetired
    }

    private var open: Open?

    /// The open connection, or one `connect` opens.
    func streams(_ connect: @Sendable () async throws -> Open) async throws -> Open {
        if let open, open.channel.isActive, !open.retired.isSet { return open }
        open?.channel.close(promise: nil)
        let opened = try await connect()
        open = opened
        return opened
    }

    func close() async {
        try? await open?.channel.close()
        open = nil
    }
}
