import Testing

@testable import PushKafka

/// A property librdkafka refuses is named in the error, never with its value: the value of a
/// misspelt `sasl.password` is still a password.
@Suite struct PropertyRefusalTests {
    @Test("An unknown property (a misspelt sasl.password) is named without its value")
    func unknownPropertyByNameOnly() {
        let secret = "Hunter2/Secret#x"
        do {
            _ = try KafkaProducer(configuration: KafkaConfiguration(["sasl.pasword": secret]))
            Issue.record("librdkafka accepted sasl.pasword")
        } catch {
            #expect(error.message.contains("'sasl.pasword'"), "\(error.message)")
            #expect(!error.message.contains("Hunter2"), "\(error.message)")
            #expect(!"\(error)".contains("Hunter2"), "\(error)")
        }
    }

    @Test("A refused value is not shown, in librdkafka's sentence either", arguments: ["acks", "session.timeout.ms"])
    func refusedValueIsNotShown(property: String) {
        let value = "s3cret-Value"
        do {
            _ = try KafkaConsumer(configuration: KafkaConfiguration(["group.id": "g", property: value]))
            Issue.record("librdkafka accepted \(property)=\(value)")
        } catch {
            #expect(error.message.contains("'\(property)'"), "\(error.message)")
            #expect(!error.message.contains("s3cret"), "\(error.message)")
            #expect(error.name == "_INVALID_ARG")
        }
    }

    @Test("The value is masked as a whole word only, so a range that contains its digits stays readable")
    func maskingWholeWords() {
        #expect(
            KafkaConfiguration.masking("0", in: #"value 0 is outside allowed range 1..1000"#)
                == "value *** is outside allowed range 1..1000"
        )
        #expect(
            KafkaConfiguration.masking("pw", in: #"Invalid value "pw" for configuration property "x" (pwd)"#)
                == #"Invalid value "***" for configuration property "x" (pwd)"#
        )
        #expect(KafkaConfiguration.masking("", in: "text") == "text")
    }

    @Test("A sentence that still shows part of a long value (cut short) is left out")
    func truncatedValue() {
        let value = String(repeating: "k", count: 600)
        let error = KafkaConfiguration.refusal(
            name: "ssl.key.pem",
            value: value,
            unknown: false,
            detail: "Invalid value \"" + String(repeating: "k", count: 480) + "\" for configuration property"
        )
        #expect(!error.message.contains("kkkkkkkk"), "\(error.message)")
        #expect(error.message.contains("'ssl.key.pem'"))
    }
}
