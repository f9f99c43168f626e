import Foundation
import PushTestSupport
import Testing

/// The examples in docs/jobs.md and docs/results.md against the JSON Schemas in docs/schemas,
/// checked by a validator the project did not write (PyPI `jsonschema`, draft 2020-12), run by
/// `Tests/Peers/validate_doc_examples.py`.
@Suite(.timeLimit(.minutes(1))) struct DocumentedExamplesTests {
    /// The Python with `jsonschema`: the test peers' venv (`scripts/test` installs it and exports
    /// `APN_WORKER_H2_PEER_PYTHON`).
    static var python: String {
        if let path = ProcessInfo.processInfo.environment["APN_WORKER_H2_PEER_PYTHON"], !path.isEmpty { return path }
        return Paths.root + "/.build/h2-peer-venv/bin/python"
    }

    @Test func everyJSONExampleInTheDocsMatchesItsSchema() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.python) else {
            throw ServerError(
                "no Python with jsonschema at \(Self.python); run scripts/test, or scripts/lib/install-h2-peer.sh .build/h2-peer-venv")
        }
        let result = try await run(Self.python, [Paths.root + "/Tests/Peers/validate_doc_examples.py", Paths.root])
        let report = try #require(jsonObject(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(result.stderr)")
        let counts = report["examples"] as? [String: Int] ?? [:]
        // Every example is checked: the docs show several of each.
        #expect((counts["docs/jobs.md"] ?? 0) >= 7, "\(report)")
        #expect((counts["docs/results.md"] ?? 0) >= 8, "\(report)")
        #expect((report["failures"] as? [Any])?.isEmpty == true, "\(report)")
        #expect(result.status == 0, "\(result.stderr)")
    }
}
