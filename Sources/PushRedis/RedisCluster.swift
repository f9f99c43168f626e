import Synchronization

/// A client of a Redis Cluster, safe to share between tasks.
///
/// It reads the slot map with `CLUSTER SLOTS` from the seeds, keeps one ``RedisConnection``
/// per primary (each with the seeds' password, TLS settings and timeouts), and sends every
/// command to the primary that owns its key's slot (``RedisClusterSlot``). A pipeline is
/// split by owner and the parts go to their primaries in parallel, one round trip each;
/// replies come back in command order.
///
/// Redirections are followed, at most five times per command: `MOVED` (the slot has a new
/// owner) updates the map, reloads it and resends the command to the owner; `ASK` (the slot
/// is being migrated and the key is already at the target) resends it to the target after
/// `ASKING`, without changing the map. `TRYAGAIN` (a multi-key command whose keys are split
/// between the two nodes of a slot being migrated) is retried every 10 ms, up to 50 times. A connection error drops that primary's connection,
/// reloads the map (so a promoted replica is found) and is thrown: as with a single
/// connection, some commands of the pipeline may have run, and the caller retries.
///
/// ```swift
/// let cluster = try await RedisCluster.connect(seeds: [RedisConfiguration(url: "rediss://:pw@redis-0:6379")])
/// let replies = try await cluster.pipeline([["INCR", "{user:1}:a"], ["INCR", "{user:2}:a"]])
/// ```
public final class RedisCluster: Sendable {
    /// The seeds: where the slot map is read from first, and the settings (password, TLS,
    /// timeouts) used for every node.
    public let seeds: [RedisConfiguration]
    private let state = Mutex(Topology())
    private let moved = Atomic<Int>(0)
    private let asked = Atomic<Int>(0)
    private let retried = Atomic<Int>(0)
    private static let maxRedirects = 5
    /// `TRYAGAIN` retries per pipeline, 10 ms apart: a migration moves a slot's keys within that.
    private static let maxTryAgain = 50

    /// A node's address, as the cluster reports it.
    struct Endpoint: Hashable, Sendable, CustomStringConvertible {
        var host: String
        var port: Int
        var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    private struct Topology {
        /// slot → index in `primaries`, or -1 while no node serves it.
        var slots: [Int] = []
        var primaries: [Endpoint] = []
        var connections: [Endpoint: RedisConnection] = [:]

        func owner(of slot: Int) -> Endpoint? {
            guard slot < slots.count, slots[slot] >= 0 else { return nil }
            return primaries[slots[slot]]
        }

        mutating func assign(_ slot: Int, to endpoint: Endpoint) {
            if slots.isEmpty { slots = Array(repeating: -1, count: RedisClusterSlot.count) }
            if let index = primaries.firstIndex(of: endpoint) {
                slots[slot] = index
            } else {
                primaries.append(endpoint)
                slots[slot] = primaries.count - 1
            }
        }
    }

    private init(seeds: [RedisConfiguration]) {
        self.seeds = seeds
    }

    /// Connects to the first seed that answers, reads the slot map and returns the client.
    ///
    /// - Throws: `.invalidConfiguration` for no seeds or a database other than 0 (a cluster
    ///   has only database 0), or the last seed's error when none answers `CLUSTER SLOTS`.
    public static func connect(seeds: [RedisConfiguration]) async throws(RedisError) -> RedisCluster {
        guard !seeds.isEmpty else {
            throw RedisError(.invalidConfiguration, "invalid Redis Cluster configuration: no seed nodes")
        }
        for seed in seeds {
            try seed.validate()
            if seed.database != 0 {
                throw RedisError(
                    .invalidConfiguration,
                    "invalid Redis Cluster configuration: database \(seed.database) for \(seed.endpoint); "
                        + "a cluster has only database 0"
                )
            }
        }
        let cluster = RedisCluster(seeds: seeds)
        try await cluster.refreshSlots()
        return cluster
    }

    // MARK: - Commands

    /// Sends one command to the primary owning its key; an error reply is thrown.
    @discardableResult
    public func send(_ command: [[UInt8]]) async throws(RedisError) -> RedisValue {
        let reply = try await pipeline([command])[0]
        if case .error(let line) = reply { throw RedisError.server(line, command: RedisCommands.name(of: command)) }
        return reply
    }

    /// ``send(_:)`` with text arguments.
    @discardableResult
    public func send(_ command: [String]) async throws(RedisError) -> RedisValue {
        try await send(command.map { Array($0.utf8) })
    }

