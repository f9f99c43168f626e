import APNSCore
import APNSHTTP2Core

/// What a channel or broadcast request asks for (§7.2, §7.3).
enum HTTP2SimulatorChannelRoute: Equatable {
    case create(bundleID: String)
    case read(bundleID: String)
    case delete(bundleID: String)
    case list(bundleID: String)
    case broadcast(bundleID: String)

    var bundleID: String {
        switch self {
        case .create(let bundleID), .read(let bundleID), .delete(let bundleID), .list(let bundleID),
            .broadcast(let bundleID):
            bundleID
        }
    }

    /// `:method` and `:path` as a route; a query string is ignored. An unknown path is 404
    /// `BadPath`, a known path with another method 405 `MethodNotAllowed` (§3.4).
    static func route(method: String?, path: String?) -> HTTP2SimulatorCheck<Self> {
        guard var path else { return .reject(.badPath) }
        if let query = path.firstIndex(of: "?") { path = String(path[..<query]) }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 5, parts[0].isEmpty else { return .reject(.badPath) }
        let resource: String
        let bundleID: String
        if parts[1] == "1", parts[2] == "apps", !parts[3].isEmpty, parts[4] == "channels" || parts[4] == "all-channels"
        {
            (resource, bundleID) = (parts[4], parts[3])
        } else if parts[1] == "4", parts[2] == "broadcasts", parts[3] == "apps", !parts[4].isEmpty {
            (resource, bundleID) = ("broadcasts", parts[4])
        } else {
            return .reject(.badPath)
        }
        switch (resource, method ?? "") {
        case ("channels", "POST"): return .ok(.create(bundleID: bundleID))
        case ("channels", "GET"): return .ok(.read(bundleID: bundleID))
        case ("channels", "DELETE"): return .ok(.delete(bundleID: bundleID))
        case ("all-channels", "GET"): return .ok(.list(bundleID: bundleID))
        case ("broadcasts", "POST"): return .ok(.broadcast(bundleID: bundleID))
        default: return .reject(.methodNotAllowed)
        }
    }
}

/// A reason APNs was seen answering that no table of Apple's lists (§7.4).
enum HTTP2SimulatorChannelReason {
    /// 400 to a create whose `message-storage-policy` is missing or not 0 or 1, as
    /// @parse/node-apn observed.
    static let missingChannelQueueSize = APNSReason(rawValue: "MissingChannelQueueSize")
}

/// An authenticated channel or broadcast request, as the simulator's channel store sees it.
struct HTTP2SimulatorChannelRequest {
    var route: HTTP2SimulatorChannelRoute
    var head: HTTP2SimulatorRequestHead
    /// The first bytes of the body (all of any body the simulator reads).
    var body: [UInt8]
    var bodyLength: Int
    var connection: Int
    var streamID: Int
    var requestID: String
    var authorization: APNSHTTP2Simulator.Authorization
}

/// The answer to a channel or broadcast request: status, extra headers and JSON body.
struct HTTP2SimulatorChannelAnswer {
    var status: Int
    var headers: [(String, String)] = []
    var body: String?
    /// Set on an error answer.
    var reason: APNSReason?
    /// A broadcast's 200 carries `apns-unique-id` in the sandbox (§7.3).
    var uniqueID = false

    static func reject(_ reason: APNSReason, status: Int? = nil) -> Self {
        Self(status: status ?? reason.status ?? 400, body: "{\"reason\":\"\(reason.rawValue)\"}", reason: reason)
    }
}

extension APNSHTTP2Simulator {
    /// §7.3: the largest broadcast body.
    static let broadcastPayloadLimit = 5120

    /// Answers an authenticated channel or broadcast request by the rules on
    /// ``APNSHTTP2Simulator`` (§7), and records it when it succeeds.
    func answerChannelRequest(_ request: HTTP2SimulatorChannelRequest) -> HTTP2SimulatorChannelAnswer {
        let key = HTTP2SimulatorChannelStore.Key(
            bundleID: request.route.bundleID,
            environment: configuration.environment
        )
        let answer: HTTP2SimulatorChannelAnswer
        switch request.route {
        case .create:
            switch Self.channelConfiguration(request.body) {
            case .reject(let reason): return .reject(reason)
            case .ok(let policy): answer = state.withLock { create(key, policy, request, &$0) }
            }
        case .list:
            answer = state.withLock { list(key, request, &$0) }
        case .read, .delete:
            switch Self.channelID(request.head) {
            case .reject(let reason): return .reject(reason)
            case .ok(let id): answer = state.withLock { readOrDelete(key, id, request, &$0) }
            }
        case .broadcast:
            switch Self.checkBroadcast(request.head) {
            case .reject(let reason): return .reject(reason)
            case .ok(let checked): answer = state.withLock { broadcast(key, checked, request, &$0) }
            }
        }
        if answer.reason == nil && state.withLock({ $0.recordBuffer.count }) >= 1 << 16 { flushRecord() }
        return answer
    }

