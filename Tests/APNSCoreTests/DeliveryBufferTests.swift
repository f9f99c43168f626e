import Synchronization
import Testing

@testable import APNSCore

private func outcome(_ tag: UInt64) -> APNSDeliveryEvent {
    .transmitted(
        APNSDeliveryOutcome(
            tag: tag,
            token: try! DeviceToken(bytes: [UInt8](repeating: 1, count: 32)),
            status: nil,
            attempts: 1,
            possibleDuplicate: false
        )
    )
}

@Test func eventBufferKeepsOutcomesAndCapsConnectionEvents() {
    var buffer = APNSEventBuffer(maxConnectionEvents: 2)
    buffer.append(connectionEvent: .connected(connection: 1))
    buffer.append(connectionEvent: .connected(connection: 2))
    buffer.append(connectionEvent: .connected(connection: 3))  // over the cap: dropped
    buffer.append(connectionEvent: .available, force: true)  // forced: kept
    for tag in 0..<3 { buffer.append(outcome: outcome(UInt64(tag))) }
    #expect(buffer.count == 6)
    #expect(buffer.droppedConnectionEvents == 1)

    var taken: [APNSDeliveryEvent] = []
    #expect(buffer.take(max: 4, into: &taken) == 1)  // three connection events and one outcome
    #expect(taken.count == 4)
    // Room again for connection events: three were taken, so two fit under the cap.
    buffer.append(connectionEvent: .connected(connection: 4))
    buffer.append(connectionEvent: .connected(connection: 5))
    buffer.append(connectionEvent: .connected(connection: 6))
    #expect(buffer.droppedConnectionEvents == 2)
    taken.removeAll()
    #expect(buffer.take(max: 0, into: &taken) == 1)  // at least one
    #expect(buffer.take(max: 100, into: &taken) == 1)
    #expect(taken.compactMap(\.outcome).map(\.tag) == [1, 2])
    #expect(buffer.isEmpty && !buffer.isFinished)
    buffer.finish()
    #expect(buffer.isFinished)
}

/// Continuations of tasks parked the way `send` parks its caller, so that a test can hand
/// them to an ``APNSAdmission`` and see which ones it resumes.
private final class Parked: Sendable {
    private let continuations = Mutex<[Int: CheckedContinuation<Void, any Error>]>([:])
    private let tasks = Mutex<[Int: Task<Void, any Error>]>([:])

