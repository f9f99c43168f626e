import Foundation
import PushLocalStack
import PushTestSupport
import Testing

/// The JSON examples of `docs/jobs.md` and `docs/results.md` against the JSON Schemas in
/// `docs/schemas`, checked by an implementation the project did not write (Python's
/// `jsonschema`, draft 2020-12) through `Tests/Peers/validate_doc_examples.py`.
@Suite struct DocsSchemaTests {
    @Test func everyJSONExampleInJobsAndResultsMatchesItsSchema() async throws {
        let script = Paths.root + "/Tests/Peers/validate_doc_examples.py"
        // The test peers' virtualenv (scripts/lib/install-h2-peer.sh) has jsonschema.
        let python =
            ProcessInfo.processInfo.environment["APN_WORKER_H2_PEER_PYTHON"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "python3"
        let child = try ChildProcess("/usr/bin/env", [python, script, Paths.root])
        let (status, stdout, stderr) = await child.finish()
        let lines = stdout.split(separator: "\n")
        #expect(status == 0, "\(stdout)\(stderr)")
        #expect(lines.contains { $0.hasPrefix("ok docs/jobs.md") }, "\(stdout)")
        #expect(lines.contains { $0.hasPrefix("ok docs/results.md") }, "\(stdout)")
        #expect(!lines.contains { $0.hasPrefix("FAIL") }, "\(stdout)")
    }
}
