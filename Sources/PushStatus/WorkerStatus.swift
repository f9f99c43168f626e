/// The JSON document of `GET /status`: who the worker is, whether it is ready, and the state of
/// its partitions, pools and Redis connection.
///
/// Optional fields are written as `null` rather than left out (``WrittenAsNull``), so every
/// document has the same keys; a reader also accepts a missing key as `null`.
public struct WorkerStatus: Codable, Sendable, Hashable {
    /// The worker's id (`worker.id`, by default the host name).
    public var worker: String
    /// The Kafka consumer group.
    public var group: String
    /// Seconds since the worker started.
    public var uptimeSeconds: Double
    /// Whether `GET /health/ready` answers 200.
    public var ready: Bool
    /// Why the worker is not ready; `nil` while it is.
    @WrittenAsNull public var readyReason: String?
    /// Notifications claimed or parsed without a written result.
    public var inFlight: Int
    public var redis: Redis
    /// The partitions of the requests topic assigned to this worker.
    public var partitions: [Partition]
    /// One entry per app, environment and transport.
    public var pools: [Pool]

    public init(
        worker: String,
        group: String,
        uptimeSeconds: Double,
        ready: Bool,
        readyReason: String? = nil,
        inFlight: Int,
        redis: Redis,
        partitions: [Partition] = [],
        pools: [Pool] = []
    ) {
        self.worker = worker
        self.group = group
        self.uptimeSeconds = uptimeSeconds
        self.ready = ready
        self.readyReason = readyReason
        self.inFlight = inFlight
        self.redis = redis
        self.partitions = partitions
        self.pools = pools
    }

    /// The worker's Redis connection: `{"state": "up"}` or `{"state": "down"}`.
    public struct Redis: Codable, Sendable, Hashable {
        public enum State: String, Codable, Sendable, Hashable {
            case up
            case down
        }

        public var state: State

        public init(state: State) {
            self.state = state
        }
    }

    /// One assigned partition and how far this worker is behind its end.
    public struct Partition: Codable, Sendable, Hashable {
        public var topic: String
        public var partition: Int
        /// Messages between the partition's high watermark and the worker's position; `nil`
        /// until it is known.
        @WrittenAsNull public var lag: Int?

        public init(topic: String, partition: Int, lag: Int? = nil) {
            self.topic = topic
            self.partition = partition
            self.lag = lag
        }
    }

    /// The connections of one app's pool to one APNs environment over one transport.
    public struct Pool: Codable, Sendable, Hashable {
        public var app: String
        /// `production` or `sandbox`.
        public var env: String
        /// `binary` or `http2`; `http2-broadcast` for an environment's broadcasts at a
        /// `broadcastGateway` of their own.
        public var transport: String
        /// Connections established.
        public var open: Int
        /// Connections being established (TCP, TLS, HTTP/2 preface).
        public var connecting: Int
        /// Connection slots waiting out a reconnect back-off.
        public var backingOff: Int
        /// Notifications held in the sent cache for retransmission (binary pools); `nil` where it
        /// does not apply.
        @WrittenAsNull public var cachedNotifications: Int?
        /// Bytes held in the sent cache (binary pools); `nil` where it does not apply.
        @WrittenAsNull public var cachedBytes: Int?
        /// HTTP/2 streams open to Apple (HTTP/2 pools); `nil` where it does not apply.
        @WrittenAsNull public var streamsInUse: Int?
        /// `delivering`; `unreachable` (it cannot connect to its gateway) or `stalled` (its
        /// gateway is too slow for what it holds): its new notifications wait, or move aside, and
        /// the other apps go on. `nil` from a worker that does not say.
        @WrittenAsNull public var state: String?
        /// Notifications the pool holds: accepted and without an outcome yet.
        @WrittenAsNull public var held: Int?
        /// Notifications waiting in the worker, unclaimed, for the pool to take them again.
        @WrittenAsNull public var parked: Int?
        /// Notifications this worker moved aside to `kafka.parkedTopic` for the pool, since it
        /// started.
        @WrittenAsNull public var movedAside: Int?

        public init(
            app: String,
            env: String,
            transport: String,
            open: Int,
            connecting: Int,
            backingOff: Int,
            cachedNotifications: Int? = nil,
            cachedBytes: Int? = nil,
            streamsInUse: Int? = nil,
            state: String? = nil,
            held: Int? = nil,
            parked: Int? = nil,
            movedAside: Int? = nil
        ) {
            self.state = state
            self.held = held
            self.parked = parked
            self.movedAside = movedAside
            self.app = app
            self.env = env
            self.transport = transport
            self.open = open
            self.connecting = connecting
            self.backingOff = backingOff
            self.cachedNotifications = cachedNotifications
            self.cachedBytes = cachedBytes
            self.streamsInUse = streamsInUse
        }
    }
}
