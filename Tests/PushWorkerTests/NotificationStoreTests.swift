import PushKafka
import PushRedis
import PushTestSupport
import Testing

@testable import PushWorker

/// The notification records in a real `redis-server`: what a message consumed again after a
/// crash finds there.
@Suite struct NotificationStoreTests {
    private func request(_ resultId: String, offset: Int64) -> NotificationStore.ClaimRequest {
        .init(
            resultId: resultId, partition: 3, offset: offset, app: "com.example.app", environment: "production",
            token: String(repeating: "ab", count: 32), registeredAt: nil, appPerSecond: 0, devicePerHour: 0)
    }

    private func withStore(_ body: (NotificationStore) async throws -> Void) async throws {
        try await withServer { server in
            let redis = try await RedisConnection.connect(server.configuration())
            let store = NotificationStore(redis: redis, prefix: "test:", owner: "worker-1")
            try await store.prepare()
            try await body(store)
            await redis.close()
        }
    }

    private func withServer(_ body: (RedisServerProcess) async throws -> Void) async throws {
        let server = try await RedisServerProcess.start()
        do {
            try await body(server)
            await server.stop()
        } catch {
            await server.stop()
            throw error
        }
    }

    @Test("the feedback lock: one worker at a time polls an app's feedback, until the lock expires")
    func feedbackLockIsExclusiveAndExpires() async throws {
        try await withServer { server in
            let a = NotificationStore(redis: try await RedisConnection.connect(server.configuration()), prefix: "test:", owner: "worker-a")
            let b = NotificationStore(redis: try await RedisConnection.connect(server.configuration()), prefix: "test:", owner: "worker-b")
            #expect(try await a.tryFeedbackLock(app: "com.example.app", environment: "production", ttlMilliseconds: 60_000))
            #expect(try await !b.tryFeedbackLock(app: "com.example.app", environment: "production", ttlMilliseconds: 60_000))
            #expect(try await !a.tryFeedbackLock(app: "com.example.app", environment: "production", ttlMilliseconds: 60_000))
            // Another environment (or app) has a lock of its own.
            #expect(try await b.tryFeedbackLock(app: "com.example.app", environment: "sandbox", ttlMilliseconds: 60_000))
            // The lock carries its expiry, so a worker that dies holding it does not stop polling for good.
            let key = "test:fl:com.example.app:production"
            let ttl = try await a.redis.send(["PTTL", key]).int ?? -1
            #expect(ttl > 0 && ttl <= 60_000)
            // Once it has expired, the other worker takes it.
            _ = try await a.redis.send(["PEXPIRE", key, "1"])
            let deadline = ContinuousClock.now + .seconds(5)
            while try await a.redis.send(["EXISTS", key]).int == 1, ContinuousClock.now < deadline {
                await Task.yield()
            }
            #expect(try await b.tryFeedbackLock(app: "com.example.app", environment: "production", ttlMilliseconds: 60_000))
            await a.redis.close()
            await b.redis.close()
        }
    }

    @Test func aRecordedOutcomeIsReturnedWithItsFeedbackResult() async throws {
        try await withStore { store in
            let result = Array(#"{"type":"transmissionError","status":410}"#.utf8)
            let feedback = Array(#"{"type":"feedback","timestamp":1700000000}"#.utf8)
            #expect(
                try await store.claim(
                    topic: "apn.requests", [request("r1", offset: 7), request("r2", offset: 8)],
                    ttlSeconds: 60, nowMilliseconds: 1_000) == [.send, .send])
            try await store.write(
                records: [
                    .init(resultId: "r1", topic: "apn.requests", partition: 3, offset: 7, result: result, feedback: feedback),
                    .init(resultId: "r2", topic: "apn.requests", partition: 3, offset: 8, result: Array(#"{"type":"transmitted"}"#.utf8)),
                ],
                unregistered: [], released: [], ttlSeconds: 60)
            // The same messages consumed again (after a crash before the commit).
            let again = try await store.claim(
                topic: "apn.requests", [request("r1", offset: 7), request("r2", offset: 8)],
                ttlSeconds: 60, nowMilliseconds: 2_000)
            #expect(
                again == [
                    .recorded(result: result, feedback: feedback),
                    .recorded(result: Array(#"{"type":"transmitted"}"#.utf8), feedback: nil),
                ])
            // Another message with the same notification is a duplicate job.
            #expect(
                try await store.claim(topic: "apn.requests", [request("r1", offset: 9)], ttlSeconds: 60, nowMilliseconds: 3_000)
                    == [.duplicate])
        }
    }

    @Test func aRecordedOutcomeBeforeItsPartitionsWrittenPositionNeedsNoResultAgain() async throws {
        try await withStore { store in
            let result = Array(#"{"type":"transmitted"}"#.utf8)
            #expect(
                try await store.claim(
                    topic: "apn.requests", [request("r1", offset: 7), request("r2", offset: 8)],
                    ttlSeconds: 60, nowMilliseconds: 1_000) == [.send, .send])
            // Both recorded; every result before offset 8 of partition 3 is written.
            try await store.write(
                records: [
                    .init(resultId: "r1", topic: "apn.requests", partition: 3, offset: 7, result: result),
                    .init(resultId: "r2", topic: "apn.requests", partition: 3, offset: 8, result: result),
                ],
                unregistered: [], released: [],
                positions: [TopicPartitionOffset(topic: "apn.requests", partition: 3, offset: 8)], ttlSeconds: 60)
            // Consumed again by the partition's next owner: the first needs nothing, the second's
            // result may not have been written yet, so it is produced again.
            let again = try await store.claim(
                topic: "apn.requests", [request("r1", offset: 7), request("r2", offset: 8)],
                ttlSeconds: 60, nowMilliseconds: 2_000)
            #expect(again == [.written, .recorded(result: result, feedback: nil)])
            // A new owner that starts behind it does not move the position back.
            try await store.write(
                records: [], unregistered: [], released: [],
                positions: [TopicPartitionOffset(topic: "apn.requests", partition: 3, offset: 2)], ttlSeconds: 60)
            #expect(
                try await store.claim(topic: "apn.requests", [request("r1", offset: 7)], ttlSeconds: 60, nowMilliseconds: 3_000)
                    == [.written])
        }
    }
}
