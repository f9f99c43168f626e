import Foundation
import PushLocalStack
import PushTestSupport
import Testing

@testable import PushRedis

@Suite("Redis Cluster slots")
struct ClusterSlotTests {
    @Test("CRC16 key slots match Redis (CLUSTER KEYSLOT values) and hash tags group keys")
    func slots() {
        // Values from redis-server's CLUSTER KEYSLOT.
        #expect(RedisClusterSlot.of("foo") == 12182)
        #expect(RedisClusterSlot.of("bar") == 5061)
        #expect(RedisClusterSlot.of("123456789") == 12739)  // CRC16/XMODEM check value 0x31C3
        #expect(RedisClusterSlot.of("{user1000}.following") == RedisClusterSlot.of("user1000"))
        #expect(RedisClusterSlot.of("{user1000}.followers") == RedisClusterSlot.of("{user1000}.following"))
        #expect(RedisClusterSlot.of("foo{}{bar}") == RedisClusterSlot.of("foo{}{bar}"))  // empty tag: whole key
        #expect(RedisClusterSlot.of("foo{}{bar}") != RedisClusterSlot.of("bar"))
        #expect(RedisClusterSlot.of("foo{{bar}}zap") == RedisClusterSlot.of("{bar"))
        #expect(RedisClusterSlot.of("foo{bar}{zap}") == RedisClusterSlot.of("bar"))
        #expect(RedisClusterSlot.of(command: [Array("GET".utf8), Array("{a}x".utf8)]) == RedisClusterSlot.of("a"))
        let evalsha = RedisScript("return 1").evalshaCommand(keys: ["{t}k"], args: ["1"])
        #expect(RedisClusterSlot.of(command: evalsha) == RedisClusterSlot.of("t"))
        #expect(RedisClusterSlot.of(command: RedisScript("return 1").evalshaCommand()) == nil)
        #expect(RedisClusterSlot.of(command: [Array("PING".utf8)]) == nil)
    }
}

/// Starts a 3-primary, 3-replica cluster, runs `body`, and stops every node.
func withCluster<T>(
    nodeTimeout: Duration = .milliseconds(1000),
    _ body: (RedisClusterProcess) async throws -> T
) async throws -> T {
    let cluster = try await RedisClusterProcess.start(nodeTimeout: nodeTimeout)
    do {
        let result = try await body(cluster)
        await cluster.stop()
        return result
    } catch {
        await cluster.stop()
        throw error
    }
}

@Suite("Redis Cluster against real redis-server clusters", .serialized, .timeLimit(.minutes(3)))
struct ClusterTests {
    @Test("Commands, pipelines across primaries and scripts go to the slot's owner")
    func routing() async throws {
        try await withCluster { process in
            let cluster = try await RedisCluster.connect(seeds: [process.configuration(0)])
            #expect(cluster.primaries.count == 3)
            for index in 0..<50 { try await cluster.send(["SET", "key:\(index)", "v\(index)"]) }
            #expect(try await cluster.send(["GET", "key:7"]).string == "v7")

            let before = cluster.roundTrips
            let replies = try await cluster.pipeline((0..<50).map { ["GET", "key:\($0)"] })
            #expect(replies == (0..<50).map { .bulk(Array("v\($0)".utf8)) })
            #expect(cluster.roundTrips - before == 3)  // one round trip per primary

            // Every key is on the node that owns its slot: ask each node directly, without redirects.
            for index in 0..<50 {
                let key = "key:\(index)"
                var found = 0
                for node in process.nodes.indices {
                    let direct = try await RedisConnection.connect(process.configuration(node))
                    let role = try await direct.send(["ROLE"]).array?.first?.string
                    if role == "master", try await direct.pipeline([["GET", key]])[0] == .bulk(Array("v\(index)".utf8))
                    {
                        found += 1
                    }
                    await direct.close()
                }
                #expect(found == 1, "\(key) found on \(found) primaries")
            }

            // Hash tags keep a script's keys in one slot.
            let script = RedisScript("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])")
            #expect(try await cluster.scriptLoad(script.source) == script.sha1)
            let scripted = try await cluster.pipeline(
                (0..<30).map { script.evalshaCommand(keys: ["{job:\($0)}:a", "{job:\($0)}:n"], args: ["x"]) },
                scripts: [script]
            )
            #expect(scripted.allSatisfy { $0 == .integer(1) })
            let cross = try await cluster.pipeline([["MSET", "a", "1", "b", "2"]])
            #expect(cross[0].errorMessage?.hasPrefix("CROSSSLOT") == true)

            // NOSCRIPT after a flush on every primary: each part loads the script and resends.
            for node in process.nodes.indices {
                let direct = try await RedisConnection.connect(process.configuration(node))
                _ = try? await direct.send(["SCRIPT", "FLUSH"])
                await direct.close()
            }
            let again = try await cluster.pipeline(
                (0..<30).map { script.evalshaCommand(keys: ["{job:\($0)}:a", "{job:\($0)}:n"], args: ["x"]) },
                scripts: [script]
            )
            #expect(again.allSatisfy { $0 == .integer(2) })
        }
    }

