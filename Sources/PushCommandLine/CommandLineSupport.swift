import APNSCore
import ArgumentParser
import Foundation

/// A failure the user can act on: printed as one sentence on stderr, exit code 2.
public struct UsageFailure: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }

    public init(message: String) {
        self.message = message
    }
}

extension AsyncParsableCommand {
    /// Runs `body`, turning ``UsageFailure`` and other errors into a sentence and exit code 2.
    public func reportingFailures(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let failure as UsageFailure {
            printError(failure.message)
            throw ExitCode(2)
        } catch let error as ExitCode {
            throw error
        } catch {
            printError("\(error)")
            throw ExitCode(2)
        }
    }
}

/// Writes `message` to stderr, after the program's name.
public func printError(_ message: String) {
    let program = URL(fileURLWithPath: CommandLine.arguments[0]).lastPathComponent
    FileHandle.standardError.write(Data("\(program): \(message)\n".utf8))
}

/// Compact JSON for one summary line, keys in the given order.
public func jsonLine(_ fields: [(String, JSONValue)]) -> String {
    var out = "{"
    for (index, (key, value)) in fields.enumerated() {
        if index > 0 { out += "," }
        out += String(decoding: JSONValue.string(key).serialized(), as: UTF8.self)
        out += ":"
        out += String(decoding: value.serialized(), as: UTF8.self)
    }
    return out + "}"
}