    /// Sends `commands` split by owning primary, the parts in parallel, one round trip per
    /// primary (more only after a redirection). Error replies stay in place, as with
    /// ``RedisConnection/pipeline(_:scripts:)``, which also handles `NOSCRIPT` per primary.
    ///
    /// - Throws: the first connection, timeout or protocol error of a part.
    public func pipeline(_ commands: [[[UInt8]]], scripts: [RedisScript] = []) async throws(RedisError) -> [RedisValue]
    {
        try await pipeline(try RedisCommands(commands), scripts: scripts)
    }

    /// ``pipeline(_:scripts:)`` with commands already encoded (``RedisCommands``), each routed
    /// by its first key.
    public func pipeline(
        _ commands: RedisCommands,
        scripts: [RedisScript] = []
    ) async throws(RedisError) -> [RedisValue] {
        try RedisCommands.validate(commands)
        var results = [RedisValue?](repeating: nil, count: commands.count)
        var pending = (0..<commands.count).map { Routed(index: $0, ask: nil) }
        var attempt = 0
        var tryAgain = 0
        while !pending.isEmpty {
            let groups = route(pending, commands, results: &results)
            var rerouting = Rerouting()
            var failure: RedisError?
            for (endpoint, entries, outcome) in await sendParts(groups, commands: commands, scripts: scripts) {
                switch outcome {
                case .failure(let error):
                    drop(endpoint)
                    failure = failure ?? error
                case .success(let replies):
                    for (entry, reply) in zip(entries, replies) {
                        if let again = reroute(entry, reply, from: endpoint, attempt: attempt, tryAgain: tryAgain) {
                            rerouting.add(again)
                        } else {
                            results[entry.index] = reply
                        }
                    }
                }
            }
            // Refreshes are best effort: after a failure, the failure is what the caller needs;
            // after MOVED, the replies have already corrected the slots they named.
            if let failure {
                try? await refreshSlots()
                throw failure
            }
            if rerouting.moved { try? await refreshSlots() }
            if rerouting.retryLater {
                tryAgain += 1
                try? await Task.sleep(for: .milliseconds(10))  // back-off while the migration moves keys
            }
            if rerouting.redirected { attempt += 1 }
            pending = rerouting.next
        }
        return results.map { $0! }
    }

    /// Groups `pending` by the primary that serves each command's slot (or by its `ASK`
    /// target); a command whose slot no primary serves gets `CLUSTERDOWN` in `results`.
    private func route(
        _ pending: [Routed],
        _ commands: RedisCommands,
        results: inout [RedisValue?]
    ) -> [Endpoint: [Routed]] {
        var groups: [Endpoint: [Routed]] = [:]
        state.withLock { topology in
            for entry in pending {
                var endpoint = entry.ask
                if endpoint == nil {
                    if let slot = commands.slot(of: entry.index) {
                        endpoint = topology.owner(of: slot)
                    } else {
                        endpoint = topology.primaries.first
                    }
                }
                if let endpoint {
                    groups[endpoint, default: []].append(entry)
                } else {
                    results[entry.index] = .error("CLUSTERDOWN Hash slot not served")
                }
            }
        }
        return groups
    }

    /// Why a command is sent again: `TRYAGAIN` (later), `MOVED` (to the slot's new owner, the
    /// topology corrected) or `ASK` (once, to the node named).
    private enum Again {
        case later(Routed)
        case moved(Routed)
        case asked(Routed)
    }

    /// The commands of one round that go round again, and what the round must do before.
    private struct Rerouting {
        var next: [Routed] = []
        var moved = false
        var retryLater = false
        var redirected = false

        mutating func add(_ again: Again) {
            switch again {
            case .later(let entry):
                retryLater = true
                next.append(entry)
            case .moved(let entry):
                moved = true
                redirected = true
                next.append(entry)
            case .asked(let entry):
                redirected = true
                next.append(entry)
            }
        }
    }

    /// Whether `reply` sends its command round again, and where; `nil` when it is the answer.
    private func reroute(
        _ entry: Routed,
        _ reply: RedisValue,
        from endpoint: Endpoint,
        attempt: Int,
        tryAgain: Int
    ) -> Again? {
        if tryAgain < Self.maxTryAgain, reply.errorMessage?.hasPrefix("TRYAGAIN") == true {
            // Keys of one multi-key command are split between the two nodes of a slot being
            // migrated: route it afresh a little later.
            retried.wrappingAdd(1, ordering: .relaxed)
            return .later(Routed(index: entry.index, ask: nil))
        }
        guard attempt < Self.maxRedirects, let redirect = Redirect(reply) else { return nil }
        let target = Endpoint(host: redirect.host.isEmpty ? endpoint.host : redirect.host, port: redirect.port)
        if redirect.moved {
            moved.wrappingAdd(1, ordering: .relaxed)
            state.withLock { $0.assign(redirect.slot, to: target) }
            return .moved(Routed(index: entry.index, ask: nil))
        }
        asked.wrappingAdd(1, ordering: .relaxed)
        return .asked(Routed(index: entry.index, ask: target))
    }