    /// §7.2: the create body `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`. A
    /// body that is not a JSON object is `BadRequestPayload` ("unparseable"), an attribute other
    /// than those two `BadRequestParams` ("unrecognizable attribute", §7.4), and a missing or
    /// other storage policy `MissingChannelQueueSize`.
    static func channelConfiguration(_ body: [UInt8]) -> HTTP2SimulatorCheck<MessageStoragePolicy> {
        guard case .object(let members)? = try? JSONValue.parse(body) else { return .reject(.badRequestPayload) }
        if members.keys.contains(where: { $0 != "push-type" && $0 != "message-storage-policy" }) {
            return .reject(.badRequestParams)
        }
        guard let pushType = members["push-type"] else { return .reject(.missingPushType) }
        guard case .string(let text) = pushType, text.lowercased() == "liveactivity" else {
            return .reject(.invalidPushType)
        }
        guard case .int(let value)? = members["message-storage-policy"],
            let policy = MessageStoragePolicy(rawValue: Int(value))
        else { return .reject(HTTP2SimulatorChannelReason.missingChannelQueueSize) }
        return .ok(policy)
    }

    /// §7.2: `apns-channel-id`, present (an empty value is missing) and well formed.
    static func channelID(_ head: HTTP2SimulatorRequestHead) -> HTTP2SimulatorCheck<String> {
        guard let id = head.channelID, !id.isEmpty else { return .reject(.missingChannelId) }
        guard HTTP2SimulatorChannelStore.isWellFormed(channelID: id) else { return .reject(.badChannelId) }
        return .ok(id)
    }

    struct CheckedBroadcast {
        var channelID: String
        var pushType: String
        var priority: Int?
        var expiration: Int?
    }

    /// §7.3: the broadcast headers that need no channel.
    static func checkBroadcast(_ head: HTTP2SimulatorRequestHead) -> HTTP2SimulatorCheck<CheckedBroadcast> {
        let id: String
        switch channelID(head) {
        case .reject(let reason): return .reject(reason)
        case .ok(let value): id = value
        }
        guard let pushType = head.pushType else { return .reject(.missingPushType) }
        guard pushType.lowercased() == "liveactivity" else { return .reject(.invalidPushType) }
        var checked = CheckedBroadcast(channelID: id, pushType: pushType)
        if let priority = head.priority {
            // §7.3, §5.1: a Live Activity's broadcast takes priority 10 or 5.
            guard let value = Int(priority), let known = APNSPriority(rawValue: value),
                APNSPushType.liveactivity.allowedPriorities?.contains(known) ?? true
            else { return .reject(.badPriority) }
            checked.priority = value
        }
        if let expiration = head.expiration {
            let digits = expiration.utf8
            guard !digits.isEmpty, digits.count <= 18,
                digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
            else { return .reject(.badExpirationDate) }
            checked.expiration = Int(expiration)
        }
        return .ok(checked)
    }

    private func create(
        _ key: HTTP2SimulatorChannelStore.Key,
        _ policy: MessageStoragePolicy,
        _ request: HTTP2SimulatorChannelRequest,
        _ s: inout State
    ) -> HTTP2SimulatorChannelAnswer {
        var app = s.channels.apps[key] ?? .init()
        // §7.1: at most 10,000 channels per app and environment.
        guard app.order.count < configuration.maxChannelsPerApp else {
            return .reject(.cannotCreateChannelConfig)
        }
        let id = HTTP2SimulatorChannelStore.newChannelID(in: app)
        app.order.append(id)
        app.policies[id] = policy
        s.channels.apps[key] = app
        s.statistics.channels += 1
        note(.create, request, channelID: id, policy: policy, listed: nil, &s)
        return HTTP2SimulatorChannelAnswer(status: 201, headers: [("apns-channel-id", id)])
    }

    private func list(
        _ key: HTTP2SimulatorChannelStore.Key,
        _ request: HTTP2SimulatorChannelRequest,
        _ s: inout State
    ) -> HTTP2SimulatorChannelAnswer {
        let ids = s.channels.apps[key]?.order ?? []
        note(.list, request, channelID: nil, policy: nil, listed: ids.count, &s)
        let body = "{\"channels\":[" + ids.map { Self.jsonString($0) }.joined(separator: ",") + "]}"
        return HTTP2SimulatorChannelAnswer(status: 200, body: body)
    }

