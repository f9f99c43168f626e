import APNSCore
import Foundation
import Yams

/// Turns the text of a config file into a ``ConfigNode`` tree.
///
/// The syntax is chosen by the file's extension: `.yaml` and `.yml` are YAML (through Yams),
/// `.json` is JSON (through APNSCore's strict parser, the one that reads jobs), and anything
/// else is tried as JSON first, then as YAML. Syntax errors become a ``ConfigurationError`` of
/// the form `config file PATH: line L, column C: problem.`
enum ConfigFileParser {
    enum Syntax {
        case yaml
        case json
        case either
    }

    static func syntax(forPath path: String) -> Syntax {
        switch URL(fileURLWithPath: path).pathExtension.lowercased() {
        case "yaml", "yml": .yaml
        case "json": .json
        default: .either
        }
    }

    static func parse(_ text: String, path: String) throws(ConfigurationError) -> ConfigNode {
        if text.utf8.count > ConfigLimits.maxFileBytes {
            throw ConfigurationError(
                "config file \(path) is larger than \(ConfigLimits.maxFileBytes / 1024 / 1024) MiB; "
                    + "check that it is the right file."
            )
        }
        switch syntax(forPath: path) {
        case .yaml:
            return try parseYAML(text, path: path)
        case .json:
            return try parseJSON(text, path: path)
        case .either:
            if let value = try? JSONValue.parse(Self.withoutByteOrderMark(text).utf8, maxDepth: ConfigLimits.maxDepth) {
                return ConfigNode(value)
            }
            // A document that starts like a JSON object or array was meant to be JSON: report
            // the JSON error, which is more precise than YAML's for it.
            let first = text.unicodeScalars.first { !" \t\r\n\u{FEFF}".unicodeScalars.contains($0) }
            if first == "{" || first == "[" {
                return try parseJSON(text, path: path)
            }
            return try parseYAML(text, path: path)
        }
    }

    // MARK: - JSON

    static func parseJSON(_ text: String, path: String) throws(ConfigurationError) -> ConfigNode {
        let body = withoutByteOrderMark(text)
        do {
            return ConfigNode(try JSONValue.parse(body.utf8, maxDepth: ConfigLimits.maxDepth))
        } catch {
            let (line, column) = lineAndColumn(ofByteOffset: error.offset, in: body)
            // The parser's message starts "invalid JSON at byte N: "; the line and column replace that.
            let problem =
                error.message.hasPrefix("invalid JSON at byte ")
                ? error.message.drop { $0 != ":" }.dropFirst(2) : Substring(error.message)
            throw ConfigurationError("config file \(path): line \(line), column \(column): \(problem).")
        }
    }

    /// A byte order mark is allowed before a JSON config file's text.
    private static func withoutByteOrderMark(_ text: String) -> Substring {
        text.unicodeScalars.first == "\u{FEFF}" ? Substring(text.unicodeScalars.dropFirst()) : Substring(text)
    }

    /// The 1-based line and column (counted in Unicode scalars) of a UTF-8 byte offset.
    private static func lineAndColumn(ofByteOffset offset: Int, in text: Substring) -> (Int, Int) {
        var line = 1
        var column = 1
        for byte in text.utf8.prefix(offset) {
            if byte == UInt8(ascii: "\n") {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
        }
        return (line, column)
    }

    // MARK: - YAML

    static func parseYAML(_ text: String, path: String) throws(ConfigurationError) -> ConfigNode {
        if let line = lineExceedingFlowDepth(text) {
            throw ConfigurationError(
                "config file \(path): line \(line): lists and mappings are nested more than "
                    + "\(ConfigLimits.maxDepth) levels deep."
            )
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch let error as YamlError {
            throw ConfigurationError("config file \(path): \(describe(error)).")
        } catch {
            throw ConfigurationError("config file \(path): \(error).")
        }
        guard let root else { return .null }
        var converter = YAMLConverter(path: path)
        return try converter.convert(root, keyPath: [], depth: 0)
    }

    /// libyaml's parser is not recursive, but building the node tree is; refuse flow
    /// collections (`[[[...`) nested deeper than the limit before handing the text over.
    /// Brackets inside quoted strings may be counted too, which only matters for text that
    /// has dozens of unclosed brackets.
    private static func lineExceedingFlowDepth(_ text: String) -> Int? {
        var depth = 0
        var line = 1
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > ConfigLimits.maxDepth { return line }
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                depth = max(0, depth - 1)
            case UInt8(ascii: "\n"):
                line += 1
            default:
                break
            }
        }
        return nil
    }

    /// `line L, column C: problem (context)` from libyaml's error.
    private static func describe(_ error: YamlError) -> String {
        func trimmed(_ text: String) -> String {
            var text = text.trimmingCharacters(in: .whitespacesAndNewlines)
            while text.hasSuffix(".") { text.removeLast() }
            return text
        }
        func withContext(_ context: YamlError.Context?, _ problem: String, _ mark: Mark) -> String {
            var result = "line \(mark.line), column \(mark.column): \(trimmed(problem))"
            if let context, !context.text.isEmpty {
                result +=
                    " (\(trimmed(context.text)) that starts at line \(context.mark.line), "
                    + "column \(context.mark.column))"
            }
            return result
        }
        switch error {
        case let .composer(_, problem, mark, _) where problem == "but found another document":
            return "line \(mark.line), column \(mark.column): a second YAML document starts here, "
                + "but a config file holds only one"
        case let .scanner(context, problem, mark, yaml) where scalar(at: mark, in: yaml) == "\t":
            return withContext(context, problem, mark) + "; YAML cannot be indented with tabs"
        case let .scanner(context, problem, mark, _),
            let .parser(context, problem, mark, _),
            let .composer(context, problem, mark, _):
            return withContext(context, problem, mark)
        case let .reader(problem, offset, _, yaml):
            if let offset, let (line, column) = lineAndColumn(ofCharacterOffset: offset, in: yaml) {
                return "line \(line), column \(column): \(trimmed(problem))"
            }
            return trimmed(problem)
        default:
            return trimmed(error.description)
        }
    }