    @Test(
        "A slot migrated mid-run (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE): ASK, MOVED and TRYAGAIN lose no command"
    )
    func slotMigration() async throws {
        try await withCluster { process in
            let cluster = try await RedisCluster.connect(seeds: process.seeds)
            let slot = RedisClusterSlot.of("m")
            let keys = (0..<20).map { "{m}:\($0)" }

            // Find the source (owner) and a target primary and their node ids.
            var primaries: [(index: Int, id: String, owns: Bool)] = []
            for node in process.nodes.indices {
                let direct = try await RedisConnection.connect(process.configuration(node))
                if try await direct.send(["ROLE"]).array?.first?.string == "master" {
                    let id = try await direct.send(["CLUSTER", "MYID"]).string ?? ""
                    let owner = try await direct.pipeline([
                        ["CLUSTER", "COUNTKEYSINSLOT", String(slot)], ["GET", "{m}:x"],
                    ])
                    primaries.append((node, id, owner[1].errorMessage?.hasPrefix("MOVED") != true))
                }
                await direct.close()
            }
            let source = try #require(primaries.first { $0.owns })
            let target = try #require(primaries.first { !$0.owns })
            let sourceConnection = try await RedisConnection.connect(process.configuration(source.index))
            let targetConnection = try await RedisConnection.connect(process.configuration(target.index))

            // Writers: INCR every key, and both ends of the key range in one script (keys split
            // between source and target meet TRYAGAIN), in pipelines, all through the migration.
            let rounds = 300
            let pair = RedisScript("redis.call('INCR', KEYS[1]); return redis.call('INCR', KEYS[2])")
            // Loaded up front on every primary: a NOSCRIPT would resend the INCRs of its part too.
            _ = try await cluster.scriptLoad(pair.source)
            let writer = Task {
                var failures: [String] = []
                for _ in 0..<rounds {
                    do {
                        let increments = keys.map { [Array("INCR".utf8), Array($0.utf8)] }
                        let both = pair.evalshaCommand(keys: ["{m}:pair-a", "{m}:pair-b"], args: [])
                        let replies = try await cluster.pipeline(increments + [both], scripts: [pair])
                        failures += replies.compactMap(\.errorMessage)
                    } catch {
                        failures.append("\(error)")
                    }
                }
                return failures
            }

            // Wait until the writer is under way, then migrate the slot key by key.
            let start = ContinuousClock.now
            while (try await sourceConnection.send(["GET", keys[0]]).int ?? 0) < 20,
                ContinuousClock.now - start < .seconds(10)
            {
                await Task.yield()
            }
            try await targetConnection.send(["CLUSTER", "SETSLOT", String(slot), "IMPORTING", source.id])
            try await sourceConnection.send(["CLUSTER", "SETSLOT", String(slot), "MIGRATING", target.id])
            let targetPort = String(process.nodes[target.index].port)
            // One of the script's two keys first: until the other follows, the script meets TRYAGAIN.
            try await sourceConnection.send(["MIGRATE", "127.0.0.1", targetPort, "", "0", "5000", "KEYS", "{m}:pair-a"])
            let split = ContinuousClock.now + .seconds(10)
            while cluster.tryAgainRetries == 0, ContinuousClock.now < split { await Task.yield() }
            var first = true
            while true {
                let batch =
                    try await sourceConnection.send(["CLUSTER", "GETKEYSINSLOT", String(slot), "5"]).array ?? []
                if batch.isEmpty { break }
                try await sourceConnection.send(
                    ["MIGRATE", "127.0.0.1", targetPort, "", "0", "5000", "KEYS"] + batch.compactMap(\.string)
                )
                if first {
                    // Some keys are at the target now: the writer's next pipeline meets ASK.
                    first = false
                    let deadline = ContinuousClock.now + .seconds(10)
                    while cluster.askRedirects == 0, ContinuousClock.now < deadline { await Task.yield() }
                }
            }
            for node in primaries {
                let direct = try await RedisConnection.connect(process.configuration(node.index))
                try await direct.send(["CLUSTER", "SETSLOT", String(slot), "NODE", target.id])
                await direct.close()
            }

            let failures = await writer.value
            #expect(failures.isEmpty, "\(failures.prefix(5))")
            #expect(cluster.askRedirects > 0)
            #expect(cluster.movedRedirects > 0)
            #expect(cluster.tryAgainRetries > 0)
            // Every INCR ran exactly once: each key holds the number of rounds, on the target.
            for key in keys + ["{m}:pair-a", "{m}:pair-b"] {
                #expect(try await targetConnection.send(["GET", key]).int == Int64(rounds))
            }
            #expect(try await cluster.send(["GET", keys[0]]).int == Int64(rounds))
            await sourceConnection.close()
            await targetConnection.close()
        }
    }

