import APNSCore
import APNSSimulator
import Foundation
import PushLocalStack
import PushStatus
import PushTestSupport
import PushWorker
import Testing

/// Credentials rotated under a running `apn-worker run`, as Kubernetes rotates a mounted
/// Secret (the config file and the credential files in one Secret, swapped at once through its
/// `..data` link): the simulators accept only the new credentials afterwards, and every
/// notification is delivered once; invalid new files leave the old credentials in use, with the
/// start's sentence logged at error level and `apn_worker_credential_reload_failed` at 1.
@Suite("Credential reload end to end", .serialized, .timeLimit(.minutes(5)))
struct CredentialReloadEndToEndTests {
    static let binaryApp = WorkerStack.app
    static let http2App = WorkerStack.http2App
    static let oldKeyID = LocalStack.HTTP2App.keyID
    static let newKeyID = "NEWKEY0002"
    static let teamID = LocalStack.HTTP2App.teamID

    /// Moves the worker's config file and credentials into a secret mounted at `secret/`; the
    /// config file's path becomes a link into it.
    static func mountSecret(_ stack: WorkerStack) throws -> MountedSecret {
        let certs = stack.directory + "/certs"
        let directory = stack.directory + "/secret"
        var config = try String(contentsOfFile: stack.configPath, encoding: .utf8)
        var files: [String: String] = [:]
        for name in ["client.pem", "client-key.pem", "AuthKey.p8"] {
            files[name] = try String(contentsOfFile: certs + "/" + name, encoding: .utf8)
            config = config.replacingOccurrences(of: "\(certs)/\(name)", with: "\(directory)/\(name)")
        }
        files["worker.yaml"] = config
        let secret = try MountedSecret(directory: directory, files: files)
        try FileManager.default.removeItem(atPath: stack.configPath)
        try FileManager.default.createSymbolicLink(
            atPath: stack.configPath,
            withDestinationPath: secret.path("worker.yaml")
        )
        return secret
    }

    /// Jobs with tokens `numbers`, even ones for the binary app and odd ones for the HTTP/2 app.
    static func jobs(_ numbers: Range<Int>) -> [[UInt8]] {
        numbers.map { n in
            WorkerStack.job(id: "reload-\(n)", tokens: [.numbered(n)], app: n % 2 == 0 ? binaryApp : http2App)
        }
    }

    /// The sum of the series of `name` with `labels` on w1's `/metrics`; `nil` when unreachable.
    static func metric(_ stack: WorkerStack, _ name: String, _ labels: [String: String]) async -> Double? {
        guard let server = stack.statusServers["w1"], let text = try? await server.get("/metrics").text else {
            return nil
        }
        return MetricSamples(parsing: text).total(name, labels)
    }

    /// Whether `apn_worker_credential_reload_failed` of both apps is `value` on w1.
    static func failedGauges(_ stack: WorkerStack, equal value: Double) async -> Bool {
        for app in [binaryApp, http2App] {
            let labels = ["app": app, "env": "production"]
            guard await metric(stack, "apn_worker_credential_reload_failed", labels) == value else { return false }
        }
        return true
    }

    /// The messages w1 logged at error level.
    static func errors(_ stack: WorkerStack) -> [String] {
        let log = stack.fullLog(of: "w1")
        return log.split(separator: "\n").compactMap { line in
            guard let fields = (try? JSONValue.parse(String(line)))?.objectValue, fields["level"] == "error" else {
                return nil
            }
            return fields["message"]?.stringValue
        }
    }

    static func occurrences(of text: String, in stack: WorkerStack) -> Int {
        (stack.fullLog(of: "w1")).components(separatedBy: text).count - 1
    }

