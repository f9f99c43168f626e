import APNSCore
import NIOCore
import Testing

@testable import APNSBinary

/// The binary pool's reconnect back-off follows its configured base and cap.
@Suite struct ReconnectBackoffTests {
    static func item(_ tag: Int) -> PendingNotification {
        PendingNotification(
            tag: UInt64(tag),
            token: try! DeviceToken(bytes: [UInt8](repeating: UInt8(tag), count: 32)),
            payload: Array(#"{"aps":{"alert":"hello"}}"#.utf8),
            expiry: 0,
            priority: 10,
            retryLimit: nil
        )
    }

    static func connectDelays(_ actions: [BinaryPoolStateMachine.Action]) -> [TimeAmount] {
        actions.compactMap { if case .connect(_, let delay) = $0 { delay } else { nil } }
    }

    @Test func failedConnectsWaitTheBaseDoubledUpToTheCap() {
        var configuration = BinaryPoolStateMachine.Configuration()
        configuration.jitter = { $0 }
        configuration.connectionRetryLimit = nil
        configuration.reconnectBaseDelay = .milliseconds(300)
        configuration.reconnectMaxDelay = .milliseconds(1000)
        var m = BinaryPoolStateMachine(configuration: configuration)
        var actions = m.enqueue([Self.item(1)])
        var delays: [TimeAmount] = []
        for _ in 0..<4 {
            guard case .connect(let id, _)? = actions.first(where: { if case .connect = $0 { true } else { false } })
            else {
                Issue.record("no connect in \(actions)")
                return
            }
            actions = m.connectFailed(id: id, reason: "refused")
            delays += Self.connectDelays(actions)
        }
        #expect(delays == [.milliseconds(300), .milliseconds(600), .milliseconds(1000), .milliseconds(1000)])
    }
}
