import APNSCore
import Testing

@Test func poolSnapshotReasonsAreTheMetricLabelValues() {
    #expect(APNSPoolSnapshot.ConnectFailure.allCases.map(\.rawValue) == ["tls", "refused", "timeout", "other"])
    #expect(
        APNSPoolSnapshot.CloseReason.allCases.map(\.rawValue) == [
            "errorResponse", "silentClose", "goaway", "idle", "shutdown", "other",
        ]
    )
}

@Test func aPoolSnapshotCountsEachReasonItSaw() {
    var snapshot = APNSPoolSnapshot()
    #expect(snapshot.connectFailures.isEmpty && snapshot.connectionsClosed.isEmpty)
    snapshot.count(APNSPoolSnapshot.ConnectFailure.refused)
    snapshot.count(APNSPoolSnapshot.ConnectFailure.refused)
    snapshot.count(APNSPoolSnapshot.CloseReason.goaway)
    #expect(snapshot.connectFailures == [.refused: 2])
    #expect(snapshot.connectionsClosed == [.goaway: 1])
    #expect(snapshot != APNSPoolSnapshot())
}
