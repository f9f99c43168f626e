import Foundation
import PushConfiguration
import PushTestSupport
import Testing

/// The configurations shipped in `deploy/` load with the worker's own loader, with their
/// credential paths pointed at placeholder files.
@Suite struct ShippedConfigurationTests {
    /// A directory standing in for `/secrets`, with a placeholder for every file the shipped
    /// configurations name.
    final class Secrets {
        let directory: String

        init() throws {
            directory = try Paths.temporaryDirectory()
            for name in ["cert.pem", "key.pem", "client.p12", "passphrase", "AuthKey_ABCDE12345.p8"] {
                _ = FileManager.default.createFile(atPath: directory + "/" + name, contents: Data("placeholder\n".utf8))
            }
        }

        deinit { try? FileManager.default.removeItem(atPath: directory) }

        func relocate(_ text: String) -> String {
            text.replacingOccurrences(of: "/secrets/", with: directory + "/")
        }
    }

    static func deployFile(_ name: String) throws -> String {
        try String(contentsOfFile: Paths.root + "/deploy/" + name, encoding: .utf8)
    }

    @Test("deploy/config.example.yaml loads, and so does its commented HTTP/2 app once uncommented")
    func exampleConfiguration() throws {
        let secrets = try Secrets()
        let text = try Self.deployFile("config.example.yaml")
        let config = try WorkerConfiguration.parse(
            fileContents: secrets.relocate(text),
            path: "/etc/apn-worker/config.yaml"
        )
        #expect(config.apps.map(\.key) == ["com.example.app"])
        #expect(config.kafka.bootstrapServers == "kafka:9092")

        // Uncomment the HTTP/2 example: the lines after its heading, up to the end of the file.
        var lines = text.components(separatedBy: "\n")
        let heading = try #require(lines.firstIndex { $0.contains("An app on Apple's HTTP/2 provider API") })
        for index in (heading + 1)..<lines.count where lines[index].hasPrefix("  # ") {
            lines[index] = "  " + lines[index].dropFirst(4)
        }
        let withHTTP2 = try WorkerConfiguration.parse(
            fileContents: secrets.relocate(lines.joined(separator: "\n")),
            path: "/etc/apn-worker/config.yaml"
        )
        #expect(withHTTP2.apps.map(\.key).sorted() == ["com.example.app", "com.example.other"])
    }

    @Test("deploy/k8s/configmap.yaml: its config.yaml loads with the environment its other ConfigMap sets")
    func kubernetesConfigMap() throws {
        let secrets = try Secrets()
        let lines = try Self.deployFile("k8s/configmap.yaml").components(separatedBy: "\n")
        // The block scalar under `config.yaml: |`, dedented.
        let start = try #require(lines.firstIndex { $0.trimmingCharacters(in: .whitespaces) == "config.yaml: |" })
        var block: [String] = []
        for line in lines[(start + 1)...] {
            if !line.isEmpty && !line.hasPrefix("    ") { break }
            block.append(String(line.dropFirst(min(4, line.count))))
        }
        // The environment from the apn-worker-env ConfigMap's data.
        var environment: [String: String] = [:]
        for line in lines where line.hasPrefix("  APN_WORKER_") {
            let parts = line.dropFirst(2).split(separator: ":", maxSplits: 1)
            environment[String(parts[0])] = parts[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(
                in: CharacterSet(charactersIn: "\"")
            )
        }
        #expect(Set(environment.keys) == ["APN_WORKER_KAFKA_BOOTSTRAP_SERVERS", "APN_WORKER_REDIS_URL"])
        environment["APN_WORKER_ID"] = "apn-worker-7d9c5-x2x8q"
        let config = try WorkerConfiguration.parse(
            fileContents: secrets.relocate(block.joined(separator: "\n")),
            path: "/etc/apn-worker/config.yaml",
            environment: environment
        )
        #expect(config.apps.map(\.key) == ["com.example.app"])
        #expect(config.kafka.bootstrapServers.hasPrefix("kafka-0.kafka.kafka.svc.cluster.local:9092"))
        #expect(config.worker.id == "apn-worker-7d9c5-x2x8q")
    }
}
