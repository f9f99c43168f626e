/// One Redis server or a Redis Cluster behind the same calls, for code that works with either.
///
/// On a server every pipeline is one round trip on one ``RedisConnection``. On a cluster a
/// pipeline is split by the primary owning each command's key (``RedisCluster``). Code that
/// runs a multi-key script groups its work with ``groupedBySlot(_:key:)``: one group on a
/// server, one per hash slot on a cluster, so that each script's keys share a slot.
///
/// ```swift
/// let redis = try await RedisClient.connect(seeds: [configuration], cluster: true)
/// try await redis.load([script])
/// let replies = try await redis.pipeline(commands, scripts: [script])
/// ```
public enum RedisClient: Sendable {
    case server(RedisConnection)
    case cluster(RedisCluster)

    /// Connects to the first seed (a server), or reads the cluster's slot map from the seeds.
    public static func connect(seeds: [RedisConfiguration], cluster: Bool) async throws(RedisError) -> RedisClient {
        if cluster { return .cluster(try await RedisCluster.connect(seeds: seeds)) }
        guard let seed = seeds.first else {
            throw RedisError(.invalidConfiguration, "invalid Redis configuration: no server")
        }
        return .server(try await RedisConnection.connect(seed))
    }

    /// Whether keys must be grouped by hash slot.
    public var isCluster: Bool {
        if case .cluster = self { return true }
        return false
    }

    /// ``RedisConnection/pipeline(_:scripts:)`` or ``RedisCluster/pipeline(_:scripts:)``.
    public func pipeline(_ commands: [[[UInt8]]], scripts: [RedisScript] = []) async throws(RedisError) -> [RedisValue]
    {
        try await pipeline(try RedisCommands(commands), scripts: scripts)
    }

    /// ``pipeline(_:scripts:)`` with commands already encoded (``RedisCommands``): on a
    /// cluster each is routed by the key marked with ``RedisCommands/appendKey(_:)``.
    public func pipeline(
        _ commands: RedisCommands,
        scripts: [RedisScript] = []
    ) async throws(RedisError) -> [RedisValue] {
        switch self {
        case .server(let connection): try await connection.pipeline(commands, scripts: scripts)
        case .cluster(let cluster): try await cluster.pipeline(commands, scripts: scripts)
        }
    }

    /// One command; an error reply is thrown.
    @discardableResult
    public func send(_ command: [String]) async throws(RedisError) -> RedisValue {
        switch self {
        case .server(let connection): try await connection.send(command)
        case .cluster(let cluster): try await cluster.send(command)
        }
    }

    /// One command of binary-safe arguments; an error reply is thrown.
    @discardableResult
    public func send(_ command: [[UInt8]]) async throws(RedisError) -> RedisValue {
        switch self {
        case .server(let connection): try await connection.send(command)
        case .cluster(let cluster): try await cluster.send(command)
        }
    }

    /// Loads `scripts` on the server, or on every primary of the cluster, so that pipelines
    /// meet `NOSCRIPT` only after a script cache is lost (a restart, a promoted replica).
    public func load(_ scripts: [RedisScript]) async throws(RedisError) {
        for script in scripts {
            let sha1: String
            switch self {
            case .server(let connection): sha1 = try await connection.scriptLoad(script.source)
            case .cluster(let cluster): sha1 = try await cluster.scriptLoad(script.source)
            }
            guard sha1 == script.sha1 else {
                throw RedisError(.protocol, "Redis loaded a script as \(sha1), not \(script.sha1)")
            }
        }
    }

    /// After a failure: connects the server again, or reads the cluster's slot map again (its
    /// broken connections are already dropped and reopen on their next use).
    public func reconnect() async throws(RedisError) {
        switch self {
        case .server(let connection): try await connection.reconnect()
        case .cluster(let cluster): try await cluster.refreshSlots()
        }
    }

    public func close() async {
        switch self {
        case .server(let connection): await connection.close()
        case .cluster(let cluster): await cluster.close()
        }
    }

    /// Socket round trips so far (on a cluster, summed over its connections).
    public var roundTrips: Int {
        switch self {
        case .server(let connection): connection.roundTrips
        case .cluster(let cluster): cluster.roundTrips
        }
    }

    /// Redirections followed so far: `MOVED` and `ASK` on a cluster, none on a server.
    public var redirects: Int {
        switch self {
        case .server: 0
        case .cluster(let cluster): cluster.movedRedirects + cluster.askRedirects
        }
    }

    /// `items` in groups whose keys share a hash slot, each group in the order of `items`:
    /// one group on a server, one per slot on a cluster (by ``RedisClusterSlot``, hash tags
    /// included). Groups come in the order of their first item.
    public func groupedBySlot<T>(_ items: [T], key: (T) -> [UInt8]) -> [[T]] {
        guard isCluster, items.count > 1 else { return items.isEmpty ? [] : [items] }
        var groups: [[T]] = []
        var place: [Int: Int] = [:]
        for item in items {
            let slot = RedisClusterSlot.of(key(item))
            if let index = place[slot] {
                groups[index].append(item)
            } else {
                place[slot] = groups.count
                groups.append([item])
            }
        }
        return groups
    }
}