    func park(_ ids: ClosedRange<Int>) async throws {
        for id in ids {
            let task = Task {
                try await withCheckedThrowingContinuation { c in self.continuations.withLock { $0[id] = c } }
            }
            tasks.withLock { $0[id] = task }
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while continuations.withLock({ $0.count }) < ids.count {
            try #require(ContinuousClock.now < deadline, "the tasks did not park in time")
            await Task.yield()
        }
    }

    func take(_ id: Int) -> CheckedContinuation<Void, any Error> {
        continuations.withLock { $0.removeValue(forKey: id)! }
    }

    /// Whether task `id` returned (admitted) rather than threw.
    func admitted(_ id: Int) async -> Bool {
        guard let task = tasks.withLock({ $0[id] }) else { return false }
        return (try? await task.value) != nil
    }
}

@Test func admissionAdmitsInOrderAndWaitsForRoom() async throws {
    let parked = Parked()
    try await parked.park(1...6)
    var a = APNSAdmission<String>(maxPending: 10)

    let accepted1 = a.admit("A", count: 6, id: 1, continuation: parked.take(1))
    #expect(accepted1)
    #expect(a.popAdmitted() == "A")
    let accepted2 = a.admit("B", count: 6, id: 2, continuation: parked.take(2))  // 12 > 10: waits
    #expect(accepted2)
    let accepted3 = a.admit("C", count: 1, id: 3, continuation: parked.take(3))  // fits, but B was first
    #expect(accepted3)
    #expect(a.popAdmitted() == nil && a.admitted == 6)
    #expect(a.waits == 2)  // B and C

    a.release(1)  // 5 + 6 > 10: B still waits
    #expect(a.popAdmitted() == nil)
    a.release(1)  // 4 + 6 = 10: B; C does not fit behind it
    #expect(a.popAdmitted() == "B" && a.popAdmitted() == nil && a.admitted == 10)

    let cancelled = a.cancel(id: 3)
    #expect(cancelled?.batch == "C")
    cancelled?.continuation.resume(throwing: CancellationError())
    #expect(a.cancel(id: 3) == nil)

    // Larger than the limit: admitted alone, once the client is empty.
    let accepted4 = a.admit("D", count: 20, id: 4, continuation: parked.take(4))
    #expect(accepted4)
    #expect(a.popAdmitted() == nil)
    a.release(10)
    #expect(a.popAdmitted() == "D" && a.admitted == 20)

    let accepted5 = a.admit("E", count: 1, id: 5, continuation: parked.take(5))  // waits
    #expect(accepted5)
    #expect(a.waits == 4)  // B, C, D, E
    let stopped = a.stop()
    #expect(stopped.map(\.batch) == ["E"])
    for waiter in stopped { waiter.continuation.resume(throwing: APNSError(.shutDown, "stopped")) }
    let refused = parked.take(6)
    let accepted6 = a.admit("F", count: 1, id: 6, continuation: refused)
    #expect(!accepted6)
    refused.resume(throwing: APNSError(.shutDown, "stopped"))

    var wakeups = APNSWakeups()
    a.takeWakeups(events: APNSEventBuffer(maxConnectionEvents: 1), into: &wakeups)
    #expect(wakeups.consumer == nil && wakeups.submitters.count == 3)  // A, B, D
    wakeups.resume()
    var finished = APNSEventBuffer(maxConnectionEvents: 1)
    finished.finish()
    var none = APNSWakeups()
    a.takeWakeups(events: finished, into: &none)
    #expect(none.submitters.isEmpty && none.consumer == nil)

    var admitted: [Int] = []
    for id in 1...6 where await parked.admitted(id) { admitted.append(id) }
    #expect(admitted == [1, 2, 4])
}

@Test func serverNameIsTheOverrideOrAHostNameNeverAnAddress() {
    #expect(serverName(host: "api.push.apple.com", override: nil) == "api.push.apple.com")
    #expect(serverName(host: "127.0.0.1", override: nil) == nil)
    #expect(serverName(host: "::1", override: nil) == nil)
    #expect(serverName(host: "fe80::1", override: nil) == nil)
    #expect(serverName(host: "127.0.0.1", override: "gateway.test") == "gateway.test")
    #expect(serverName(host: "1.2.3.example", override: nil) == "1.2.3.example")
}

@Test func backoffDoublesUpToTheMaximumAndJitterStaysWithinHalfToAll() {
    let delays = (1...8).map { APNSReconnectBackoff.delay(afterFailures: $0, base: .seconds(1), maximum: .seconds(60)) }
    #expect(delays == [1, 2, 4, 8, 16, 32, 60, 60].map { Duration.seconds($0) })
    #expect(APNSReconnectBackoff.delay(afterFailures: 0) == .milliseconds(100))
    for _ in 0..<100 {
        let jittered = APNSReconnectBackoff.jittered(.seconds(2))
        #expect(jittered >= .seconds(1) && jittered <= .seconds(2))
    }
}

/// The smallest ``APNSBufferedDeliveryClient``: its pool answers every admitted notification
/// when the test calls ``settle()``.
private final class EchoClient: APNSBufferedDeliveryClient {
    struct State {
        var events = APNSEventBuffer(maxConnectionEvents: 10)
        var admission: APNSAdmission<[UInt64]>
        var pool: [UInt64] = []
    }

    let state: Mutex<State>

    init(maxPending: Int) {
        state = Mutex(State(admission: APNSAdmission(maxPending: maxPending)))
    }

