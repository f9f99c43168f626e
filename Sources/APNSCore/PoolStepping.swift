/// What a pool client keeps under its lock, as its steps need it: the state machine's event
/// buffer, the admission of callers' batches, and how an admitted batch reaches the machine.
@usableFromInline package protocol APNSPoolClientState: APNSPoolShutdownState {
    /// The machine's outcomes and connection events, waiting for the consumer.
    var events: APNSEventBuffer { get }
    /// Runs `body` with the machine's events and the admission, both changeable (a generic
    /// caller could not prove the two accesses apart).
    mutating func withEventsAndAdmission(_ body: (inout APNSEventBuffer, inout APNSAdmission<Batch>) -> Void)
    /// Hands a batch the admission let in to the machine; returns what the machine asks for.
    mutating func enqueue(_ batch: Batch) -> [Action]
}

/// What one step of a pool client collects under its lock, to carry out after it.
@usableFromInline package protocol APNSPoolEffects: Sendable {
    init()
    /// The tasks the step makes ready, resumed last.
    var wakeups: APNSWakeups { get set }
}

/// A pool client driven by a state machine with no I/O (the binary and the HTTP/2 pools).
///
/// Every input is a ``step(_:)``: under the client's lock the machine takes the input and
/// answers with its actions, which the client turns into ``Effects`` (looking up channels and
/// handlers, taking the shutdown's waiters) with the wakeups of the consumer and the callers of
/// `send`; after the lock, the client carries them out and resumes the wakeups. Each client says
/// only what its own actions need (``collect(_:from:into:)``, ``perform(_:)``).
@usableFromInline package protocol APNSPoolStepping: APNSBufferedDeliveryClient {
    associatedtype State: APNSPoolClientState where State.Batch == Batch
    associatedtype Effects: APNSPoolEffects
    /// Runs `body` under the client's lock.
    func withLockedState(_ body: (inout State) -> Effects) -> Effects
    /// Under the lock: adds what `action` needs to `effects`.
    func collect(_ action: State.Action, from state: inout State, into effects: inout Effects)
    /// After the lock: carries out `effects`, but for their wakeups.
    func perform(_ effects: Effects)
}

extension APNSPoolStepping {
    /// Runs `body` under the lock, then carries out the actions it returned and resumes the
    /// tasks they made ready. Specialised in each client: it is on the path of every batch. (The
    /// protocols are `@usableFromInline`: without it, this toolchain compiles the clients'
    /// calls to the generic copy, which reaches the client's parts through witness tables.)
    @inlinable
    package func step(_ body: (inout State) -> [State.Action]) {
        let effects = withLockedState { state in
            let actions = body(&state)
            var effects = Effects()
            for action in actions { collect(action, from: &state, into: &effects) }
            state.admission.takeWakeups(events: state.events, into: &effects.wakeups)
            return effects
        }
        perform(effects)
        effects.wakeups.resume()
    }

    /// What a client's ``APNSBufferedDeliveryClient/withBuffer(_:)`` does: `body` runs in a
    /// step, and the batches it admitted go to the machine in the same step. Each client
    /// declares `withBuffer` itself and calls this, so that the witness is the specialised copy.
    @inlinable
    package func bufferStep(_ body: (inout APNSEventBuffer, inout APNSAdmission<Batch>) -> Void) {
        step { state in
            state.withEventsAndAdmission(body)
            var actions: [State.Action] = []
            while let batch = state.admission.popAdmitted() {
                actions += state.enqueue(batch)
            }
            return actions
        }
    }
}