    /// Every notification of tokens `numbers` has one result, `transmitted` and not a possible
    /// duplicate, and its simulator accepted it once.
    static func expectDeliveredOnce(_ stack: WorkerStack, _ numbers: Range<Int>) async throws {
        let results = try await stack.readResults(timeout: .seconds(120)) { $0.count >= numbers.count }
        #expect(results.count == numbers.count)
        #expect(Set(results.compactMap { $0["resultId"]?.stringValue }).count == numbers.count)
        let failed = results.filter { $0["type"] != "transmitted" || $0["possibleDuplicate"] == .bool(true) }
        #expect(failed.isEmpty, "\(failed.prefix(3))")
        // A binary notification counts as transmitted once its confirmation window passed, which
        // can be before a busy gateway has read it: wait for the gateway's count.
        func wrong() -> [Int] {
            let binary = stack.simulator.acceptedByToken
            let http2 = stack.http2Simulator?.acceptedByToken ?? [:]
            return numbers.filter { n in (n % 2 == 0 ? binary : http2)[.numbered(n)] != 1 }
        }
        await eventually("every token accepted exactly once", within: .seconds(30)) { wrong().isEmpty }
        #expect(wrong().isEmpty, "tokens not accepted exactly once: \(wrong().prefix(10))")
    }

    @Test(
        "A binary certificate and a .p8 key with its new key ID replaced under load: the gateway accepts only the new certificate from the swap, the HTTP/2 API only the new key once the old pools closed, and every notification is delivered once"
    )
    func certificateAndSigningKeyReplacedUnderLoad() async throws {
        try await rotateUnderLoad(http2CertificateAuth: false)
    }

    @Test(
        "The certificate of a binary and of an HTTP/2 app replaced under load: from the swap both simulators accept only the new one, and every notification is delivered once"
    )
    func certificateReplacedUnderLoadOnBothTransports() async throws {
        try await rotateUnderLoad(http2CertificateAuth: true)
    }

    /// Produces jobs in batches of 100, each time waiting until at most 150 of those produced
    /// are without a result, until `done` holds: a steady load that keeps notifications in
    /// flight. Returns the number of jobs produced so far.
    private func feed(
        _ stack: WorkerStack,
        from first: Int,
        within timeout: Duration = .seconds(60),
        until done: () -> Bool
    ) async throws -> Int {
        var next = first
        let deadline = ContinuousClock.now + timeout
        repeat {
            try await stack.produce(Self.jobs(next..<next + 100))
            next += 100
            try await stack.readResults(timeout: .seconds(60)) { $0.count >= next - 150 }
        } while !done() && ContinuousClock.now < deadline
        return next
    }

    private func rotateUnderLoad(http2CertificateAuth: Bool) async throws {
        let stack = try await WorkerStack.start(
            http2: (badTokens: [], unregistered: [:]),
            http2CertificateAuth: http2CertificateAuth
        )
        do {
            let secret = try Self.mountSecret(stack)
            let oldKey = try String(contentsOfFile: secret.path("AuthKey.p8"), encoding: .utf8)
            let config = try String(contentsOfFile: secret.path("worker.yaml"), encoding: .utf8)
            try await stack.startWorker("w1")
            // Both pools deliver before the swap.
            var produced = try await feed(stack, from: 0) {
                Set(stack.results.compactMap { $0["app"]?.stringValue }).count == 2
            }

            let renewed = try TestCertificates()
            let newKey = TestCertificates.unrelatedKeyPEM()
            var changed = ["client.pem": renewed.client.certificatePEM, "client-key.pem": renewed.client.keyPEM]
            try stack.simulator.trustClients(caPEM: renewed.ca.certificatePEM)
            if http2CertificateAuth {
                try stack.http2Simulator?.trustClients(caPEM: renewed.ca.certificatePEM)
            } else {
                // The account holds both keys until the old one is revoked, below.
                stack.http2Simulator?.acceptProviderTokens(
                    try APNSHTTP2Simulator.verifier(
                        teamID: Self.teamID,
                        keys: [Self.oldKeyID: oldKey, Self.newKeyID: newKey]
                    )
                )
                changed["AuthKey.p8"] = newKey
                changed["worker.yaml"] = config.replacingOccurrences(
                    of: "keyId: \(Self.oldKeyID)",
                    with: "keyId: \(Self.newKeyID)"
                )
            }
            try secret.update(changed)

            // The load goes on until both pools are replaced and the old ones have finished what
            // they held and closed.
            let finished = "The replaced delivery pool finished what it held and closed"
            produced = try await feed(stack, from: produced) { Self.occurrences(of: finished, in: stack) == 2 }
            try #require(Self.occurrences(of: finished, in: stack) == 2, "\(stack.log(of: "w1"))")
            if !http2CertificateAuth {
                stack.http2Simulator?.acceptProviderTokens(
                    try APNSHTTP2Simulator.verifier(teamID: Self.teamID, keys: [Self.newKeyID: newKey])
                )
            }
            // Only the new credentials are accepted from here on.
            let revoked = produced
            produced = try await feed(stack, from: produced) { stack.results.count >= revoked + 250 }
            try await Self.expectDeliveredOnce(stack, 0..<produced)

            for app in [Self.binaryApp, Self.http2App] {
                let labels = ["app": app, "env": "production"]
                let applied = labels.merging(["result": "applied"]) { given, _ in given }
                #expect(await Self.metric(stack, "apn_worker_credential_reloads_total", applied) == 1)
                #expect(await Self.metric(stack, "apn_worker_credential_reload_failed", labels) == 0)
            }
            #expect(
                await Self.metric(stack, "apn_worker_credential_expiry_timestamp_seconds", ["app": Self.binaryApp])
                    == renewed.client.certificate.notValidAfter.timeIntervalSince1970
            )
            // No credential reload failed (other errors, a busy Redis say, are not this test's).
            #expect(!Self.errors(stack).contains { $0.hasPrefix("apps.") }, "\(Self.errors(stack))")
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }

