import APNSCore
import APNSHTTP2Core

/// One notification on its way through an ``APNSHTTP2Client``: the request as it goes on the
/// wire plus what the client knows about its attempts.
@usableFromInline package struct QueuedRequest: APNSQueuedNotification, Equatable {
    package var tag: UInt64
    package var token: DeviceToken
    /// `/3/device/<hex>` (§3.3), or `/4/broadcasts/apps/<bundle ID>` for a broadcast (§7.3).
    var path: String
    var body: [UInt8]
    var pushType: APNSPushType
    var topic: String
    // The one-byte and four-byte fields sit together, in what would otherwise be padding: the
    // pool keeps one of these per notification it holds.
    var priority: UInt8
    /// A broadcast (§7.3): the token is the channel ID's bytes, sent base64 as `apns-channel-id`,
    /// with the request's UUID as `apns-request-id` and no `apns-topic` (the bundle ID is in
    /// ``path``).
    var isBroadcast = false
    /// Written before the requests that are not (``APNSSubmission/Content/urgent``).
    package var urgent = false
    /// Resends on another connection after a reason that is about the connection or its
    /// provider token, not the notification (`ExpiredProviderToken`, `IdleTimeout`,
    /// `Shutdown`, …; ``APNSRetryAdvice/onNewConnection``). They do not spend ``retries``;
    /// ``HTTP2PoolStateMachine/Configuration/maxConnectionResends`` bounds them.
    var connectionResends: UInt8 = 0
    var expiration: UInt32
    /// The `iat` (UNIX seconds) of the provider token its last write carried; 0 with
    /// certificate authentication.
    var providerTokenIssuedAt: UInt32 = 0
    var collapseID: String?
    /// Set by the client, kept across retries so one notification has one id in the logs (§3.5).
    var apnsID: String
    var retryLimit: Int
    /// When it goes stale (milliseconds since the epoch); see ``APNSSubmission/Content/staleAt``.
    package var staleAt: Int64? = nil
    /// Writes to a connection (less the ones the server certainly did not process).
    package var attempts = 0
    /// Writes to a connection, all of them.
    var writes = 0
    /// When it was last written; see ``APNSDeliveryOutcome/writtenAt``.
    package var writtenAt: UInt64?
    /// Retries spent after `429 TooManyRequests` and 5xx answers other than `Shutdown`: the
    /// budget ``retryLimit`` bounds.
    var retries = 0
    /// An earlier attempt was on a stream the server may have processed without answering.
    package var possibleDuplicate = false
    /// The last failure, reported if the notification is given up.
    var lastFailure: APNSHTTP2Failure?

    func outcome(
        status: APNSStatus?,
        message: String? = nil,
        reason: String? = nil,
        unregisteredAt: Int64? = nil,
        uniqueID: String? = nil
    ) -> APNSDeliveryOutcome {
        var outcome = baseOutcome(status: status, message: message)
        outcome.reason = reason
        outcome.apnsID = apnsID
        outcome.apnsUniqueID = uniqueID
        outcome.unregisteredAt = unregisteredAt
        return outcome
    }

    package func failure(_ status: APNSStatus, message: String) -> APNSDeliveryOutcome {
        outcome(status: status, message: message)
    }

    /// Its outcome when a newer update of its activity (of job `job`) replaced it: not sent.
    func supersededFailure(by job: String) -> APNSDeliveryOutcome {
        failure(.superseded, message: "job \(job) has a newer update of this Live Activity; not sent")
    }
}

extension APNSNotification {
    /// The push type for the HTTP/2 API: the notification's own, or `mdm` for MDM,
    /// `background` for a content-available-only notification, else `alert` (§3.3, §5).
    public func resolvedPushType() throws(APNSError) -> APNSPushType {
        if let raw = pushType {
            guard let type = APNSPushType(rawValue: raw) else {
                let known = APNSPushType.allCases.map(\.rawValue).joined(separator: ", ")
                throw APNSError(.invalidRequest, "push type \"\(raw)\" is not one APNs knows; use one of \(known)")
            }
            return type
        }
        if mdm != nil { return .mdm }
        if contentAvailable && alert == nil && sound == nil && badge == nil { return .background }
        return .alert
    }
}
