import Testing
import Yams

/// `deploy/k8s/networkpolicy.yaml`, as `kubectl kustomize deploy/k8s` renders it: the status port
/// is open to the monitoring namespace and to nothing else.
extension MonitoringFilesTests {
    @Test(
        "kubectl kustomize deploy/k8s renders a NetworkPolicy that admits the status port only from the monitoring namespace"
    )
    func networkPolicy() async throws {
        let objects = try await Self.renderedKustomization()
        let policy = try #require(objects["NetworkPolicy"]?.first, "no NetworkPolicy")
        #expect(objects["NetworkPolicy"]?.count == 1)
        #expect(policy["apiVersion"]?.string == "networking.k8s.io/v1")
        #expect(policy["metadata"]?["namespace"]?.string == "apn-worker")

        // It selects the worker pods, by the labels their template gives them.
        let statefulSet = try #require(objects["StatefulSet"]?.first)
        let template = try #require(statefulSet["spec"]?["template"])
        let podLabels = try #require(template["metadata"]?["labels"]?.mapping)
        let selected = try #require(policy["spec"]?["podSelector"]?["matchLabels"]?.mapping, "no podSelector")
        #expect(!selected.isEmpty && selected.allSatisfy { podLabels[$0.key] == $0.value })

        // Ingress only: the workers' own connections to Kafka, Redis and Apple stay open.
        #expect(policy["spec"]?["policyTypes"]?.array().compactMap(\.string) == ["Ingress"])

        // Every rule names who it admits (a rule without `from` admits everyone) and only the
        // status port; the one source is the monitoring namespace, as a whole.
        let container = try #require(template["spec"]?["containers"]?.array().first)
        let statusPort = try #require(container["ports"]?.array().first { $0["name"]?.string == "status" })
        let rules = try #require(policy["spec"]?["ingress"]?.array(), "no ingress rules")
        #expect(rules.count == 1)
        for rule in rules {
            let ports = rule["ports"]?.array() ?? []
            #expect(!ports.isEmpty, "a rule admits every port")
            for port in ports {
                #expect(
                    port["port"]?.string == "status" || port["port"]?.int == statusPort["containerPort"]?.int,
                    "a rule admits port \(port["port"]?.string ?? "?")"
                )
                #expect(port["protocol"]?.string == "TCP")
            }
            let sources = rule["from"]?.array() ?? []
            #expect(!sources.isEmpty, "a rule admits every source")
            for source in sources {
                #expect(source["ipBlock"] == nil, "a rule admits an address block")
                #expect(source["podSelector"] == nil, "a rule admits pods by label")
                let namespace = source["namespaceSelector"]?["matchLabels"]?.mapping
                #expect(
                    namespace?.count == 1 && namespace?["kubernetes.io/metadata.name"]?.string == "monitoring",
                    "a rule admits another namespace than monitoring"
                )
            }
        }
    }
}
