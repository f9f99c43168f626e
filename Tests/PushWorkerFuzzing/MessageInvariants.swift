import APNSCore
import Dispatch
import Logging
import PushConfiguration
import PushRedis
import Synchronization

@testable import PushKafka
@testable import PushWorker

/// What must hold for any Kafka message intake is given — any timestamp of either type, any
/// key, headers and value, any offset — through everything the worker computes from it before
/// and after Apple: parsing, the stop guard's plan, the claim stage's plan (stale deadlines),
/// and the results of its notifications. Shared by the seeded tests and the libFuzzer target
/// `intake-fuzzer` (`scripts/fuzz`).
public enum MessageInvariants {
    /// A message read from fuzzer bytes: 8 bytes of timestamp (big-endian, any `Int64`), a
    /// flags byte (bit 0: no timestamp; bit 1: `LogAppendTime`; bits 2–3: the offset, from 0, a
    /// large one, the largest, or negative), a key (a length byte, 255 for none, then its
    /// bytes), a header count byte and each header (name length, name, value length, value),
    /// then the value. Missing bytes read as zero.
    public static func message(fromInput bytes: [UInt8]) -> KafkaMessage {
        var reader = Reader(bytes: bytes)
        var timestamp: Int64 = 0
        for _ in 0..<8 { timestamp = timestamp << 8 | Int64(reader.byte()) }
        let flags = reader.byte()
        let offsets: [Int64] = [7, 1 << 40, .max - 1, -3]
        let keyLength = reader.byte()
        let key = keyLength == 255 ? nil : reader.bytes(Int(keyLength))
        var headers: [KafkaHeader] = []
        for _ in 0..<min(reader.byte(), 16) {
            let name = String(decoding: reader.bytes(Int(reader.byte())), as: UTF8.self)
            headers.append(KafkaHeader(name, reader.bytes(Int(reader.byte()))))
        }
        return KafkaMessage(
            topic: "apn.requests",
            partition: Int32(flags >> 4),
            offset: offsets[Int(flags >> 2 & 3)],
            key: key,
            value: reader.rest(),
            headers: headers,
            timestamp: flags & 1 == 0 ? timestamp : nil,
            timestampType: flags & 2 == 0 ? .createTime : .logAppendTime
        )
    }

    /// The stage intake runs in: a binary app and an HTTP/2 app (token authentication), both
    /// with a `staleAfter` of a day, so that every job's stale deadline is computed.
    static let intake: IntakeStage = {
        func app(_ name: String, _ transport: WorkerConfiguration.Transport) -> WorkerConfiguration.App {
            var app = WorkerConfiguration.App(
                name: name,
                bundleId: name,
                defaultEnvironment: .production,
                transport: transport,
                environments: [
                    .production: .init(
                        name: .production,
                        credentials: transport == .http2
                            ? .token(signingKey: .file("/k.p8"), keyId: "ABCDEFGHIJ", teamId: "ABCDEFGHIJ")
                            : .pem(certificate: .file("/c.pem"), key: .file("/k.pem"))
                    )
                ]
            )
            app.staleAfter = .seconds(86_400)
            return app
        }
        let configuration = WorkerConfiguration(
            worker: .init(id: "fuzz"),
            kafka: .init(bootstrapServers: "127.0.0.1:9092"),
            redis: RedisConfiguration(),
            limits: .init(),
            apps: ["com.example.e2e": app("com.example.e2e", .binary), "com.example.h2": app("com.example.h2", .http2)]
        )
        // Quiet: a warning per rejected message would be most of a run's output.
        var logger = Logger(label: "fuzz")
        logger.logLevel = .critical
        return IntakeStage(
            configuration: configuration,
            factory: ResultFactory(worker: "fuzz", now: { 1_700_000_000_000 }),
            logger: logger
        )
    }()

