import CRdKafka
import Dispatch
import Synchronization

/// An idempotent Kafka producer (`enable.idempotence=true`, `acks=all` unless
/// overridden) whose sends return once the broker acknowledged the record.
///
/// A dedicated thread runs `rd_kafka_poll` for the producer's lifetime to deliver
/// acknowledgements. When librdkafka's local queue is full
/// (`queue.buffering.max.messages`/`.kbytes`), sends wait for acknowledgements
/// to free space rather than fail: backpressure, never dropping.
public final class KafkaProducer: Sendable {
    private let client: RdKafkaHandle
    private let runtime: ProducerRuntime
    private let flushQueue = DispatchQueue(label: "PushKafka.KafkaProducer.flush")

    public init(configuration: KafkaConfiguration) throws(KafkaError) {
        let conf = try configuration.makeConf(defaults: ["enable.idempotence": "true", "acks": "all"])
        rd_kafka_conf_set_dr_msg_cb(conf, deliveryReportCallback)
        // Balanced by the release after rd_kafka_destroy at the end of the poll loop.
        let context = Unmanaged.passRetained(ClientContext(logger: configuration.clientLogger))
        rd_kafka_conf_set_opaque(conf, context.toOpaque())
        do {
            client = RdKafkaHandle(try makeClient(RD_KAFKA_PRODUCER, conf))
        } catch {
            context.release()
            throw error
        }
        runtime = ProducerRuntime()
        let (client, runtime) = (client, runtime)
        DispatchQueue(label: "PushKafka.KafkaProducer.poll").async { runtime.pollLoop(client.pointer) }
    }

    /// Stops the poll thread and destroys the handle there. Unsent messages are purged.
    deinit { runtime.stopRequested.store(true, ordering: .releasing) }

    /// Sends one record and returns where the broker stored it.
    /// Throws `KafkaError` if it could not be enqueued or delivered (e.g. `_MSG_TIMED_OUT`
    /// after `message.timeout.ms`). Cancellation does not abort a send.
    public func send(
        topic: String,
        partition: Int32? = nil,
        key: [UInt8]?,
        value: [UInt8],
        headers: [KafkaHeader] = []
    ) async throws(KafkaError) -> KafkaDeliveryReport {
        let message = KafkaOutgoingMessage(topic: topic, partition: partition, key: key, value: value, headers: headers)
        return try await send([message])[0].get()
    }

    /// Enqueues all messages, then waits for every acknowledgement: the fast path for
    /// many records in flight. Results are in input order. Throws only if the
    /// producer is closed. When the task is cancelled it stops waiting: messages not yet
    /// acknowledged report ``KafkaError/cancelled(_:)`` (librdkafka may still deliver them).
    public func send(
        _ messages: [KafkaOutgoingMessage]
    ) async throws(KafkaError) -> [Result<KafkaDeliveryReport, KafkaError>] {
        guard !runtime.closed.load(ordering: .acquiring) else { throw .closed("KafkaProducer") }
        let batch = DeliveryBatch(count: messages.count)
        for (index, message) in messages.enumerated() {
            while true {
                if runtime.closed.load(ordering: .acquiring) {
                    batch.complete(index, .failure(.closed("KafkaProducer")))
                    break
                }
                if Task.isCancelled {
                    batch.complete(index, .failure(.cancelled("Sending to Kafka")))
                    break
                }
                let generation = runtime.pollGeneration
                let target = Unmanaged.passRetained(DeliveryTarget(batch: batch, index: index))
                guard let error = enqueue(message, opaque: target.toOpaque()) else { break }
                target.release()
                if error.code == RD_KAFKA_RESP_ERR__QUEUE_FULL.rawValue {
                    await runtime.waitForPoll(after: generation)
                } else {
                    batch.complete(index, .failure(error))
                    break
                }
            }
        }
        return await batch.results()
    }

