import Foundation
import PushConfiguration
import PushRedis
import Synchronization
import Testing

@testable import PushKafka
@testable import PushWorker

/// Admission by notifications: intake charges the in-flight budget as it expands each job, so
/// a batch of jobs with many tokens stops at the budget and the rest waits.
@Suite(.timeLimit(.minutes(1))) struct AdmissionTests {
    func intake() -> IntakeStage {
        let app = WorkerConfiguration.App(
            name: "a",
            bundleId: "a",
            defaultEnvironment: .production,
            environments: [
                .production: .init(name: .production, credentials: .pem(certificate: .file("/c"), key: .file("/k")))
            ]
        )
        let configuration = WorkerConfiguration(
            worker: .init(id: "w1"),
            kafka: .init(bootstrapServers: "127.0.0.1:9092"),
            redis: RedisConfiguration(),
            limits: .init(),
            apps: ["a": app]
        )
        return IntakeStage(
            configuration: configuration,
            factory: ResultFactory(worker: "w1", now: { 1_700_000_000_000 }),
            logger: .init(label: "test")
        )
    }

    /// A job of `tokens` tokens (the first `malformed` of them not hex: refused at once).
    static func job(_ n: Int, tokens: Int, malformed: Int = 0, partition: Int32 = 0) -> KafkaMessage {
        let list = (0..<tokens).map { t in
            t < malformed ? "\"zz\(t)\"" : "\"\(String(format: "%064x", n * 100_000 + t))\""
        }
        let value = #"{"id":"j\#(n)","app":"a","tokens":[\#(list.joined(separator: ","))],"alert":"hi"}"#
        return KafkaMessage(
            topic: "apn.requests",
            partition: partition,
            offset: Int64(n),
            key: nil,
            value: Array(value.utf8),
            headers: [],
            timestamp: 1_700_000_000_000
        )
    }

    /// The pipeline as intake sees it: what it holds in flight (every handed-on notification
    /// and result until a wait, which writes them all), the most it held, and the waits.
    final class Pipeline: Sendable {
        struct State {
            var inFlight = 0
            var most = 0
            var waits = 0
            var parsed = 0
            var revoked: Set<Int32> = []
        }
        let state = Mutex(State())
        let budget: Int

        init(budget: Int) { self.budget = budget }

        var admission: IntakeStage.Admission {
            IntakeStage.Admission(
                room: { [self] in budget - state.withLock { $0.inFlight } },
                wait: { [self] in
                    state.withLock { s in
                        s.waits += 1
                        s.inFlight = 0
                    }
                    return true
                },
                revoked: { [self] message in state.withLock { $0.revoked.contains(message.partition) } }
            )
        }

        func handOver(_ chunk: IntakeStage.Chunk) {
            state.withLock { s in
                s.inFlight += chunk.candidates.count + chunk.results.count
                s.most = max(s.most, s.inFlight)
                s.parsed += chunk.messages
            }
        }
    }

    @Test("a batch of jobs of 10,000 tokens stops at the budget; at most one job's tokens pass it")
    func aBatchOfLargeJobsStopsAtTheBudget() async {
        let messages = (0..<8).map { Self.job($0, tokens: 10_000, malformed: $0 == 3 ? 10_000 : 0) }
        let pipeline = Pipeline(budget: 25_000)
        var handoffs = IntakeStage.Handoffs()
        await intake().parse(messages, handoffs: &handoffs, admission: pipeline.admission) { pipeline.handOver($0) }
        let state = pipeline.state.withLock { $0 }
        #expect(state.parsed == 8)
        // 3 jobs spend the 25,000 (the third passes it by 5,000): 8 jobs take 2 waits, each after 3.
        #expect(state.waits == 2)
        #expect(state.most <= pipeline.budget + 10_000 - 1, "\(state.most)")
        #expect(state.most == 30_000)
    }

    @Test("refused tokens count like notifications: their results are charged too")
    func refusedTokensAreCharged() async {
        let messages = (0..<4).map { Self.job($0, tokens: 5_000, malformed: 5_000) }
        let pipeline = Pipeline(budget: 8_000)
        var handoffs = IntakeStage.Handoffs()
        await intake().parse(messages, handoffs: &handoffs, admission: pipeline.admission) { pipeline.handOver($0) }
        let state = pipeline.state.withLock { $0 }
        #expect(state.parsed == 4 && state.waits == 1 && state.most == 10_000)
    }

    @Test("after a wait, the messages of a partition revoked meanwhile are left to its next owner")
    func revokedWhileWaitingIsLeft() async {
        let messages = [Self.job(0, tokens: 10, partition: 0), Self.job(1, tokens: 10, partition: 1)]
        let pipeline = Pipeline(budget: 5)
        pipeline.state.withLock { $0.revoked = [1] }
        var handoffs = IntakeStage.Handoffs()
        var registered: [Int32] = []
        await intake().parse(messages, handoffs: &handoffs, admission: pipeline.admission) { chunk in
            pipeline.handOver(chunk)
            registered += chunk.registrations.map(\.0.partition.partition)
        }
        #expect(registered == [0])
    }

    @Test("the ledger's room: the budget less what is in flight besides the parked, and less the parked")
    func ledgerRoom() async throws {
        var ledger = PipelineLedger(maximum: 100)
        let ref = MessageRef(partition: TopicPartition(topic: "apn.requests", partition: 0), offset: 0)
        _ = ledger.registered([(ref, 70)])
        #expect(ledger.room == 30)
        try await PipelineLedgerTests.park(60, in: &ledger)
        #expect(ledger.room == 40)
        try await PipelineLedgerTests.park(30, in: &ledger)
        #expect(ledger.room == 10)
        ledger.close()
        #expect(ledger.room == .max)
    }
}
