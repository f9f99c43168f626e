import APNSCore

/// A notification compiled for the binary gateway, as it sits in the queue or a sent cache.
@usableFromInline package struct PendingNotification: APNSQueuedNotification, Equatable {
    package var tag: UInt64
    package var token: DeviceToken
    var payload: [UInt8]
    var expiry: UInt32
    var priority: UInt8
    /// Written before the notifications that are not (``APNSSubmission/Content/urgent``).
    package var urgent = false
    var retryLimit: Int?
    /// When it goes stale (milliseconds since the epoch); see ``APNSSubmission/Content/staleAt``.
    package var staleAt: Int64? = nil
    /// How often it has been written to a connection.
    package var attempts: Int = 0
    /// Set once an attempt ended on a connection that closed without an error packet.
    package var possibleDuplicate = false
    /// When its frame was last handed to the kernel; see ``APNSDeliveryOutcome/writtenAt``.
    package var writtenAt: UInt64? = nil

    /// Bytes of its command-2 frame: 29 + token + payload (§1.2: 61 + n for a 32-byte token).
    var wireSize: Int { 29 + token.bytes.count + payload.count }

    /// Its outcome now: transmitted when `status` is `nil`.
    func outcome(status: APNSStatus?, message: String?) -> APNSDeliveryOutcome {
        baseOutcome(status: status, message: message)
    }

    package func failure(_ status: APNSStatus, message: String) -> APNSDeliveryOutcome {
        outcome(status: status, message: message)
    }
}