    @Test("A primary killed: its replica is promoted and commands resume on it")
    func failover() async throws {
        try await withCluster(nodeTimeout: .milliseconds(500)) { process in
            let cluster = try await RedisCluster.connect(seeds: process.seeds)
            let key = "{f}:counter"
            for _ in 0..<10 { try await cluster.send(["INCR", key]) }

            // The primary that owns the key's slot; WAIT there until its replica has the increments.
            var victim: Int?
            for node in process.nodes.indices {
                let direct = try await RedisConnection.connect(process.configuration(node))
                let replies = try await direct.pipeline([["ROLE"], ["GET", key]])
                if replies[0].array?.first?.string == "master", replies[1] == .bulk(Array("10".utf8)) {
                    victim = node
                    // The replica may still be making its first sync when the cluster reports
                    // ok: WAIT again until it has one, for at most 30 s.
                    try await direct.send(["SET", "{f}:marker", "1"])
                    let waitDeadline = ContinuousClock.now + .seconds(30)
                    var acknowledged: RedisValue = .integer(0)
                    while acknowledged != .integer(1), ContinuousClock.now < waitDeadline {
                        acknowledged = try await direct.send(["WAIT", "1", "1000"])
                    }
                    #expect(acknowledged == .integer(1), "the replica did not acknowledge within 30 s")
                }
                await direct.close()
            }
            let killed = try #require(victim)
            await process.nodes[killed].stop()

            // Commands fail until the replica takes over, then resume there.
            let deadline = ContinuousClock.now + .seconds(30)
            var value: Int64?
            var errors = 0
            while ContinuousClock.now < deadline {
                do {
                    value = try await cluster.send(["INCR", key]).int
                    break
                } catch {
                    errors += 1
                    try await Task.sleep(for: .milliseconds(50))  // poll interval, not synchronisation
                }
            }
            #expect(value == 11, "errors before the failover: \(errors)")
            #expect(!cluster.primaries.contains("127.0.0.1:\(process.nodes[killed].port)"))
        }
    }

    @Test("A TLS-only cluster (tls-cluster yes): slot map, routed pipelines and scripts over rediss://")
    func overTLS() async throws {
        let files = try TLSFiles()
        defer { files.remove() }
        let process = try await RedisClusterProcess.start(
            // The cluster bus always asks for a client certificate: the nodes present the client one.
            extraArguments: files.serverArguments(authClients: false) + [
                "--tls-cluster", "yes", "--tls-replication", "yes", "--tls-client-cert-file", files.clientCertificate,
                "--tls-client-key-file", files.clientKey,
            ],
            tls: RedisTLS(caFile: files.ca),
            cliArguments: ["--tls", "--cacert", files.ca]
        )
        do {
            let cluster = try await RedisCluster.connect(seeds: [process.configuration(0)])
            #expect(Set(cluster.primaries).isSubset(of: Set(process.nodes.map { "127.0.0.1:\($0.port)" })))
            #expect(cluster.primaries.count == 3)
            let replies = try await cluster.pipeline((0..<60).map { ["SET", "tls:\($0)", "\($0)"] })
            #expect(replies.allSatisfy { $0 == .simpleString("OK") })
            let values = try await cluster.pipeline((0..<60).map { ["GET", "tls:\($0)"] })
            #expect(values == (0..<60).map { .bulk(Array("\($0)".utf8)) })
            #expect(try await cluster.evalsha(lockScript, keys: ["{tls}:lock"], args: ["me", "60"]) == .integer(1))
        } catch {
            await process.stop()
            throw error
        }
        await process.stop()
    }
}
