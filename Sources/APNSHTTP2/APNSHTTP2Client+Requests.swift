import APNSCore
import APNSHTTP2Core
import Foundation

// What a submission becomes before it is queued: its request template (headers and body, built
// once per notification content) and its queued request.
extension APNSHTTP2Client {
    /// Queues one submission built from its template (with its own payload, if it has one), or
    /// rejects it when that payload is empty or too large.
    func add(_ submission: APNSSubmission, _ t: Template, to batch: inout Batch) {
        var body = t.body
        if let payload = submission.payload {
            guard !payload.isEmpty, payload.count <= t.payloadLimit else {
                var outcome = APNSDeliveryOutcome(
                    tag: submission.tag,
                    token: submission.token,
                    status: .invalidPayload,
                    message:
                        "the payload is \(payload.count) bytes; \(t.broadcastPath == nil ? "push type \(t.pushType.rawValue)" : "a broadcast") needs 1 to \(t.payloadLimit)",
                    attempts: 0,
                    possibleDuplicate: false
                )
                outcome.reason = nil
                batch.rejected.append(outcome)
                return
            }
            body = payload
        }
        // A Live Activity update: the priority and expiration the caller chose, and its
        // ticket beside the batch.
        var (priority, expiration) = (t.priority, t.expiration)
        if let activity = submission.activity {
            priority = activity.priority ?? priority
            expiration = activity.expiration ?? expiration
            batch.tickets.append((submission.tag, activity))
        }
        batch.items.append(
            QueuedRequest(
                tag: submission.tag,
                token: submission.token,
                path: t.broadcastPath
                    ?? submission.token.bytes.withUnsafeBufferPointer {
                        DeviceToken.lowercaseHex($0, prefix: "/3/device/")
                    },
                body: body,
                pushType: t.pushType,
                topic: t.topic,
                priority: priority,
                isBroadcast: t.broadcastPath != nil,
                urgent: submission.content.urgent,
                expiration: expiration,
                collapseID: t.collapseID,
                apnsID: submission.apnsID ?? apnsIDs.next(),
                retryLimit: t.retryLimit,
                staleAt: submission.content.staleAt
            )
        )
    }

    // MARK: Building requests

    struct Template {
        var pushType: APNSPushType
        var topic: String
        var priority: UInt8
        var expiration: UInt32
        var collapseID: String?
        var body: [UInt8]
        var retryLimit: Int
        /// A broadcast's `/4/broadcasts/apps/<bundle ID>` (§7.3); `nil` for a device request.
        var broadcastPath: String? = nil

        /// The largest body: the push type's (§1.3), or 5,120 bytes for a broadcast (§7.3).
        var payloadLimit: Int {
            broadcastPath == nil ? pushType.payloadLimit : APNSPushType.broadcastPayloadLimit
        }
    }

    /// Runs the §3.3/§5 checks once per distinct notification and builds its payload.
    func makeTemplate(_ submission: APNSSubmission, now: Date) throws(APNSError) -> Template {
        // Read in place (`content.notification`), not copied: a copy retained each of its fields.
        let content = submission.content
        let pushType = try content.notification.resolvedPushType()
        let topic: String
        if pushType == .mdm {
            guard let mdmTopic = configuration.mdmTopic else {
                throw APNSError(
                    .invalidRequest,
                    "an mdm notification needs the app's mdmTopic (the topic of the MDM push certificate)"
                )
            }
            topic = mdmTopic
        } else {
            topic = pushType.topic(bundleID: content.notification.topic ?? configuration.topic)
        }
        let authentication: APNSAuthentication
        switch configuration.authentication {
        case .certificate: authentication = .certificate
        case .token(let provider): authentication = .token(try provider.currentToken())
        }
        try APNSHTTP2Request.validateHeaders(
            topic: topic,
            pushType: pushType,
            priority: content.notification.priority,
            authentication: authentication,
            collapseID: content.notification.collapseId
        )
        try APNSHTTP2Request.validateContent(of: content.notification, pushType: pushType)
        if content.broadcast, content.notification.collapseId != nil {
            // §7.3: a broadcast's headers are apns-channel-id, apns-push-type, apns-priority,
            // apns-expiration and apns-request-id; there is no apns-collapse-id.
            throw APNSError(.invalidRequest, "a broadcast carries no apns-collapse-id (§7.3); send it without one")
        }
        var body: [UInt8] = []
        if submission.payload == nil {
            do {
                // §1.3: 4096 bytes, 5120 for VoIP; §7.3: 5120 for a broadcast; priority 1 exists
                // on HTTP/2 (§3.3).
                let limit = content.broadcast ? APNSPushType.broadcastPayloadLimit : pushType.payloadLimit
                body = try content.notification.validatedPayload(limit: limit, allowLowPriority: true)
            } catch {
                throw APNSError(.invalidPayload, error.message, underlying: error)
            }
        }
        return Template(
            pushType: pushType,
            topic: topic,
            priority: content.notification.priority.rawValue,
            expiration: content.notification.expiry.unixSeconds(now: now),
            collapseID: content.notification.collapseId,
            body: body,
            retryLimit: content.notification.retryLimit ?? configuration.defaultRetryLimit,
            broadcastPath: content.broadcast
                ? try Self.broadcastPath(
                    pushType: pushType,
                    bundleID: content.notification.topic ?? configuration.topic
                )
                : nil
        )
    }

    /// A broadcast's path (§7.3): the bundle ID is in the path, not in `apns-topic`. Only Live
    /// Activity updates are broadcast.
    static func broadcastPath(pushType: APNSPushType, bundleID: String) throws(APNSError) -> String {
        guard pushType == .liveactivity else {
            throw APNSError(
                .invalidRequest,
                "a broadcast to a channel must be a Live Activity update (push type liveactivity), not \(pushType.rawValue)"
            )
        }
        return "/4/broadcasts/apps/" + bundleID
    }
}
