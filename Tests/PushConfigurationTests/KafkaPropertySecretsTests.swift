import Foundation
import PushConfiguration
import Testing

/// librdkafka properties: never repeated with their value in a message, and read from files
/// (`kafka.propertyFiles`, `--kafka-property-file`) for secrets.
@Suite struct KafkaPropertySecretsTests {
    typealias Files = AppSettingsTests.Files

    // MARK: librdkafka properties

    @Test("--kafka-property without = is refused without repeating what was given")
    func kafkaPropertyWithoutEquals() throws {
        let files = try Files()
        let message = try #require(
            SecretSettings.error(
                SecretSettings.yaml(files: files),
                overrides: ConfigurationOverrides(kafkaProperties: ["sasl.password:Hunter2"])
            )
        )
        #expect(message.hasPrefix("--kafka-property must be written name=value"), "\(message)")
        #expect(!message.contains("Hunter2"), "\(message)")
    }

    @Test("kafka.propertyFiles and --kafka-property-file read a property's value from a file, its newline dropped")
    func kafkaPropertyFiles() throws {
        let files = try Files()
        let fromFile = SecretSettings.write("kafka-password", "file-secret\n", in: files)
        let fromFlag = SecretSettings.write("flag-password", "flag-secret\r\n", in: files)
        let kafka = "  propertyFiles:\n    sasl.password: \(fromFile)\n  properties:\n    sasl.username: app"
        let config = try SecretSettings.load(SecretSettings.yaml(files: files, kafka: kafka))
        #expect(config.kafka.properties == ["sasl.password": "file-secret", "sasl.username": "app"])

        let flag = ConfigurationOverrides(kafkaPropertyFiles: ["sasl.password=\(fromFlag)"])
        #expect(
            try SecretSettings.load(SecretSettings.yaml(files: files, kafka: kafka), overrides: flag).kafka.properties[
                "sasl.password"
            ]
                == "flag-secret"
        )
        #expect(config.warnings.isEmpty)
    }

    @Test("A property given both as a value and from a file by one source is refused, naming both")
    func kafkaPropertyGivenTwoWays() throws {
        let files = try Files()
        let path = SecretSettings.write("kafka-password", "secret\n", in: files)
        let kafka = "  propertyFiles:\n    sasl.password: \(path)\n  properties:\n    sasl.password: other"
        #expect(
            SecretSettings.error(SecretSettings.yaml(files: files, kafka: kafka))
                == "kafka.properties.sasl.password and kafka.propertyFiles.sasl.password both set the librdkafka "
                + "property sasl.password; give it one way only."
        )
        let flags = ConfigurationOverrides(
            kafkaProperties: ["sasl.password=x"],
            kafkaPropertyFiles: ["sasl.password=\(path)"]
        )
        #expect(
            SecretSettings.error(SecretSettings.yaml(files: files), overrides: flags)
                == "--kafka-property sasl.password and --kafka-property-file sasl.password both set the librdkafka "
                + "property sasl.password; give it one way only."
        )
        let missing = SecretSettings.error(
            SecretSettings.yaml(files: files),
            overrides: ConfigurationOverrides(kafkaPropertyFiles: ["sasl.password=\(files.path("none"))"])
        )
        #expect(
            missing == "--kafka-property-file sasl.password: cannot read \(files.path("none")); check that the file "
                + "exists and is readable."
        )
    }
}
