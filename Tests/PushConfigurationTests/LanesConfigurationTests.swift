import Foundation
import PushConfiguration
import Testing

/// `kafka.requestsTopics`: the priority lanes, and the sentences of lists that are not lanes.
@Suite struct LanesConfigurationTests {
    typealias Files = AppSettingsTests.Files

    /// The app settings' file with `lines` added under `kafka:`.
    static func parse(kafka lines: String, files: Files) throws(ConfigurationError) -> WorkerConfiguration {
        let text = AppSettingsTests.yaml(files: files).replacingOccurrences(
            of: "  bootstrapServers: \"127.0.0.1:9092\"\n",
            with: "  bootstrapServers: \"127.0.0.1:9092\"\n" + lines
        )
        return try AppSettingsTests.parse(text)
    }

    static func error(kafka lines: String, files: Files) -> String? {
        do {
            _ = try parse(kafka: lines, files: files)
            return nil
        } catch {
            return error.message
        }
    }

    @Test("requestsTopics lists the lanes in priority order; requestsTopic is one lane")
    func lanesAreReadInOrder() throws {
        let files = try Files()
        let lanes = try Self.parse(kafka: "  requestsTopics: [apn.requests.urgent, apn.requests]\n", files: files)
        #expect(lanes.kafka.requestsTopics == ["apn.requests.urgent", "apn.requests"])
        #expect(lanes.kafka.requestsTopic == "apn.requests.urgent")
        let one = try Self.parse(kafka: "  requestsTopic: push.requests\n", files: files)
        #expect(one.kafka.requestsTopics == ["push.requests"])
        let none = try Self.parse(kafka: "", files: files)
        #expect(none.kafka.requestsTopics == ["apn.requests"])
    }

    @Test("Lists that are not lanes get a sentence naming the setting")
    func badLanesAreRefused() throws {
        let files = try Files()
        let both = Self.error(kafka: "  requestsTopic: a\n  requestsTopics: [b, c]\n", files: files)
        #expect(both?.contains("kafka.requestsTopic and kafka.requestsTopics are both set") == true, "\(both ?? "")")
        let twice = Self.error(kafka: "  requestsTopics: [a, b, a]\n", files: files)
        #expect(twice?.contains("names a twice") == true, "\(twice ?? "")")
        let results = Self.error(kafka: "  requestsTopics: [a, apn.results]\n", files: files)
        #expect(
            results?.contains("kafka.requestsTopics[1] is apn.results, the results topic") == true,
            "\(results ?? "")"
        )
        let empty = Self.error(kafka: "  requestsTopics: []\n", files: files)
        #expect(empty?.contains("must be a list of 1 to 8 Kafka topics") == true, "\(empty ?? "")")
        let many = Self.error(kafka: "  requestsTopics: [a, b, c, d, e, f, g, h, i]\n", files: files)
        #expect(many?.contains("must be a list of 1 to 8 Kafka topics") == true, "\(many ?? "")")
        let illegal = Self.error(kafka: "  requestsTopics: [good, \"bad topic\"]\n", files: files)
        #expect(illegal?.contains("kafka.requestsTopics[1] must be a Kafka topic name") == true, "\(illegal ?? "")")
    }
}

/// `kafka.parkedTopic` and `worker.moveAsideAfter`: where an unreachable app's notifications
/// move aside, and when.
@Suite struct ParkedTopicConfigurationTests {
    typealias Files = AppSettingsTests.Files

    @Test("parkedTopic is read after the lanes; moveAsideAfter defaults to 1,000")
    func parkedTopicIsReadLast() throws {
        let files = try Files()
        let none = try LanesConfigurationTests.parse(kafka: "", files: files)
        #expect(none.kafka.parkedTopic == nil)
        #expect(none.kafka.consumedTopics == ["apn.requests"])
        #expect(none.worker.moveAsideAfter == 1_000)
        let parked = try LanesConfigurationTests.parse(
            kafka: "  requestsTopics: [urgent, apn.requests]\n  parkedTopic: apn.requests.parked\n",
            files: files
        )
        #expect(parked.kafka.parkedTopic == "apn.requests.parked")
        #expect(parked.kafka.consumedTopics == ["urgent", "apn.requests", "apn.requests.parked"])
        #expect(parked.kafka.highestLane == "urgent", "the parked topic is not a priority lane")
    }

    @Test("A parked topic the worker already reads or writes is refused with a sentence")
    func aTopicInUseIsRefused() throws {
        let files = try Files()
        for topic in ["apn.requests", "apn.results"] {
            let message = LanesConfigurationTests.error(kafka: "  parkedTopic: \(topic)\n", files: files)
            #expect(
                message?.contains(
                    "kafka.parkedTopic is \"\(topic)\", a topic the worker already reads jobs from or writes results to"
                ) == true,
                "\(message ?? "")"
            )
        }
        let illegal = LanesConfigurationTests.error(kafka: "  parkedTopic: \"bad topic\"\n", files: files)
        #expect(illegal?.contains("kafka.parkedTopic must be a Kafka topic name") == true, "\(illegal ?? "")")
    }

    @Test("moveAsideAfter is 1 to 1,000,000")
    func moveAsideAfterIsBounded() throws {
        let files = try Files()
        let text = AppSettingsTests.yaml(files: files) + "worker:\n  moveAsideAfter: 250\n"
        #expect(try AppSettingsTests.parse(text).worker.moveAsideAfter == 250)
        do {
            _ = try AppSettingsTests.parse(AppSettingsTests.yaml(files: files) + "worker:\n  moveAsideAfter: 0\n")
            Issue.record("moveAsideAfter 0 was accepted")
        } catch {
            #expect(error.message.contains("worker.moveAsideAfter"), "\(error.message)")
        }
    }
}