    /// Waits until every enqueued message is acknowledged or failed.
    /// Throws `_TIMED_OUT` if messages are still outstanding after `timeout`.
    public func flush(timeout: Duration) async throws(KafkaError) {
        let client = client
        try await flushQueue.run { () throws(KafkaError) in
            let err = rd_kafka_flush(client.pointer, timeout.timeoutMilliseconds)
            guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
                throw KafkaError(
                    err,
                    context: "\(rd_kafka_outq_len(client.pointer)) messages still outstanding after flush"
                )
            }
        }
    }

    /// Rejects new sends, waits up to `timeout` for outstanding messages, then fails
    /// the rest with `_PURGE_QUEUE`/`_PURGE_INFLIGHT`. The handle is freed on deinit. Returns
    /// within `timeout` + 1 s, and at once when the task is cancelled (the purge goes on).
    public func close(timeout: Duration = .seconds(10)) async {
        guard !runtime.closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let client = client
        _ = try? await flushQueue.run(what: "Closing the producer", abandoningAfter: timeout + .seconds(1)) {
            if rd_kafka_flush(client.pointer, timeout.timeoutMilliseconds) != RD_KAFKA_RESP_ERR_NO_ERROR {
                _ = rd_kafka_purge(client.pointer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT)
                _ = rd_kafka_flush(client.pointer, 500)  // serves the purge reports
            }
        }
    }

    /// Hands one message to librdkafka (which copies it). Returns the enqueue error, if any.
    ///
    /// One is enqueued per result, so the common case allocates nothing: the topic, key and
    /// value are lent to librdkafka for the call (`RD_KAFKA_MSG_F_COPY`; it always copies the
    /// key) and the argument list lives on the stack. Only headers are copied into buffers.
    private func enqueue(_ message: KafkaOutgoingMessage, opaque: UnsafeMutableRawPointer) -> KafkaError? {
        message.topic.withCString { topic in
            message.value.withUnsafeBytes { value in
                withKey(message.key) { key in
                    withUnsafeTemporaryAllocation(of: rd_kafka_vu_t.self, capacity: 7 + message.headers.count) { vus in
                        var count = 0
                        func append(_ type: rd_kafka_vtype_t, _ set: (inout rd_kafka_vu_t) -> Void) {
                            var vu = rd_kafka_vu_t()
                            vu.vtype = type
                            set(&vu)
                            vus.initializeElement(at: count, to: vu)
                            count += 1
                        }
                        var allocations: [UnsafeMutableRawBufferPointer] = []
                        defer { allocations.forEach { $0.deallocate() } }
                        func copy<C: Collection<UInt8>>(_ bytes: C, nulTerminated: Bool) -> UnsafeMutableRawPointer? {
                            guard nulTerminated || !bytes.isEmpty else { return nil }
                            let buffer = UnsafeMutableRawBufferPointer.allocate(
                                byteCount: bytes.count + (nulTerminated ? 1 : 0),
                                alignment: 1
                            )
                            allocations.append(buffer)
                            buffer.copyBytes(from: bytes)
                            if nulTerminated { buffer[bytes.count] = 0 }
                            return buffer.baseAddress
                        }
                        append(RD_KAFKA_VTYPE_TOPIC) { $0.u.cstr = topic }
                        append(RD_KAFKA_VTYPE_VALUE) {
                            $0.u.mem = .init(
                                ptr: UnsafeMutableRawPointer(mutating: value.baseAddress),
                                size: value.count
                            )
                        }
                        append(RD_KAFKA_VTYPE_MSGFLAGS) { $0.u.i = RD_KAFKA_MSG_F_COPY }
                        append(RD_KAFKA_VTYPE_OPAQUE) { $0.u.ptr = opaque }
                        if let partition = message.partition {
                            append(RD_KAFKA_VTYPE_PARTITION) { $0.u.i32 = partition }
                        }
                        if let timestamp = message.timestamp {
                            append(RD_KAFKA_VTYPE_TIMESTAMP) { $0.u.i64 = timestamp }
                        }
                        if let key {
                            append(RD_KAFKA_VTYPE_KEY) {
                                $0.u.mem = .init(
                                    ptr: UnsafeMutableRawPointer(mutating: key.baseAddress),
                                    size: key.count
                                )
                            }
                        }
                        for header in message.headers {
                            let name = copy(header.key.utf8, nulTerminated: true)
                            let value = copy(header.value, nulTerminated: false)
                            append(RD_KAFKA_VTYPE_HEADER) {
                                $0.u.header = .init(
                                    name: name?.assumingMemoryBound(to: CChar.self),
                                    val: value,
                                    size: header.value.count
                                )
                            }
                        }
                        defer { vus.baseAddress!.deinitialize(count: count) }
                        guard let error = rd_kafka_produceva(client.pointer, vus.baseAddress, count) else { return nil }
                        return KafkaError(
                            consuming: error,
                            context: "Cannot enqueue message for topic '\(message.topic)'"
                        )
                    }
                }
            }
        }
    }

    /// Lends `key`'s bytes: `nil` without a key; an empty key is a null pointer of size 0.
    private func withKey<R>(_ key: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let key else { return body(nil) }
        guard !key.isEmpty else { return body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return key.withUnsafeBytes { body($0) }
    }
}

/// State shared between a producer and its poll thread.
private final class ProducerRuntime: Sendable {
    let stopRequested = Atomic<Bool>(false)
    let closed = Atomic<Bool>(false)
    /// Incremented after every `rd_kafka_poll`, i.e. whenever queue space may have been freed.
    private let poll = Mutex<(generation: UInt64, waiters: [CheckedContinuation<Void, Never>])>((0, []))

    var pollGeneration: UInt64 { poll.withLock { $0.generation } }