    private func step(_ change: (inout State) -> Void) {
        let wakeups = state.withLock { s -> APNSWakeups in
            change(&s)
            while let batch = s.admission.popAdmitted() { s.pool += batch }
            var wakeups = APNSWakeups()
            s.admission.takeWakeups(events: s.events, into: &wakeups)
            return wakeups
        }
        wakeups.resume()
    }

    func withBuffer(_ body: (inout APNSEventBuffer, inout APNSAdmission<[UInt64]>) -> Void) {
        step { body(&$0.events, &$0.admission) }
    }

    /// One `transmitted` outcome for every notification in the pool.
    func settle() {
        step { s in
            for tag in s.pool { s.events.append(outcome: outcome(tag)) }
            s.pool.removeAll()
        }
    }

    var waiting: Int { state.withLock { $0.admission.waiting } }

    func snapshot() -> APNSPoolSnapshot {
        state.withLock { s in
            var snapshot = APNSPoolSnapshot()
            snapshot.queued = s.pool.count
            snapshot.backpressureWaits = s.admission.waits
            return snapshot
        }
    }

    func start() {}

    func send(_ submissions: [APNSSubmission]) async throws {
        try await admit(submissions.map(\.tag), count: submissions.count)
    }

    func nextEvent() async -> APNSDeliveryEvent? { await takeEvents(max: 1)?.first }

    func nextEvents(max: Int) async -> [APNSDeliveryEvent]? { await takeEvents(max: max) }

    func shutdown(gracePeriod: Duration?) async {
        var waiters: [APNSAdmission<[UInt64]>.Waiter] = []
        step { s in
            waiters = s.admission.stop()
            s.events.finish()
        }
        APNSAdmission.reject(waiters)
    }

    /// Waits until `count` batches wait for room.
    func waitUntilWaiting(_ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while waiting != count {
            try #require(ContinuousClock.now < deadline, "\(count) batches never waited")
            await Task.yield()
        }
    }
}

private func submissions(_ tags: Range<Int>) -> [APNSSubmission] {
    let token = try! DeviceToken(bytes: [UInt8](repeating: 1, count: 32))
    return tags.map { APNSSubmission(tag: UInt64($0), token: token, notification: APNSNotification()) }
}

@Test func aBufferedClientHoldsSendersBackUntilOutcomesAreTakenAndEndsAfterShutdown() async throws {
    let client = EchoClient(maxPending: 4)
    try await client.send(submissions(0..<3))  // fits
    let second = Task { try await client.send(submissions(3..<6)) }
    try await client.waitUntilWaiting(1)  // 3 + 3 > 4
    client.settle()
    // Taking two outcomes leaves one in the client: 1 + 3 fits.
    let first = await client.nextEvents(max: 2)
    #expect(first?.compactMap(\.outcome).map(\.tag) == [0, 1])
    try await second.value
    #expect(client.waiting == 0)
    #expect(client.snapshot().backpressureWaits == 1)

    // A sender that waits can be cancelled: its notifications are never admitted.
    let cancelled = Task { try await client.send(submissions(6..<10)) }
    try await client.waitUntilWaiting(1)
    cancelled.cancel()
    await #expect(throws: CancellationError.self) { try await cancelled.value }

    client.settle()
    var tags: [UInt64] = []
    for await event in client.events {
        tags += event.outcome.map { [$0.tag] } ?? []
        if tags.count == 4 { break }
    }
    #expect(tags == [2, 3, 4, 5])

    // Shutdown rejects waiting senders and ends the events once the last one is taken.
    try await client.send(submissions(10..<14))  // fits exactly
    let late = Task { try await client.send(submissions(14..<15)) }
    try await client.waitUntilWaiting(1)
    await client.shutdown()
    await #expect(throws: APNSError.self) { try await late.value }
    await #expect(throws: APNSError.self) { try await client.send(submissions(30..<31)) }
    client.settle()
    var rest: [UInt64] = []
    while let event = await client.nextEvent() { rest += event.outcome.map { [$0.tag] } ?? [] }
    #expect(rest == [10, 11, 12, 13])
    #expect(await client.nextEvents(max: 10) == nil)
}