    private func readOrDelete(
        _ key: HTTP2SimulatorChannelStore.Key,
        _ id: String,
        _ request: HTTP2SimulatorChannelRequest,
        _ s: inout State
    ) -> HTTP2SimulatorChannelAnswer {
        guard var app = s.channels.apps[key], let policy = app.policies[id] else {
            return .reject(.channelNotRegistered)
        }
        guard case .delete = request.route else {
            note(.read, request, channelID: id, policy: policy, listed: nil, &s)
            return HTTP2SimulatorChannelAnswer(
                status: 200,
                body: "{\"message-storage-policy\":\(policy.rawValue),\"push-type\":\"LiveActivity\"}"
            )
        }
        app.policies[id] = nil
        app.order.removeAll { $0 == id }
        s.channels.apps[key] = app.order.isEmpty ? nil : app
        s.statistics.channels -= 1
        note(.delete, request, channelID: id, policy: policy, listed: nil, &s)
        return HTTP2SimulatorChannelAnswer(status: 204)
    }

    private func broadcast(
        _ key: HTTP2SimulatorChannelStore.Key,
        _ checked: CheckedBroadcast,
        _ request: HTTP2SimulatorChannelRequest,
        _ s: inout State
    ) -> HTTP2SimulatorChannelAnswer {
        guard let policy = s.channels.apps[key]?.policies[checked.channelID] else {
            return .reject(.channelNotRegistered)
        }
        // §7.3: a channel that stores nothing takes expiration 0 only.
        if policy == .noMessageStored, let expiration = checked.expiration, expiration != 0 {
            return .reject(.badExpirationDate)
        }
        if request.bodyLength == 0 { return .reject(.payloadEmpty) }
        if request.bodyLength > Self.broadcastPayloadLimit { return .reject(.payloadTooLarge) }
        let broadcast = Broadcast(
            connection: request.connection,
            streamID: request.streamID,
            requestID: request.requestID,
            bundleID: key.bundleID,
            channelID: checked.channelID,
            pushType: checked.pushType,
            priority: checked.priority,
            expiration: checked.expiration,
            payloadLength: request.bodyLength,
            authorization: request.authorization
        )
        s.statistics.broadcasts += 1
        if s.broadcasts.count < configuration.acceptedListLimit { s.broadcasts.append(broadcast) }
        if configuration.recordPath != nil {
            let b = broadcast
            let line =
                "{\"api\":\"broadcast\",\"connection\":\(b.connection),\"streamID\":\(b.streamID),\"requestID\":\(Self.jsonString(b.requestID)),\"bundleID\":\(Self.jsonString(b.bundleID)),\"channelID\":\(Self.jsonString(b.channelID)),\"pushType\":\(Self.jsonString(b.pushType)),\"priority\":\(b.priority.map(String.init) ?? "null"),\"expiration\":\(b.expiration.map(String.init) ?? "null"),\"payloadLength\":\(b.payloadLength),\"authorization\":\(Self.recordAuthorization(b.authorization))}\n"
            s.recordBuffer += line.utf8
        }
        var answer = HTTP2SimulatorChannelAnswer(status: 200)
        answer.uniqueID = true
        return answer
    }

    /// Counts and keeps a successful channel-management request, and writes its record line.
    private func note(
        _ kind: ChannelOperation.Kind,
        _ request: HTTP2SimulatorChannelRequest,
        channelID: String?,
        policy: MessageStoragePolicy?,
        listed: Int?,
        _ s: inout State
    ) {
        let operation = ChannelOperation(
            kind: kind,
            connection: request.connection,
            streamID: request.streamID,
            requestID: request.requestID,
            requestIDEchoed: request.head.requestID == request.requestID,
            bundleID: request.route.bundleID,
            channelID: channelID,
            storagePolicy: policy,
            listed: listed,
            authorization: request.authorization
        )
        s.statistics.channelOperations += 1
        if s.channelOperations.count < configuration.acceptedListLimit { s.channelOperations.append(operation) }
        guard configuration.recordPath != nil else { return }
        var line =
            "{\"api\":\"channels\",\"operation\":\"\(kind.rawValue)\",\"connection\":\(request.connection),\"streamID\":\(request.streamID),\"requestID\":\(Self.jsonString(request.requestID)),\"bundleID\":\(Self.jsonString(request.route.bundleID))"
        if let channelID { line += ",\"channelID\":\(Self.jsonString(channelID))" }
        if let policy { line += ",\"messageStoragePolicy\":\(policy.rawValue)" }
        if let listed { line += ",\"channels\":\(listed)" }
        line += ",\"authorization\":\(Self.recordAuthorization(request.authorization))}\n"
        s.recordBuffer += line.utf8
    }
}