    /// Suspends until a poll completed after the one numbered `generation`.
    func waitForPoll(after generation: UInt64) async {
        await withCheckedContinuation { continuation in
            let ready = poll.withLock { state in
                guard state.generation == generation else { return true }
                state.waiters.append(continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Runs on the producer's dedicated thread until deinit; then purges and destroys the handle.
    func pollLoop(_ rk: OpaquePointer) {
        while !stopRequested.load(ordering: .acquiring) {
            rd_kafka_poll(rk, 100)
            let waiters = poll.withLock { state in
                state.generation &+= 1
                defer { state.waiters.removeAll() }
                return state.waiters
            }
            waiters.forEach { $0.resume() }
        }
        _ = rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT)
        _ = rd_kafka_flush(rk, 5000)  // serves the purge reports
        let opaque = rd_kafka_opaque(rk)
        rd_kafka_destroy(rk)
        if let opaque { Unmanaged<ClientContext>.fromOpaque(opaque).release() }
    }
}

/// Collects the delivery results of one `send` call.
private final class DeliveryBatch: Sendable {
    private struct State {
        var results: [Result<KafkaDeliveryReport, KafkaError>?]
        var remaining: Int
        var waiter: CheckedContinuation<[Result<KafkaDeliveryReport, KafkaError>], Never>?
        /// The waiter was cancelled: it no longer waits for the rest.
        var abandoned = false
    }

    private let state: Mutex<State>

    init(count: Int) {
        state = Mutex(State(results: Array(repeating: nil, count: count), remaining: count))
    }

    func complete(_ index: Int, _ result: Result<KafkaDeliveryReport, KafkaError>) {
        let finished = state.withLock {
            state -> (
                CheckedContinuation<[Result<KafkaDeliveryReport, KafkaError>], Never>,
                [Result<KafkaDeliveryReport, KafkaError>]
            )? in
            state.results[index] = result
            state.remaining -= 1
            guard state.remaining == 0, let waiter = state.waiter else { return nil }
            state.waiter = nil
            return (waiter, Self.filled(state.results))
        }
        if let (waiter, results) = finished { waiter.resume(returning: results) }
    }

    /// Waits for every slot; on cancellation, returns at once with the slots still open
    /// failed as cancelled.
    func results() async -> [Result<KafkaDeliveryReport, KafkaError>] {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> [Result<KafkaDeliveryReport, KafkaError>]? in
                    guard state.remaining > 0, !state.abandoned else { return Self.filled(state.results) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let abandoned = state.withLock { state in
                state.abandoned = true
                defer { state.waiter = nil }
                return state.waiter.map { ($0, Self.filled(state.results)) }
            }
            if let (waiter, results) = abandoned { waiter.resume(returning: results) }
        }
    }

    private static func filled(
        _ results: [Result<KafkaDeliveryReport, KafkaError>?]
    ) -> [Result<KafkaDeliveryReport, KafkaError>] {
        results.map { $0 ?? .failure(.cancelled("Waiting for Kafka's acknowledgement")) }
    }
}

/// The per-message opaque: which batch slot a delivery report fills.
private final class DeliveryTarget: Sendable {
    let batch: DeliveryBatch
    let index: Int

    init(batch: DeliveryBatch, index: Int) {
        self.batch = batch
        self.index = index
    }
}

/// librdkafka delivery-report callback; runs inside `rd_kafka_poll`/`rd_kafka_flush`.
private let deliveryReportCallback:
    @convention(c) (OpaquePointer?, UnsafePointer<rd_kafka_message_t>?, UnsafeMutableRawPointer?) -> Void =
        { rk, message, _ in
            guard let message, let opaque = message.pointee._private else { return }
            let target = Unmanaged<DeliveryTarget>.fromOpaque(opaque).takeRetainedValue()
            let report = message.pointee
            let topic = String(cString: rd_kafka_topic_name(report.rkt))
            guard report.err != RD_KAFKA_RESP_ERR_NO_ERROR else {
                target.batch.complete(
                    target.index,
                    .success(KafkaDeliveryReport(topic: topic, partition: report.partition, offset: report.offset))
                )
                return
            }
            var error = KafkaError(report.err, context: "Delivery to topic '\(topic)' failed")
            if report.err == RD_KAFKA_RESP_ERR__FATAL, let rk {
                var errstr = [CChar](repeating: 0, count: 512)
                let cause = rd_kafka_fatal_error(rk, &errstr, errstr.count)
                let detail = errstr.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
                error = KafkaError(
                    report.err,
                    "Delivery to topic '\(topic)' failed: producer fatal error \(String(cString: rd_kafka_err2name(cause))): \(detail)",
                    isFatal: true
                )
            }
            target.batch.complete(target.index, .failure(error))
        }
