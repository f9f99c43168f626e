import Logging
import Testing

@testable import PushKafka

/// A log handler that passes every record on to a stream, for checking what librdkafka logged.
struct RecordingLogHandler: LogHandler {
    struct Record: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }

    let records: AsyncStream<Record>.Continuation
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        records.yield(Record(level: event.level, message: event.message.description, metadata: event.metadata ?? [:]))
    }
}

@Suite(.timeLimit(.minutes(2)))
struct LogTests {
    @Test func syslogSeveritiesMapToSwiftLogLevels() {
        let levels = (0...7).map { Logger.Level(syslogSeverity: Int32($0)) }
        #expect(levels == [.critical, .critical, .critical, .error, .warning, .notice, .info, .debug])
    }

    @Test("librdkafka's own lines reach the configured logger, with facility and client name")
    func librdkafkaLinesGoThroughSwiftLog() async throws {
        let (records, continuation) = AsyncStream.makeStream(of: RecordingLogHandler.Record.self)
        let logger = Logger(label: "test.rdkafka") { _ in RecordingLogHandler(records: continuation) }
        // Nothing listens on port 1: connecting fails and librdkafka logs it.
        var configuration = KafkaConfiguration(
            ["bootstrap.servers": "127.0.0.1:1", "client.id": "log-test"],
            logger: logger
        )
        configuration.messageTimeout = .seconds(30)
        let producer = try KafkaProducer(configuration: configuration)
        // The first line librdkafka logs; the suite's time limit is the deadline.
        var first: RecordingLogHandler.Record?
        for await record in records {
            first = record
            break
        }
        await producer.close()
        let record = try #require(first, "librdkafka logged nothing through the logger")
        #expect(record.metadata["kafka.client"]?.description.hasPrefix("log-test#producer") == true)
        #expect(record.metadata["kafka.facility"] != nil)
        #expect(!record.message.isEmpty)
    }
}