    /// ``pipeline(_:scripts:)`` with text arguments.
    public func pipeline(_ commands: [[String]], scripts: [RedisScript] = []) async throws(RedisError) -> [RedisValue] {
        try await pipeline(commands.map { $0.map { Array($0.utf8) } }, scripts: scripts)
    }

    /// Runs `script` with `EVALSHA` on the primary owning its first key, loading it there
    /// first if that primary answers `NOSCRIPT`.
    @discardableResult
    public func evalsha(
        _ script: RedisScript,
        keys: [String] = [],
        args: [String] = []
    ) async throws(RedisError) -> RedisValue {
        var command = RedisCommands()
        command.evalsha(script, keys: keys.map { Array($0.utf8) }, arguments: args)
        let reply = try await pipeline(command, scripts: [script])[0]
        if case .error(let line) = reply { throw RedisError.server(line, command: "EVALSHA \(script.sha1)") }
        return reply
    }

    /// Loads a script on every primary, so that pipelines never meet `NOSCRIPT`.
    public func scriptLoad(_ source: String) async throws(RedisError) -> String {
        let primaries = state.withLock { $0.primaries }
        var groups: [Endpoint: [Routed]] = [:]
        for endpoint in primaries { groups[endpoint] = [Routed(index: 0, ask: nil)] }
        let script = RedisScript(source)
        var load = RedisCommands()
        load.scriptLoad(source)
        for (endpoint, _, outcome) in await sendParts(groups, commands: load, scripts: []) {
            switch outcome {
            case .failure(let error):
                drop(endpoint)
                throw error
            case .success(let replies):
                if case .error(let line) = replies[0] {
                    throw RedisError.server(line, command: "SCRIPT LOAD on \(endpoint)")
                }
            }
        }
        return script.sha1
    }

    /// Socket round trips made by all connections (see ``RedisConnection/roundTrips``).
    public var roundTrips: Int {
        state.withLock { $0.connections.values.reduce(0) { $0 + $1.roundTrips } }
    }

    /// `MOVED` replies followed so far (the slot map was out of date).
    public var movedRedirects: Int { moved.load(ordering: .relaxed) }

    /// `ASK` replies followed so far (a slot was being migrated).
    public var askRedirects: Int { asked.load(ordering: .relaxed) }

    /// Commands retried after `TRYAGAIN` so far.
    public var tryAgainRetries: Int { retried.load(ordering: .relaxed) }

    /// The primaries in the slot map, as `host:port`.
    public var primaries: [String] {
        state.withLock { $0.primaries.map(\.description) }
    }

    /// Closes every connection; later calls open them again.
    public func close() async {
        let connections = state.withLock { topology in
            defer { topology.connections = [:] }
            return Array(topology.connections.values)
        }
        for connection in connections { await connection.close() }
    }

    // MARK: - Slot map

    /// Reads `CLUSTER SLOTS` from the known primaries, then the seeds, and installs the map
    /// of the first node that answers.
    public func refreshSlots() async throws(RedisError) {
        var candidates = state.withLock { $0.primaries }
        for seed in seeds {
            let endpoint = Endpoint(host: seed.host, port: seed.port)
            if !candidates.contains(endpoint) { candidates.append(endpoint) }
        }
        var last: RedisError?
        for endpoint in candidates {
            do throws(RedisError) {
                let connection = try await connection(for: endpoint)
                let reply = try await connection.send(["CLUSTER", "SLOTS"])
                let map = try Self.parseSlots(reply, askedHost: endpoint.host)
                state.withLock { topology in
                    topology.slots = map.slots
                    topology.primaries = map.primaries
                }
                return
            } catch {
                if error.code != .server("ERR") { drop(endpoint) }
                last = error
            }
        }
        throw RedisError(
            .connection,
            "cannot read the slot map of the Redis Cluster from any of \(candidates.map(\.description).joined(separator: ", ")): "
                + (last?.message ?? "no node"),
            detail: last?.description
        )
    }

