import APNSCore
import Testing

@testable import APNSHTTP2

/// The HTTP/2 client and ``APNSLatestWins``: a queued Live Activity update whose activity has a
/// newer one is answered `superseded` when its turn comes, never written; the priority chosen
/// for an update is the one sent.
@Suite struct ClientLatestWinsTests {
    @Test("Of three queued updates of one activity only the newest is written, at the priority chosen for it")
    func onlyTheNewestIsWritten() async throws {
        let simulator = try await ClientHarness.simulator { _ in }
        let client = try ClientHarness.tokenClient(port: simulator.port) { $0.maxConnections = 1 }
        let table = APNSLatestWins()
        let activity = ClientHarness.token(1)
        var submissions: [APNSSubmission] = []
        for (tag, timestamp) in [(0, 10), (1, 30), (2, 20)] {
            var submission = APNSSubmission(
                tag: UInt64(tag),
                token: activity,
                notification: ClientHarness.notification()
            )
            submission.activity = table.enter(
                "a",
                mark: APNSActivityMark(end: false, timestamp: Int64(timestamp)),
                jobID: "job-\(timestamp)"
            )
            submissions.append(submission)
        }
        submissions[1].activity?.priority = 5
        // Another device's notification, without a ticket, goes as always.
        submissions.append(
            APNSSubmission(tag: 3, token: ClientHarness.token(2), notification: ClientHarness.notification())
        )
        let run = try await ClientHarness.run(client, submissions)
        let accepted = simulator.accepted
        await simulator.stop()

        #expect(run.outcomes.count == 4)
        for tag: UInt64 in [0, 2] {
            #expect(run.outcomes[tag]?.status == .superseded)
            #expect(run.outcomes[tag]?.message?.contains("job job-30") == true)
            #expect(run.outcomes[tag]?.attempts == 0)
        }
        #expect(run.outcomes[1]?.isTransmitted == true)
        #expect(run.outcomes[3]?.isTransmitted == true)
        #expect(accepted.filter { $0.token == activity }.map(\.priority) == [5])
        #expect(accepted.filter { $0.token == ClientHarness.token(2) }.map(\.priority) == [10])
    }
}
