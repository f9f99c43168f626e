import Logging
import PushCommandLine
import Synchronization
import Testing

/// `worker.logFormat: text`: one line per record, whatever a job put in the message or the
/// metadata.
@Suite struct TextLogHandlerTests {
    /// A logger whose lines are collected.
    final class Lines: Sendable {
        let lines = Mutex<[String]>([])
        var all: [String] { lines.withLock { $0 } }

        func logger(_ label: String = "apn-worker") -> Logger {
            Logger(label: label) { label in
                TextLogHandler(label: label, level: .trace) { line in self.lines.withLock { $0.append(line) } }
            }
        }
    }

    @Test("A job id with a line break gives one log line, with the break escaped as \\n")
    func lineBreakInAJobIdIsEscaped() {
        let lines = Lines()
        let jobId = "evil\n2026-01-01T00:00:00.000Z critical apn-worker: [PushWorker] forged line"
        lines.logger().warning(
            "Rejected job \(jobId) at apn.requests[3]@42: the token is not hex.",
            metadata: ["job.id": "\(jobId)", "worker": "w1"]
        )
        let written = lines.all.joined()
        #expect(lines.all.count == 1)
        #expect(written.filter { $0 == "\n" }.count == 1 && written.hasSuffix("\n"), "\(written)")
        #expect(written.contains(#"Rejected job evil\n2026-01-01T00:00:00.000Z critical"#), "\(written)")
        #expect(written.contains(#"job.id=evil\n2026-01-01"#), "\(written)")
        #expect(written.contains(" warning apn-worker: job.id="), "\(written)")
        #expect(written.contains(" worker=w1 [") && written.contains("] Rejected job"), "\(written)")
    }

    @Test("Every control character, in the message, the metadata and the label, is escaped")
    func controlCharactersAreEscaped() {
        #expect(
            TextLogHandler.escaped("a\rb\tc\u{1B}[31md\u{7F}e\u{85}f\u{2028}g")
                == #"a\rb\tc\u{1b}[31md\u{7f}e\u{85}f\u{2028}g"#
        )
        #expect(TextLogHandler.escaped("plain text, ünïcödé 🚀") == "plain text, ünïcödé 🚀")
        let lines = Lines()
        lines.logger("label\nx").info("m\r", metadata: ["k\n": "v\u{0}"])
        #expect(lines.all == [lines.all.first ?? ""])
        let line = lines.all.first ?? ""
        #expect(line.contains(#" info label\nx: k\n=v\u{0} ["#), "\(line)")
        #expect(line.hasSuffix("] m\\r\n"), "\(line)")
    }
}
