import APNSCore
import APNSHTTP2Core
import NIOCore
import NIOHPACK
import NIOHTTP2

extension HTTP2SimulatorConnectionHandler.Stream {
    /// How much of a channel or broadcast request's body is kept: more than any body the
    /// simulator reads (§7.2, §7.3); ``bodyLength`` counts every byte.
    static let keptBodyLimit = 8192

    /// Keeps the start of the body of a request that has a body buffer.
    mutating func keep(_ data: IOData) {
        guard let kept = body?.count, case .byteBuffer(let buffer) = data else { return }
        let room = Self.keptBodyLimit - kept
        if room > 0 { body?.append(contentsOf: buffer.readableBytesView.prefix(room)) }
    }
}

extension HTTP2SimulatorConnectionHandler {
    /// Answers a channel or broadcast request (§7): `apns-request-id` on every answer, a JSON
    /// body where there is one, `apns-unique-id` on a broadcast's 200 in the sandbox.
    func completeChannelRequest(_ stream: Stream, id: HTTP2StreamID, context: ChannelHandlerContext) {
        let requestID =
            stream.head.requestID.flatMap { HTTP2SimulatorRequestHead.isUUID($0) ? $0 : nil } ?? generateID()
        let result = evaluateChannelRequest(stream, streamID: id, requestID: requestID)
        if let reason = result.reason {
            delta.rejected += 1
            delta.rejectionsByReason[reason.rawValue, default: 0] += 1
        }
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: Self.statusText(result.status))
        if result.body != nil { headers.add(name: "content-type", value: "application/json") }
        headers.add(name: "apns-request-id", value: requestID, indexing: .nonIndexable)
        for (name, value) in result.headers { headers.add(name: name, value: value, indexing: .nonIndexable) }
        if result.uniqueID { addUniqueID(to: &headers) }
        guard let body = result.body else {
            answer(
                [HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: true)))],
                context: context
            )
            return
        }
        let buffer = context.channel.allocator.buffer(string: body)
        answer(
            [
                HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: false))),
                HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(buffer), endStream: true))),
            ],
            context: context
        )
    }

    /// The route, then authentication as for device requests (§7.1: a token or the
    /// certificate; a token's topic is the bundle ID), then the simulator's channel store.
    private func evaluateChannelRequest(
        _ stream: Stream,
        streamID: HTTP2StreamID,
        requestID: String
    ) -> HTTP2SimulatorChannelAnswer {
        let head = stream.head
        if head.duplicate { return .reject(.duplicateHeaders) }
        let route: HTTP2SimulatorChannelRoute
        switch HTTP2SimulatorChannelRoute.route(method: head.method, path: head.path) {
        case .reject(let reason): return .reject(reason)
        case .ok(let value): route = value
        }
        let authorization: APNSHTTP2Simulator.Authorization
        switch authentication {
        case .certificate(let refusal):
            if let refusal { return .reject(refusal) }
            authorization = .certificate
        case .token:
            var tokenHead = head
            tokenHead.topic = route.bundleID
            switch admit(tokenHead) {
            case .failure(let rejection): return .reject(rejection.reason, status: rejection.status)
            case .success(let verified): authorization = .token(teamID: verified.teamID, keyID: verified.keyID)
            }
        }
        // §7.4: a bundle ID with a push type's suffix is TopicDisallowed ("ensure that no push
        // type suffix is added"); one the credentials do not cover is 403 TopicMismatch.
        if route.bundleID.hasSuffix(APNSPushType.liveactivity.topicSuffix!) { return .reject(.topicDisallowed) }
        if let allowed = configuration.allowedTopics, !allowed.contains(route.bundleID) {
            return .reject(.topicMismatch)
        }
        return simulator.answerChannelRequest(
            HTTP2SimulatorChannelRequest(
                route: route,
                head: head,
                body: stream.body ?? [],
                bodyLength: stream.bodyLength,
                connection: connection,
                streamID: Int(streamID),
                requestID: requestID,
                authorization: authorization
            )
        )
    }
}
