import APNSCore

/// A config file's contents as a tree, the same for YAML and JSON.
///
/// Scalars keep the text they were written with, so that a string setting written as `0123`
/// stays `0123`, and a kind telling how the file's syntax typed them.
enum ConfigNode: Sendable {
    case null
    case scalar(ConfigScalar)
    case list([ConfigNode])
    case map([ConfigEntry])

    /// A short description of the value for error messages: a string in quotes, a number or
    /// boolean as written, or the kind of collection.
    var shown: String {
        switch self {
        case .null: "null"
        case .scalar(let scalar): scalar.shown
        case .list: "a list"
        case .map: "a mapping"
        }
    }
}

extension ConfigNode {
    /// A JSON value as a tree. JSON objects have no order: their members are sorted by name,
    /// so that the first unknown setting named is always the same one.
    init(_ value: JSONValue) {
        switch value {
        case .null: self = .null
        case .bool(let flag): self = .scalar(ConfigScalar(text: flag ? "true" : "false", kind: .boolean))
        case .int(let number): self = .scalar(ConfigScalar(text: String(number), kind: .integer))
        case .double(let number): self = .scalar(ConfigScalar(text: String(number), kind: .float))
        case .string(let text): self = .scalar(ConfigScalar(text: text, kind: .string))
        case .array(let items): self = .list(items.map(ConfigNode.init))
        case .object(let members):
            self = .map(
                members.sorted { $0.key < $1.key }.map { ConfigEntry(key: $0.key, value: ConfigNode($0.value)) }
            )
        }
    }
}

/// One `key: value` pair of a mapping.
struct ConfigEntry: Sendable {
    var key: String
    var value: ConfigNode
}

/// A scalar value and how the file typed it, or where else it came from.
struct ConfigScalar: Sendable {
    enum Kind: Sendable {
        case string
        case integer
        case float
        case boolean
        /// Text from an environment variable or a flag: white space around numbers, booleans
        /// and choices is ignored.
        case text
    }

    var text: String
    var kind: Kind
    /// The environment variable or flag that set the value; `nil` for the config file.
    var origin: String? = nil

    var shown: String {
        kind == .string || kind == .text ? quoted(text) : text
    }
}

/// `text` in double quotes with quotes, backslashes and control characters escaped, for
/// error messages.
func quoted(_ text: String, limit: Int = 200) -> String {
    var result = "\""
    var count = 0
    for scalar in text.unicodeScalars {
        if count == limit {
            result += "..."
            break
        }
        count += 1
        switch scalar {
        case "\"": result += "\\\""
        case "\\": result += "\\\\"
        case "\n": result += "\\n"
        case "\r": result += "\\r"
        case "\t": result += "\\t"
        default:
            if scalar.value < 0x20 || scalar.value == 0x7F {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
    }
    return result + "\""
}

/// Guards against files that would take unreasonable time or memory to turn into a tree.
enum ConfigLimits {
    /// Largest config file read, in bytes.
    static let maxFileBytes = 10 * 1024 * 1024
    /// Deepest nesting of lists and mappings.
    static let maxDepth = 64
    /// Most values in the tree after aliases are expanded.
    static let maxNodes = 1_000_000
}
