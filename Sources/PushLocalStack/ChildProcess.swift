import APNSCore
import Foundation

/// A child process with its output captured, killed when the test is done with it.
public final class ChildProcess: @unchecked Sendable {
    /// Runs `executable` to its end, on the calling thread, with no input; its status and its
    /// standard output and error together. Throws when it cannot be started.
    public static func runToEnd(_ executable: String, _ arguments: [String]) throws -> (status: Int32, text: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    // Only used from the test that owns it.
    public let process = Process()
    private let stdoutPipe = Pipe()
    private let stderrPipe = Pipe()
    private let stdinPipe: Pipe?
    private var buffered = Data()
    private var capturesStderr = true

    /// Starts `executable`. With `stderrFile`, standard error goes to that file (for chatty
    /// processes whose log would otherwise fill the pipe); `environment` adds variables. With
    /// `input`, its standard input is a pipe that ``write(_:)`` writes to.
    public init(
        _ executable: String,
        _ arguments: [String],
        stderrFile: String? = nil,
        environment: [String: String] = [:],
        input: Bool = false
    ) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        // Never the test run's own standard input: a child reading a terminal from the
        // background would be stopped (SIGTTIN), and one reading a pipe would take the run's input.
        stdinPipe = input ? Pipe() : nil
        process.standardInput = stdinPipe ?? FileHandle.nullDevice
        process.standardOutput = stdoutPipe
        if let stderrFile {
            _ = FileManager.default.createFile(atPath: stderrFile, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: stderrFile)
            capturesStderr = false
        } else {
            process.standardError = stderrPipe
        }
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        try process.run()
    }

    public var isRunning: Bool { process.isRunning }

    deinit {
        if process.isRunning { process.terminate() }
    }

    /// The next line of standard output, or nil at end of output. Blocks on the pipe, off the
    /// cooperative thread pool.
    public func readLine() async -> String? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { [self] in
                while true {
                    if let newline = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                        let line = String(decoding: buffered[buffered.startIndex..<newline], as: UTF8.self)
                        buffered = Data(buffered[buffered.index(after: newline)...])
                        continuation.resume(returning: line)
                        return
                    }
                    let chunk = stdoutPipe.fileHandleForReading.availableData
                    if chunk.isEmpty {
                        continuation.resume(
                            returning: buffered.isEmpty ? nil : String(decoding: buffered, as: UTF8.self)
                        )
                        buffered = Data()
                        return
                    }
                    buffered.append(chunk)
                }
            }
        }
    }

    /// Waits for the process to exit; returns its status, the rest of stdout, and stderr.
    /// With `killAfter`, a process still running after that long is killed (SIGKILL), so that a
    /// child that does not stop fails its test (status 9) instead of holding the run forever.
    public func finish(killAfter: Duration? = nil) async -> (status: Int32, stdout: String, stderr: String) {
        if let killAfter {
            let pid = process.processIdentifier
            DispatchQueue.global().asyncAfter(deadline: .now() + killAfter.timeInterval) { [self] in
                if process.isRunning { kill(pid, SIGKILL) }
            }
        }
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async { [self] in
                // Both pipes are read at once: a child that fills the one not being read (64 KB)
                // would wait for it forever, and never close the other.
                let errors = DispatchGroup()
                nonisolated(unsafe) var err = Data()
                if capturesStderr {
                    DispatchQueue.global().async(group: errors) { [self] in
                        err = stderrPipe.fileHandleForReading.readDataToEndOfFile()
                    }
                }
                let out = stdoutPipe.fileHandleForReading.readDataToEndOfFile()
                errors.wait()
                process.waitUntilExit()
                let rest = String(decoding: buffered + out, as: UTF8.self)
                continuation.resume(returning: (process.terminationStatus, rest, String(decoding: err, as: UTF8.self)))
            }
        }
    }

    /// Writes `text` to the process's standard input (started with `input`).
    public func write(_ text: String) {
        stdinPipe?.fileHandleForWriting.write(Data(text.utf8))
    }

    public func signal(_ sig: Int32) {
        kill(process.processIdentifier, sig)
    }
}
