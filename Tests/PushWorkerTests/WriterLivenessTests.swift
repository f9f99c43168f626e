import Testing

@testable import PushWorker

/// When the result writer counts as stuck for `/health/live`: results pending and no attempt to
/// write them for a minute, unless an attempt is waiting for Kafka's acknowledgements (an
/// outage, which ends each attempt after `message.timeout.ms`).
@Suite struct WriterLivenessTests {
    func stuck(idle seconds: Int64, pending: Bool = true, producing: Bool = false) -> Duration? {
        ResultStage.stuck(
            idle: .seconds(seconds),
            pending: pending,
            producing: producing,
            limit: .seconds(60),
            acknowledgementWait: .seconds(300)
        )
    }

    @Test func aWriterWithResultsPendingAndNoAttemptForAMinuteIsStuck() {
        #expect(stuck(idle: 59) == nil)
        #expect(stuck(idle: 61) == .seconds(61))
        #expect(stuck(idle: 600, pending: false) == nil)
    }

    @Test func aWriterWaitingForKafkasAcknowledgementsIsNotStuckUntilTheMessageTimeoutPasses() {
        #expect(stuck(idle: 120, producing: true) == nil)
        #expect(stuck(idle: 359, producing: true) == nil)
        #expect(stuck(idle: 361, producing: true) == .seconds(361))
    }
}
