/// An optional field of a status document that is written as `null` when it has no value,
/// rather than left out, so that every document has the same keys. A missing key reads as
/// `nil`, so documents of workers that do not write the field still read.
@propertyWrapper
public struct WrittenAsNull<Value: Codable & Sendable & Hashable>: Codable, Sendable, Hashable {
    public var wrappedValue: Value?

    public init(wrappedValue: Value?) {
        self.wrappedValue = wrappedValue
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue {
            try container.encode(wrappedValue)
        } else {
            try container.encodeNil()
        }
    }
}

extension KeyedDecodingContainer {
    /// A missing key is a field without a value (the synthesized decoding asks for every key).
    public func decode<Value>(_ type: WrittenAsNull<Value>.Type, forKey key: Key) throws -> WrittenAsNull<Value> {
        try decodeIfPresent(type, forKey: key) ?? WrittenAsNull(wrappedValue: nil)
    }
}