    /// Runs `message` through intake, the stop guard's plan, the claim stage's plan and the
    /// results of its notifications; returns what is wrong (empty when nothing is). A trap on
    /// the way is what the fuzzer looks for.
    public static func violations(ofMessage message: KafkaMessage) async -> [String] {
        let chunk = await parse(message)
        var problems: [String] = []
        let results = chunk.results.count + chunk.candidates.count
        let registered = chunk.registrations.reduce(0) { $0 + $1.1 }
        if registered != results + chunk.summaries.count {
            problems.append(
                "\(registered) results registered for \(results) results and \(chunk.summaries.count) summaries"
            )
        }
        if chunk.registrations.count != 1 {
            problems.append("\(chunk.registrations.count) registrations for one message")
        }
        if case .outOfRange = MessageTimestamp(message), !chunk.candidates.isEmpty {
            problems.append("a job with a timestamp out of range has notifications to send")
        }
        // The stop guard, with the message suspected by every kind of record.
        var guardState = StopGuard(limit: 3)
        let partition = TopicPartition(topic: message.topic, partition: message.partition)
        for stops in 0...3 {
            guardState.learn(
                partition,
                dead: ["\(stops)": .init(from: max(0, message.offset), to: max(0, message.offset), stops: stops)],
                written: nil
            )
            _ = guardState.plan([message])
        }
        let factory = ResultFactory(worker: "fuzz", now: { 1_700_000_000_000 })
        let plan = ClaimStage.plan(
            chunk.candidates,
            chunk.candidates.map { _ in .send },
            factory: factory,
            now: 1_700_000_000_000
        )
        var items = chunk.results + plan.results
        let sent = plan.sends.flatMap(\.notifications)
        let outcomes = sent.enumerated().map { index, context in
            var outcome = APNSDeliveryOutcome(
                tag: UInt64(index),
                token: context.candidate.token,
                status: index.isMultiple(of: 2) ? nil : .unregistered,
                attempts: 1,
                possibleDuplicate: context.takeover
            )
            outcome.unregisteredAt = index.isMultiple(of: 3) ? .max : 1_700_000_000_000
            return outcome
        }
        items += DeliveryStage.results(of: outcomes, contexts: sent, factory: factory).items
        for item in items {
            for value in values(of: item) where (try? JSONValue.parse(value)) == nil {
                problems.append("a result is not valid JSON")
            }
        }
        return problems
    }

    /// ``violations(ofMessage:)`` of the message read from fuzzer bytes, waited for: for the
    /// fuzzer's own thread, never from async code (it blocks its thread until the answer).
    public static func violations(ofInput bytes: [UInt8]) -> [String] {
        let message = message(fromInput: bytes)
        let result = Mutex<[String]>([])
        let done = DispatchSemaphore(value: 0)
        Task {
            let problems = await violations(ofMessage: message)
            result.withLock { $0 = problems }
            done.signal()
        }
        done.wait()
        return result.withLock { $0 }
    }

    /// Intake's parse of one message.
    static func parse(_ message: KafkaMessage) async -> IntakeStage.Chunk {
        var all = IntakeStage.Chunk()
        await intake.parse([message]) { chunk in
            all.registrations += chunk.registrations
            all.results += chunk.results
            all.candidates += chunk.candidates
            all.summaries += chunk.summaries
        }
        return all
    }

    static func values(of item: ResultItem) -> [[UInt8]] {
        switch item {
        case .rejected(_, let message): [message.value]
        case .decided(let r), .delivered(let r): [r.result.value]
        case .reemitted(_, _, let messages): messages.map(\.value)
        case .released, .handedBack: []
        }
    }

    /// Reads fuzzer bytes front to back; past the end, zeros.
    struct Reader {
        let bytes: [UInt8]
        var index = 0

        mutating func byte() -> UInt8 {
            defer { index += 1 }
            return index < bytes.count ? bytes[index] : 0
        }

        mutating func bytes(_ count: Int) -> [UInt8] {
            let end = min(bytes.count, index + count)
            defer { index += count }
            return index < end ? Array(bytes[index..<end]) : []
        }

        mutating func rest() -> [UInt8] {
            defer { index = bytes.count }
            return index < bytes.count ? Array(bytes[index...]) : []
        }
    }
}
