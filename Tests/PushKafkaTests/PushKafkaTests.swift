import PushKafka
import PushKafkaEmbedded
import Testing

@Suite(.timeLimit(.minutes(3)))
struct PushKafkaTests {
    @Test func batchProduceThenConsumeRoundTrip() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 3)
        let topic = uniqueName("round-trip")
        try cluster.createTopic(topic, partitions: 4)
        let producer = try KafkaProducer(configuration: producerConfiguration(cluster))
        let outgoing = (0..<1000).map { i in
            KafkaOutgoingMessage(
                topic: topic,
                key: bytes("key-\(i)"),
                value: bytes("value-\(i)"),
                headers: [KafkaHeader("index", bytes("\(i)")), KafkaHeader("empty", [])]
            )
        }

        let reports = try await producer.send(outgoing).map { try $0.get() }
        #expect(reports.count == 1000)
        #expect(
            Set(reports.map { TopicPartitionOffset(topic: $0.topic, partition: $0.partition, offset: $0.offset) }).count
                == 1000
        )
        for (partition, offsets) in Dictionary(grouping: reports, by: \.partition) {
            #expect(offsets.map(\.offset).sorted() == Array(0..<Int64(offsets.count)), "partition \(partition)")
        }
        await producer.close()

        let consumer = try KafkaConsumer(configuration: consumerConfiguration(cluster, group: uniqueName("group")))
        try consumer.subscribe(topics: [topic])
        let messages = try await consume(consumer, count: 1000)
        #expect(messages.count == 1000)
        let byKey = Dictionary(
            uniqueKeysWithValues: messages.map { (String(decoding: $0.key ?? [], as: UTF8.self), $0) }
        )
        for i in 0..<1000 {
            let message = try #require(byKey["key-\(i)"])
            #expect(message.topic == topic)
            #expect(message.value == bytes("value-\(i)"))
            #expect(message.headers == [KafkaHeader("index", bytes("\(i)")), KafkaHeader("empty", [])])
            #expect(message.timestamp != nil)
            let report = reports[i]
            #expect(message.partition == report.partition && message.offset == report.offset)
        }
        try await consumer.close()
    }

    @Test func committedOffsetIsWhereTheGroupResumes() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        let topic = uniqueName("commit")
        let group = uniqueName("group")
        try cluster.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(configuration: producerConfiguration(cluster))
        for result in try await producer.send(
            (0..<100).map { KafkaOutgoingMessage(topic: topic, key: nil, value: bytes("\($0)")) }
        ) {
            _ = try result.get()
        }
        let partition = TopicPartition(topic: topic, partition: 0)

        let first = try KafkaConsumer(configuration: consumerConfiguration(cluster, group: group))
        try first.subscribe(topics: [topic])
        let messages = try await consume(first, count: 100)
        #expect(messages.map(\.offset) == Array(0..<100))
        try await first.commit([messages[50].nextOffset])
        #expect(try await first.committed([partition]) == [TopicPartitionOffset(partition, offset: 51)])
        try await first.close()

        let second = try KafkaConsumer(configuration: consumerConfiguration(cluster, group: group))
        try second.subscribe(topics: [topic])
        let resumed = try await consume(second, count: 1)
        #expect(resumed.first?.offset == 51)
        #expect(resumed.first?.value == bytes("51"))
        #expect(try await second.committed([partition]) == [TopicPartitionOffset(partition, offset: 51)])
        try await second.close()
    }

    @Test func aCommitThatGetsNoAnswerGivesUpAtItsTimeout() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        let topic = uniqueName("silent")
        try cluster.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(configuration: producerConfiguration(cluster))
        for result in try await producer.send([KafkaOutgoingMessage(topic: topic, key: nil, value: bytes("x"))]) {
            _ = try result.get()
        }
        let consumer = try KafkaConsumer(configuration: consumerConfiguration(cluster, group: uniqueName("group")))
        try consumer.subscribe(topics: [topic])
        let messages = try await consume(consumer, count: 1)
        // The coordinator answers a minute late (as one that waits on a rebalance may never do).
        try cluster.setRoundTripTime(broker: 1, .seconds(60))
        let started = ContinuousClock.now
        let error = #expect(throws: KafkaError.self) {
            try consumer.commitBlocking([messages[0].nextOffset], timeout: .milliseconds(500))
        }
        #expect(error?.name == "_TIMED_OUT", "\(String(describing: error))")
        #expect(ContinuousClock.now - started < .seconds(10), "the commit waited for the late answer")
        try cluster.setRoundTripTime(broker: 1, .zero)
        cluster.shutdown()
    }

    /// Follows a member's rebalance events, completing each deferred revocation; returns the
    /// task and what it saw.
    func follow(_ consumer: KafkaConsumer) -> (Task<Void, Never>, Recorder<KafkaRebalanceEvent>) {
        let events = Recorder<KafkaRebalanceEvent>()
        let task = Task {
            for await event in consumer.rebalanceEvents {
                events.append(event)
                if case .revoking(let partitions, _, _) = event { await consumer.completeRevocation(partitions) }
            }
        }
        return (task, events)
    }

    @Test func cooperativeRebalanceAcrossTwoMembers() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 2)
        let (topic, group, all) = try fourPartitionTopic(on: cluster, "rebalance")

        let a = try KafkaConsumer(configuration: consumerConfiguration(cluster, group: group), revocation: .deferred)
        let b = try KafkaConsumer(configuration: consumerConfiguration(cluster, group: group), revocation: .deferred)
        let (drainA, eventsA) = follow(a)
        let (drainB, eventsB) = follow(b)
        func hasAssigned(_ events: Recorder<KafkaRebalanceEvent>) -> Bool {
            events.all.contains { if case .assigned = $0 { true } else { false } }
        }
        func revoking(_ events: Recorder<KafkaRebalanceEvent>) -> [[TopicPartition]] {
            events.all.compactMap { if case .revoking(let partitions, _, _) = $0 { partitions } else { nil } }
        }
        func revoked(_ events: Recorder<KafkaRebalanceEvent>) -> [[TopicPartition]] {
            events.all.compactMap { if case .revoked(let partitions) = $0 { partitions } else { nil } }
        }
        try a.subscribe(topics: [topic])
        try await pollUntil(a, owns: all, "A, alone in the group, owns all partitions")

        try b.subscribe(topics: [topic])
        try await waitUntil("both members assigned, all partitions covered exactly once") {
            _ = try await a.poll(timeout: .milliseconds(100))
            _ = try await b.poll(timeout: .milliseconds(100))
            let (assignedA, assignedB) = (try a.assignment(), try b.assignment())
            return hasAssigned(eventsA) && hasAssigned(eventsB) && !assignedA.isEmpty && !assignedB.isEmpty
                && assignedA.count + assignedB.count == 4 && Set(assignedA).union(assignedB) == all
        }
        let finalA = Set(try a.assignment())
        // Cooperative: A gave up only what B took, and kept the rest without a full revoke.
        #expect(revoking(eventsA).map(Set.init) == [all.subtracting(finalA)])
        #expect(revoked(eventsA) == revoking(eventsA), "each deferred revocation is reported once completed")

        try await a.close()
        // Closing finishes A's events; the follower has recorded every one once it ends.
        await drainA.value
        // Closing revokes at once, without waiting for anyone.
        #expect(finalA.isSubset(of: Set(revoked(eventsA).joined())), "A's partitions were revoked when A left")
        try await pollUntil(b, owns: all, "B owns all partitions after A left")
        try await b.close()
        await drainB.value
        #expect(
            eventsB.all.contains {
                if case .assigned(let partitions) = $0 { !Set(partitions).isDisjoint(with: finalA) } else { false }
            },
            "B was incrementally assigned A's former partitions"
        )
    }

    /// A deferred revocation leaves the partitions assigned, and their messages unreturned, until
    /// it is completed; the group's rebalance waits for it.
    @Test func aDeferredRevocationHoldsThePartitionsUntilItIsCompleted() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        let (topic, group, all) = try fourPartitionTopic(on: cluster, "deferred")
        let producer = try KafkaProducer(configuration: producerConfiguration(cluster))
        // The embedded coordinator waits for a member's rejoin up to a second short of the
        // session timeout, then rebalances without it: the revocation is held below for a few
        // seconds of polling, which a loaded machine stretches past the usual 6 s.
        var configuration = consumerConfiguration(cluster, group: group)
        configuration.sessionTimeout = .seconds(20)

        let a = try KafkaConsumer(configuration: configuration, revocation: .deferred)
        let events = Recorder<KafkaRebalanceEvent>()
        let drain = Task { for await event in a.rebalanceEvents { events.append(event) } }
        try a.subscribe(topics: [topic])
        try await pollUntil(a, owns: all, "A owns all partitions")

        let b = try KafkaConsumer(configuration: configuration)
        try b.subscribe(topics: [topic])
        var revoking: [TopicPartition] = []
        try await waitUntil("A is asked to give partitions up") {
            _ = try await a.poll(timeout: .milliseconds(100))
            _ = try await b.poll(timeout: .milliseconds(100))
            revoking =
                events.all.compactMap { if case .revoking(let partitions, _, _) = $0 { partitions } else { nil } }.first
                ?? []
            return !revoking.isEmpty
        }
        // Not completed: still A's, nothing of them is returned, and B gets none of them.
        _ = try await producer.send(
            (0..<40).map { KafkaOutgoingMessage(topic: topic, key: bytes("k\($0)"), value: bytes("v")) }
        )
        var seen: [KafkaMessage] = []
        for _ in 0..<20 {
            seen += try await a.poll(timeout: .milliseconds(100))
            _ = try await b.poll(timeout: .milliseconds(100))
        }
        #expect(Set(revoking).isSubset(of: Set(try a.assignment())), "the revoking partitions are still A's")
        #expect(Set(try b.assignment()).isDisjoint(with: revoking), "B got a partition A still holds")
        #expect(!seen.contains { revoking.contains(TopicPartition(topic: $0.topic, partition: $0.partition)) })
        #expect(!events.all.contains { if case .revoked = $0 { true } else { false } })

        await a.completeRevocation(revoking)
        #expect(Set(try a.assignment()).isDisjoint(with: revoking))
        try await waitUntil("B is assigned what A gave up") {
            _ = try await a.poll(timeout: .milliseconds(100))
            _ = try await b.poll(timeout: .milliseconds(100))
            return Set(revoking).isSubset(of: Set(try b.assignment()))
        }
        #expect(events.all.contains(.revoked(revoking)))
        try await b.close()
        // The embedded coordinator holds a rejoin up to a second short of the session timeout
        // while it waits for the member that left: A closes once that rebalance is over, not
        // in the middle of its JoinGroup.
        try await pollUntil(a, owns: all, "A owns all partitions again after B left")
        try await a.close()
        await drain.value
        await producer.close()
        cluster.shutdown()
    }

    /// Each message carries the rebalance generation it was returned at; each rebalance
    /// callback, the revocation on close too, moves the generation on.
    @Test func messagesCarryTheRebalanceGenerationTheyWereFetchedAt() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        let (topic, group, all) = try fourPartitionTopic(on: cluster, "generation")
        let producer = try KafkaProducer(configuration: producerConfiguration(cluster))
        _ = try await producer.send(
            (0..<8).map { KafkaOutgoingMessage(topic: topic, key: bytes("\($0)"), value: bytes("v")) }
        )
        await producer.close()

        let member = try KafkaConsumer(configuration: consumerConfiguration(cluster, group: group))
        #expect(member.rebalanceGeneration == 0)
        try member.subscribe(topics: [topic])
        let messages = try await consume(member, count: 8)
        let assigned = member.rebalanceGeneration
        #expect(assigned >= 1, "the assignment is a rebalance callback")
        #expect(Set(try member.assignment()) == all)
        #expect(messages.allSatisfy { $0.rebalanceGeneration == assigned }, "\(messages.map(\.rebalanceGeneration))")

        try await member.close()
        let revoked = member.revocations
        #expect(Set(revoked.keys) == all)
        #expect(revoked.values.allSatisfy { $0 > assigned }, "each revocation has its own generation")
        #expect(member.current(messages).dropped == messages.count, "what was fetched before the revocation is stale")
        cluster.shutdown()
    }

    /// What librdkafka 2.0.2's mock cluster does with static membership (`group.instance.id`),
    /// recorded in docs/architecture.md. A real broker hands a restarted static member its
    /// partitions back without waiting; this one does not know static members: the restart
    /// is a new member, and the predecessor (which left without a LeaveGroup, as static members
    /// do) keeps its partitions until its session times out. A characterization: it fails, and
    /// says so, if a later librdkafka honours static membership.
    @Test func theEmbeddedBrokerWaitsForARestartedStaticMembersPredecessorToTimeOut() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        let (topic, group, all) = try fourPartitionTopic(on: cluster, "static")
        var configuration = consumerConfiguration(cluster, group: group)
        configuration.properties["group.instance.id"] = "worker-0"

        let first = try KafkaConsumer(configuration: configuration)
        try first.subscribe(topics: [topic])
        try await pollUntil(first, owns: all, "the static member owns every partition")
        try await first.close()
        let closed = ContinuousClock.now

        let second = try KafkaConsumer(configuration: configuration)
        try second.subscribe(topics: [topic])
        try await pollUntil(second, owns: all, "the restarted static member owns every partition")
        let waited = ContinuousClock.now - closed
        // The predecessor's session (6 s) had to expire first: not honoured.
        #expect(
            waited >= .seconds(5),
            "the embedded broker now honours static membership (\(waited)); update docs/architecture.md"
        )
        try await second.close()
    }

    /// What librdkafka 2.0.2's mock cluster does when a member joins a group whose members are
    /// all alive, recorded in docs/architecture.md: each round of the rebalance ends only after
    /// `session.timeout.ms` − 1 s (5 s here), although the member already there rejoins within a
    /// heartbeat (500 ms); and a cooperative move takes two rounds, the first revoking what
    /// moves, the second assigning it. A real broker ends each round as soon as every known
    /// member has rejoined. These waits are part of every hand-over `bench-failover` measures.
    /// A characterization: it fails, and says so, if a later librdkafka ends a round early.
    @Test func theEmbeddedBrokerWaitsASessionTimeoutLessASecondInEachRoundOfARebalance() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        let (topic, group, all) = try fourPartitionTopic(on: cluster, "join")

        let revoked = Recorder<ContinuousClock.Instant>()
        let lost = Recorder<Bool>()
        let first = try KafkaConsumer(
            configuration: consumerConfiguration(cluster, group: group),
            revocation: .deferred
        )
        let drain = Task {
            for await event in first.rebalanceEvents {
                guard case .revoking(let partitions, _, let wasLost) = event else { continue }
                revoked.append(.now)
                lost.append(wasLost)
                await first.completeRevocation(partitions)
            }
        }
        try first.subscribe(topics: [topic])
        try await pollUntil(first, owns: all, "the first member owns every partition")

        let second = try KafkaConsumer(configuration: consumerConfiguration(cluster, group: group))
        let joined = ContinuousClock.now
        try second.subscribe(topics: [topic])
        try await waitUntil("the second member is assigned partitions") {
            _ = try await first.poll(timeout: .milliseconds(100))
            _ = try await second.poll(timeout: .milliseconds(100))
            return !(try second.assignment()).isEmpty
        }
        let assigned = ContinuousClock.now
        let revocation = try #require(revoked.all.first, "the first member gave up no partition")
        // Handed over to a member that joined: not lost.
        #expect(lost.all.first == false)
        #expect(
            revocation - joined >= .milliseconds(4500),
            "the embedded broker now ends the revoking round early (\(revocation - joined)); update docs/architecture.md"
        )
        // The revocation's time is when the drain task saw it, which a loaded machine delays:
        // the second round is checked through the whole rebalance, two rounds from the join.
        #expect(
            assigned - joined >= .milliseconds(9000),
            "the embedded broker now ends the assigning round early (\(assigned - joined) both rounds); update docs/architecture.md"
        )
        try await second.close()
        // As in the test above: the first member closes once the rebalance after the second
        // left is over.
        try await pollUntil(first, owns: all, "the first member owns every partition again")
        try await first.close()
        await drain.value
        cluster.shutdown()
    }

    @Test func invalidPropertyIsNamedInTheError() throws {
        do {
            _ = try KafkaProducer(configuration: KafkaConfiguration(["no.such.property": "1"]))
            Issue.record("expected an error")
        } catch {
            #expect(error.message.contains("no.such.property"))
            #expect(error.name == "_INVALID_ARG")
        }
        do {
            _ = try KafkaConsumer(configuration: KafkaConfiguration(["group.id": "g", "session.timeout.ms": "soon"]))
            Issue.record("expected an error")
        } catch {
            #expect(error.message.contains("session.timeout.ms"))
        }
    }

    @Test func sendToUnreachableBrokerTimesOut() async throws {
        var configuration = KafkaConfiguration(["bootstrap.servers": "127.0.0.1:1"])
        configuration.messageTimeout = .seconds(2)
        let producer = try KafkaProducer(configuration: configuration)
        do {
            _ = try await producer.send(topic: "nowhere", key: bytes("k"), value: bytes("v"))
            Issue.record("expected the send to fail")
        } catch {
            #expect(error.name == "_MSG_TIMED_OUT")
            #expect(error.isRetriable)
            #expect(!error.isFatal)
        }
    }

    @Test func fullLocalQueueAppliesBackpressure() async throws {
        let cluster = try EmbeddedKafkaCluster(brokers: 1)
        let topic = uniqueName("backpressure")
        try cluster.createTopic(topic, partitions: 2)
        let producer = try KafkaProducer(
            configuration: producerConfiguration(cluster, ["queue.buffering.max.messages": "20"])
        )
        let results = try await producer.send(
            (0..<2000).map { KafkaOutgoingMessage(topic: topic, key: bytes("\($0)"), value: bytes("v")) }
        )
        #expect(results.allSatisfy { (try? $0.get()) != nil })
        let single = try await producer.send(topic: topic, partition: 1, key: nil, value: bytes("last"))
        #expect(single.partition == 1)
        await producer.close()
        await #expect(throws: KafkaError.self) { try await producer.send(topic: topic, key: nil, value: []) }
    }
}
