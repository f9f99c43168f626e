import APNSCore
import NIOCore

/// How an ``APNSBinaryClient`` reaches and uses a binary gateway.
public struct APNSBinaryConfiguration: Sendable, APNSGatewaySettings {
    /// The frame format for notifications (§1.2). Command 2 is the default and the only one
    /// that carries a priority; command 1 is accepted by older gateways.
    public enum FrameFormat: Sendable {
        case framed
        case enhanced
    }

    public var host: String
    public var port: Int
    public var credentials: APNSCredentials
    /// Verify the gateway's certificate (node-apn's `rejectUnauthorized`).
    public var verifyServer = true
    /// Name used for SNI and certificate verification; defaults to `host` unless it is an IP address.
    public var serverHostname: String?
    public var frameFormat = FrameFormat.framed
    /// An HTTP proxy to reach the gateway through, with a `CONNECT` tunnel (``APNSConnector``).
    public var proxy: APNSProxy?

    /// Most connections to the gateway at once.
    public var maxConnections = 1
    /// Connections kept open even with nothing to send.
    public var minConnections = 0
    /// TCP connect plus TLS handshake.
    public var connectTimeout: Duration = .seconds(10)
    /// Close a connection that has had nothing to do for this long (`nil` keeps it open).
    public var idleTimeout: Duration? = nil
    /// Close a connection whose flushed frames have not reached the kernel after this long — a
    /// gateway that stopped reading. Its unconfirmed notifications are resent elsewhere.
    public var writeTimeout: Duration = .seconds(30)

    /// How long a notification must have been on the wire, on a connection that has not failed,
    /// before it counts as accepted. Must exceed the gateway's error delay (§6.1).
    public var confirmationWindow: Duration = .seconds(1)
    /// Sent-cache bound per connection, in notifications. When it is reached, sending waits.
    /// A notification stays cached for at least the confirmation window, so one connection
    /// carries at most `cacheMaxCount / confirmationWindow` notifications per second.
    public var cacheMaxCount = 50_000
    /// Sent-cache bound per connection, in frame bytes.
    public var cacheMaxBytes = 32 << 20
    /// Notifications accepted by ``APNSBinaryClient/send(_:)`` whose outcome has not been
    /// consumed yet. When it is reached, `send` waits.
    public var maxPending = 50_000
    /// Most notifications written in one flush.
    public var writeBatchSize = 256
    /// The kernel send buffer of each connection (`SO_SNDBUF`). A notification's confirmation
    /// window starts when it is handed to the kernel, so this buffer, drained at the gateway's
    /// pace, must fit in the window with room for the error delay: the window must exceed
    /// error delay + send buffer ÷ throughput per connection.
    public var socketSendBufferSize = 128 << 10
    /// The client stops writing to a connection while more than twice this many bytes wait in
    /// its own outbound buffer, and resumes below it.
    public var writeBufferLowWaterMark = 32 << 10

    /// Resend notifications left unconfirmed by a connection that closed without an error
    /// packet, marking them `possibleDuplicate`; when off they fail as ``APNSStatus/indeterminate``.
    public var resendOnUnknown = true
    /// Connection failures in a row after which queued notifications fail with
    /// ``APNSStatus/connectionFailed`` instead of waiting; `nil`: they wait, and the client
    /// keeps reconnecting with back-off (``APNSReconnectBackoff``).
    public var connectionRetryLimit: Int? = 10
    /// First delay before reconnecting after a failed connection; doubled per failure.
    public var reconnectBaseDelay: Duration = .milliseconds(100)
    /// Longest delay before reconnecting.
    public var reconnectMaxDelay: Duration = .seconds(5)
    /// Payload size limit (§1.3).
    public var payloadLimit = 2048
    /// Resends allowed per notification when the notification sets no `retryLimit` (`nil`: unlimited).
    public var defaultRetryLimit: Int? = nil

    public init(host: String, port: Int, credentials: APNSCredentials) {
        self.host = host
        self.port = port
        self.credentials = credentials
    }

    /// Checks the settings, with a sentence naming the first bad one.
    public func validate() throws(APNSError) {
        try validatePort()
        func bad(_ message: String) -> APNSError { APNSError(.invalidConfiguration, message) }
        guard maxConnections >= 1 else { throw bad("maxConnections must be at least 1, not \(maxConnections)") }
        guard (0...maxConnections).contains(minConnections) else {
            throw bad("minConnections must be between 0 and maxConnections (\(maxConnections)), not \(minConnections)")
        }
        guard cacheMaxCount >= 1 && cacheMaxCount < Int(Int32.max) else {
            throw bad("cacheMaxCount must be between 1 and \(Int32.max), not \(cacheMaxCount)")
        }
        guard cacheMaxBytes >= 1024 else { throw bad("cacheMaxBytes must be at least 1024, not \(cacheMaxBytes)") }
        guard maxPending >= 1 else { throw bad("maxPending must be at least 1, not \(maxPending)") }
        guard writeBatchSize >= 1 else { throw bad("writeBatchSize must be at least 1, not \(writeBatchSize)") }
        guard socketSendBufferSize >= 4096 else {
            throw bad("socketSendBufferSize must be at least 4096, not \(socketSendBufferSize)")
        }
        guard writeBufferLowWaterMark >= 1024 else {
            throw bad("writeBufferLowWaterMark must be at least 1024, not \(writeBufferLowWaterMark)")
        }
        guard confirmationWindow > .zero else { throw bad("confirmationWindow must be positive") }
        guard connectTimeout > .zero else { throw bad("connectTimeout must be positive") }
        guard writeTimeout > .zero else { throw bad("writeTimeout must be positive") }
        if let connectionRetryLimit, connectionRetryLimit < 1 {
            throw bad("connectionRetryLimit must be at least 1 (or unset to keep waiting), not \(connectionRetryLimit)")
        }
        guard reconnectBaseDelay >= .zero, reconnectMaxDelay >= reconnectBaseDelay else {
            throw bad("reconnectBaseDelay must be zero or more and at most reconnectMaxDelay")
        }
        guard (1...65535).contains(payloadLimit) else {
            throw bad("payloadLimit must be between 1 and 65535, not \(payloadLimit)")
        }
    }
}
