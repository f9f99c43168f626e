import APNSCore
import APNSHTTP2
import Foundation
import PushRedis
import Testing

@testable import PushWorker

/// The Live Activity and channel state in Redis (`NotificationStore+LiveActivities.swift`,
/// `+Channels.swift`), on a real `redis-server` and a real Redis Cluster: the newest accepted
/// update per activity, which an older one never replaces; the hourly priority-10 count; the
/// channel registry.
@Suite(.timeLimit(.minutes(3))) struct LiveActivityStoreTests {
    private func withStore(_ backend: StoreBackend, _ body: (NotificationStore) async throws -> Void) async throws {
        try await backend.withClients(1) { clients in
            let store = NotificationStore(redis: clients[0], prefix: "test:", owner: "worker-1")
            try await store.prepare()
            try await body(store)
        }
    }

    static func accepted(_ target: String, end: Bool = false, _ timestamp: Int64, job: String) -> AcceptedActivity {
        AcceptedActivity(
            app: "scores",
            environment: "production",
            target: target,
            mark: APNSActivityMark(end: end, timestamp: timestamp),
            jobId: job,
            ttlSeconds: 60
        )
    }

    @Test(
        "The newest accepted update is kept: an older one does not replace it, an end does",
        arguments: StoreBackend.allCases
    )
    func newestAcceptedUpdate(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let (a, b, c) = (String(repeating: "a", count: 64), String(repeating: "b", count: 64), "Y2hhbm5lbA==")
            var commands = RedisCommands(capacity: 1024)
            store.appendAccepted(
                [Self.accepted(a, 20, job: "j20"), Self.accepted(a, 10, job: "j10"), Self.accepted(c, 5, job: "c5")],
                to: &commands
            )
            _ = try await store.redis.pipeline(commands, scripts: [NotificationStore.Scripts.keepNewestActivity])
            var found = try await store.acceptedActivities([
                ("scores", "production", a), ("scores", "production", b), ("scores", "production", c),
            ])
            #expect(found[0]?.jobId == "j20" && found[0]?.mark == APNSActivityMark(end: false, timestamp: 20))
            #expect(found[1] == nil)
            #expect(found[2]?.jobId == "c5")
            commands = RedisCommands(capacity: 1024)
            store.appendAccepted([Self.accepted(a, end: true, 1, job: "end")], to: &commands)
            _ = try await store.redis.pipeline(commands, scripts: [NotificationStore.Scripts.keepNewestActivity])
            found = try await store.acceptedActivities([("scores", "production", a)])
            #expect(found[0]?.jobId == "end" && found[0]?.mark.rank == 1)
        }
    }

    @Test("Priority-10 counts go up per activity, each on its own", arguments: StoreBackend.allCases)
    func highPriorityCounts(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            let a = ("scores", "production", String(repeating: "a", count: 64))
            let b = ("scores", "production", String(repeating: "b", count: 64))
            let first = try await store.countHighPriority([a, a, b])
            #expect(first == [1, 2, 1])
            let again = try await store.countHighPriority([a])
            #expect(again == [3])
        }
    }

    @Test("The channel registry: created with their policies, deleted, counted", arguments: StoreBackend.allCases)
    func channelRegistry(_ backend: StoreBackend) async throws {
        try await withStore(backend) { store in
            try await store.recordChannels([
                ChannelRecord(app: "scores", environment: "production", channel: "one", policy: .mostRecent),
                ChannelRecord(
                    app: "scores",
                    environment: "production",
                    channel: "two",
                    policy: APNSChannelStoragePolicy.none
                ),
                ChannelRecord(app: "scores", environment: "sandbox", channel: "three", policy: .mostRecent),
            ])
            let policies = try await store.channelPolicies(
                app: "scores",
                environment: "production",
                channels: ["one", "two", "x"]
            )
            #expect(policies == [.mostRecent, APNSChannelStoragePolicy.none, nil])
            try await store.recordChannels([
                ChannelRecord(app: "scores", environment: "production", channel: "one", policy: nil)
            ])
            let counts = try await store.channelCounts([
                ("scores", "production"), ("scores", "sandbox"), ("news", "production"),
            ])
            #expect(counts == [1, 1, 0])
        }
    }
}