    /// Parses `CLUSTER SLOTS`: `[[start, end, [host, port, id, ...], replica...], ...]`.
    private static func parseSlots(
        _ reply: RedisValue,
        askedHost: String
    ) throws(RedisError) -> (slots: [Int], primaries: [Endpoint]) {
        var slots = Array(repeating: -1, count: RedisClusterSlot.count)
        var primaries: [Endpoint] = []
        for range in reply.array ?? [] {
            guard let fields = range.array, fields.count >= 3, let start = fields[0].int, let end = fields[1].int,
                let node = fields[2].array, node.count >= 2, let port = node[1].int,
                0 <= start, start <= end, end < RedisClusterSlot.count
            else {
                throw RedisError(
                    .protocol,
                    "the Redis Cluster answered CLUSTER SLOTS with an entry it cannot be read from: \(range)"
                )
            }
            let host = node[0].string.flatMap { $0.isEmpty || $0 == "?" ? nil : $0 } ?? askedHost
            let endpoint = Endpoint(host: host, port: Int(port))
            let index =
                primaries.firstIndex(of: endpoint)
                ?? {
                    primaries.append(endpoint)
                    return primaries.count - 1
                }()
            for slot in Int(start)...Int(end) { slots[slot] = index }
        }
        if primaries.isEmpty {
            throw RedisError(.server("CLUSTERDOWN"), "the Redis Cluster serves no slots (CLUSTER SLOTS is empty)")
        }
        return (slots, primaries)
    }

    // MARK: - Connections

    /// A command of the pipeline on its way: its index, and the `ASK` target if redirected.
    private struct Routed: Sendable {
        var index: Int
        var ask: Endpoint?
    }

    /// Sends each group to its endpoint, all in parallel; `ASK`ed commands go after `ASKING`.
    private func sendParts(
        _ groups: [Endpoint: [Routed]],
        commands: RedisCommands,
        scripts: [RedisScript]
    ) async -> [(Endpoint, [Routed], Result<[RedisValue], RedisError>)] {
        if groups.count == 1, let (endpoint, entries) = groups.first {
            return [(endpoint, entries, await sendPart(endpoint, entries, commands: commands, scripts: scripts))]
        }
        return await withTaskGroup(of: (Endpoint, [Routed], Result<[RedisValue], RedisError>).self) { group in
            for (endpoint, entries) in groups {
                group.addTask {
                    (endpoint, entries, await self.sendPart(endpoint, entries, commands: commands, scripts: scripts))
                }
            }
            var outcomes: [(Endpoint, [Routed], Result<[RedisValue], RedisError>)] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
    }

    private func sendPart(
        _ endpoint: Endpoint,
        _ entries: [Routed],
        commands: RedisCommands,
        scripts: [RedisScript]
    ) async -> Result<[RedisValue], RedisError> {
        do throws(RedisError) {
            let connection = try await connection(for: endpoint)
            var part: RedisCommands
            if entries.count == commands.count
                && entries.enumerated().allSatisfy({ $0.offset == $0.element.index && $0.element.ask == nil })
            {
                part = commands  // the whole pipeline, as it is
            } else {
                part = RedisCommands()
                for entry in entries {
                    if entry.ask != nil {
                        part.begin(.asking, arguments: 0)
                    }
                    part.append(commands, at: CollectionOfOne(entry.index))
                }
            }
            let replies = try await connection.pipeline(part, scripts: scripts)
            if part.count == entries.count { return .success(replies) }
            var mine: [RedisValue] = []
            mine.reserveCapacity(entries.count)
            var position = 0
            for entry in entries {
                if entry.ask != nil { position += 1 }
                mine.append(replies[position])
                position += 1
            }
            return .success(mine)
        } catch {
            return .failure(error)
        }
    }

    /// The connection to `endpoint`, opened with the seeds' settings when there is none.
    private func connection(for endpoint: Endpoint) async throws(RedisError) -> RedisConnection {
        if let existing = state.withLock({ $0.connections[endpoint] }) { return existing }
        var configuration = seeds[0]
        configuration.host = endpoint.host
        configuration.port = endpoint.port
        let connection = try await RedisConnection.connect(configuration)
        let winner = state.withLock { topology in
            if let existing = topology.connections[endpoint] { return existing }
            topology.connections[endpoint] = connection
            return connection
        }
        if winner !== connection { await connection.close() }
        return winner
    }

    /// Forgets the connection to `endpoint` (it is broken); the next use opens a new one.
    private func drop(_ endpoint: Endpoint) {
        state.withLock { _ = $0.connections.removeValue(forKey: endpoint) }
    }
}

/// A `MOVED <slot> <host>:<port>` or `ASK <slot> <host>:<port>` error reply.
private struct Redirect {
    var moved: Bool
    var slot: Int
    var host: String
    var port: Int

    init?(_ reply: RedisValue) {
        guard case .error(let line) = reply, line.hasPrefix("MOVED ") || line.hasPrefix("ASK ") else { return nil }
        let parts = line.split(separator: " ")
        guard parts.count == 3, let slot = Int(parts[1]), (0..<RedisClusterSlot.count).contains(slot),
            let colon = parts[2].lastIndex(of: ":"), let port = Int(parts[2][parts[2].index(after: colon)...])
        else { return nil }
        moved = parts[0] == "MOVED"
        self.slot = slot
        var host = String(parts[2][..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        self.host = host
        self.port = port
    }
}
