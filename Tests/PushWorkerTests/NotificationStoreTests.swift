import PushRedis
import PushTestSupport
import Testing

@testable import PushWorker

/// The notification records in a real `redis-server`: what a message consumed again after a
/// crash finds there.
@Suite struct NotificationStoreTests {
    private func request(_ resultId: String, offset: Int64) -> NotificationStore.ClaimRequest {
        .init(resultId: resultId, partition: 3, offset: offset, app: "com.example.app", environment: "production",
              token: String(repeating: "ab", count: 32), registeredAt: nil, appPerSecond: 0, devicePerHour: 0)
    }

    private func withStore(_ body: (NotificationStore) async throws -> Void) async throws {
        let server = try await RedisServerProcess.start()
        do {
            let redis = try await RedisConnection.connect(server.configuration())
            let store = NotificationStore(redis: redis, prefix: "test:", owner: "worker-1")
            try await store.prepare()
            try await body(store)
            await redis.close()
            await server.stop()
        } catch {
            await server.stop()
            throw error
        }
    }

    @Test func aRecordedOutcomeIsReturnedWithItsFeedbackResult() async throws {
        try await withStore { store in
            let result = Array(#"{"type":"transmissionError","status":410}"#.utf8)
            let feedback = Array(#"{"type":"feedback","timestamp":1700000000}"#.utf8)
            #expect(try await store.claim(topic: "apn.requests", [request("r1", offset: 7), request("r2", offset: 8)],
                                          ttlSeconds: 60, nowMilliseconds: 1_000) == [.send, .send])
            try await store.write(
                records: [.init(resultId: "r1", topic: "apn.requests", partition: 3, offset: 7, result: result, feedback: feedback),
                          .init(resultId: "r2", topic: "apn.requests", partition: 3, offset: 8, result: Array(#"{"type":"transmitted"}"#.utf8))],
                unregistered: [], released: [], ttlSeconds: 60)
            // The same messages consumed again (after a crash before the commit).
            let again = try await store.claim(topic: "apn.requests", [request("r1", offset: 7), request("r2", offset: 8)],
                                              ttlSeconds: 60, nowMilliseconds: 2_000)
            #expect(again == [.recorded(result: result, feedback: feedback),
                              .recorded(result: Array(#"{"type":"transmitted"}"#.utf8), feedback: nil)])
            // Another message with the same notification is a duplicate job.
            #expect(try await store.claim(topic: "apn.requests", [request("r1", offset: 9)], ttlSeconds: 60, nowMilliseconds: 3_000)
                    == [.duplicate])
        }
    }
}