    @Test(
        "Invalid new credential files keep the old ones delivering, log the start's sentence at error level, set the failed gauge, and SIGHUP checks them again"
    )
    func invalidFilesKeepTheOldCredentials() async throws {
        let stack = try await WorkerStack.start(http2: (badTokens: [], unregistered: [:]))
        do {
            let secret = try Self.mountSecret(stack)
            let original = try ["client.pem", "AuthKey.p8"].reduce(into: [String: String]()) { files, name in
                files[name] = try String(contentsOfFile: secret.path(name), encoding: .utf8)
            }
            let worker = try await stack.startWorker("w1")
            try await stack.produce(Self.jobs(0..<100))
            try await Self.expectDeliveredOnce(stack, 0..<100)

            try secret.update([
                "client.pem": "not a certificate\n",
                "AuthKey.p8": "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n",
            ])
            // What `apn-worker run` refuses to start with, given the same files.
            let start = try await ChildProcess(Paths.executable, ["run", "--config", stack.configPath])
                .finish(killAfter: .seconds(30))
            #expect(start.status == 2)
            let prefix = "apn-worker: "
            let sentence = try #require(
                start.stderr.split(separator: "\n").first { $0.hasPrefix(prefix) }.map {
                    String($0.dropFirst(prefix.count))
                }
            )
            #expect(sentence.hasPrefix("apps.\(Self.binaryApp).environments.production: "))

            let failing = await eventually("the failed-reload gauges at 1", within: .seconds(30)) {
                await Self.failedGauges(stack, equal: 1)
            }
            #expect(failing)
            #expect(Self.errors(stack).filter { $0 == sentence }.count == 1)
            #expect(Self.errors(stack).contains { $0.hasPrefix("apps.\(Self.http2App).environments.production: ") })

            // The old credentials go on delivering.
            try await stack.produce(Self.jobs(100..<200))
            try await Self.expectDeliveredOnce(stack, 0..<200)

            // SIGHUP checks the same files again, and logs them again.
            worker.signal(SIGHUP)
            await eventually("the sentence logged again after SIGHUP", within: .seconds(30)) {
                Self.errors(stack).filter { $0 == sentence }.count == 2
            }

            // Back to the files in use: nothing fails any more, and nothing was reloaded.
            try secret.update(original)
            let cleared = await eventually("the failed-reload gauges back at 0", within: .seconds(30)) {
                await Self.failedGauges(stack, equal: 0)
            }
            #expect(cleared)
            #expect(
                await Self.metric(stack, "apn_worker_credential_reloads_total", ["result": "applied"]) == 0
            )
            #expect(worker.isRunning)
        } catch {
            Issue.record("\(error)\nw1: \(stack.log(of: "w1"))")
        }
        await stack.shutdown()
    }
}