    /// The Unicode scalar at a 1-based line and column, if there is one.
    private static func scalar(at mark: Mark, in text: String) -> Unicode.Scalar? {
        var line = 1
        var column = 1
        for scalar in text.unicodeScalars {
            if line == mark.line && column == mark.column { return scalar }
            if line > mark.line { return nil }
            if scalar == "\n" {
                line += 1
                column = 1
            } else {
                column += 1
            }
        }
        return nil
    }

    private static func lineAndColumn(ofCharacterOffset offset: Int, in text: String) -> (Int, Int)? {
        guard offset >= 0 else { return nil }
        var line = 1
        var column = 1
        var seen = 0
        for character in text {
            if seen == offset { return (line, column) }
            if character == "\n" || character == "\r\n" {
                line += 1
                column = 1
            } else {
                column += 1
            }
            seen += 1
        }
        return seen == offset ? (line, column) : nil
    }
}

/// Converts Yams' node tree into a ``ConfigNode`` tree: resolves scalar types, applies merge
/// keys (`<<: *defaults`), rejects duplicate keys and non-scalar keys, and bounds the size of
/// the result so that aliases cannot blow it up.
private struct YAMLConverter {
    let path: String
    var nodeCount = 0

    init(path: String) {
        self.path = path
    }

    private func fail(_ node: Node, _ message: String) -> ConfigurationError {
        if let mark = node.mark {
            return ConfigurationError("config file \(path): line \(mark.line), column \(mark.column): \(message).")
        }
        return ConfigurationError("config file \(path): \(message).")
    }

    private static func dotted(_ keyPath: [String]) -> String {
        keyPath.isEmpty ? "the top level" : keyPath.joined(separator: ".")
    }

    mutating func convert(_ node: Node, keyPath: [String], depth: Int) throws(ConfigurationError) -> ConfigNode {
        nodeCount += 1
        if nodeCount > ConfigLimits.maxNodes {
            throw fail(node, "the document has more than \(ConfigLimits.maxNodes) values once aliases are expanded")
        }
        if depth > ConfigLimits.maxDepth {
            throw fail(node, "lists and mappings are nested more than \(ConfigLimits.maxDepth) levels deep")
        }
        switch node {
        case .scalar(let scalar):
            return Self.convert(scalar, tag: node.tag)
        case .sequence(let sequence):
            var items: [ConfigNode] = []
            for item in sequence {
                items.append(try convert(item, keyPath: keyPath, depth: depth + 1))
            }
            return .list(items)
        case .mapping(let mapping):
            return .map(try entries(of: mapping, keyPath: keyPath, depth: depth))
        }
    }

    private static func convert(_ scalar: Node.Scalar, tag: Tag) -> ConfigNode {
        switch Tag.Name(rawValue: tag.description) {
        case .null:
            return .null
        case .bool where Bool.construct(from: scalar) != nil:
            return .scalar(ConfigScalar(text: scalar.string, kind: .boolean))
        case .int:
            return .scalar(ConfigScalar(text: scalar.string, kind: .integer))
        case .float:
            return .scalar(ConfigScalar(text: scalar.string, kind: .float))
        default:
            return .scalar(ConfigScalar(text: scalar.string, kind: .string))
        }
    }

    private mutating func entries(
        of mapping: Node.Mapping,
        keyPath: [String],
        depth: Int
    ) throws(ConfigurationError) -> [ConfigEntry] {
        var explicit: [ConfigEntry] = []
        var explicitKeys: Set<String> = []
        var merged: [ConfigEntry] = []
        for (keyNode, valueNode) in mapping {
            guard case .scalar(let keyScalar) = keyNode else {
                throw fail(keyNode, "a key in \(Self.dotted(keyPath)) is a list or mapping; keys must be plain text")
            }
            if Tag.Name(rawValue: keyNode.tag.description) == .merge {
                // `<<: *defaults` or `<<: [*a, *b]`: earlier sources win over later ones,
                // and explicit keys over all of them.
                let sources: [Node]
                switch valueNode {
                case .mapping: sources = [valueNode]
                case .sequence(let sequence): sources = Array(sequence)
                case .scalar: sources = []
                }
                if sources.isEmpty || sources.contains(where: { $0.mapping == nil }) {
                    throw fail(
                        valueNode,
                        "a merge key (<<) in \(Self.dotted(keyPath)) must refer to a mapping or a list of mappings"
                    )
                }
                var mergedKeys = Set(merged.map(\.key))
                for source in sources {
                    guard case .mapping(let sourceMapping) = source else { continue }
                    for entry in try entries(of: sourceMapping, keyPath: keyPath, depth: depth)
                    where mergedKeys.insert(entry.key).inserted {
                        merged.append(entry)
                    }
                }
                continue
            }
            let key = keyScalar.string
            if !explicitKeys.insert(key).inserted {
                throw fail(keyNode, "\((keyPath + [key]).joined(separator: ".")) is set twice; keep one")
            }
            let value = try convert(valueNode, keyPath: keyPath + [key], depth: depth + 1)
            explicit.append(ConfigEntry(key: key, value: value))
        }
        return merged.filter { !explicitKeys.contains($0.key) } + explicit
    }
}
