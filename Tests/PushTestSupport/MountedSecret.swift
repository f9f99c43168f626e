import Foundation

/// A directory laid out as Kubernetes mounts a Secret or ConfigMap: each file is a symbolic
/// link through `..data`, itself a link to a hidden directory holding the current version. An
/// update writes a new version directory and swaps `..data` atomically (a link renamed over
/// it), so that a reader sees either every old file or every new one.
public struct MountedSecret: Sendable {
    public let directory: String

    /// Creates the directory with `files` (name → contents) as its first version.
    public init(directory: String, files: [String: String]) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try publish(files)
    }

    /// The path of a file of the secret, as a configuration names it.
    public func path(_ name: String) -> String { directory + "/" + name }

    /// Publishes a new version: `changed` files with their new contents, the others as they were.
    public func update(_ changed: [String: String]) throws {
        let current = directory + "/..data"
        var files: [String: String] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: current) {
            files[name] = try String(contentsOfFile: current + "/" + name, encoding: .utf8)
        }
        try publish(files.merging(changed) { _, new in new })
    }

    private func publish(_ files: [String: String]) throws {
        let manager = FileManager.default
        let version = "..\(UUID().uuidString.prefix(8))"
        try manager.createDirectory(atPath: directory + "/" + version, withIntermediateDirectories: false)
        for (name, contents) in files {
            try contents.write(toFile: directory + "/" + version + "/" + name, atomically: false, encoding: .utf8)
            if (try? manager.destinationOfSymbolicLink(atPath: path(name))) == nil {
                try manager.createSymbolicLink(atPath: path(name), withDestinationPath: "..data/" + name)
            }
        }
        let link = directory + "/..data_tmp"
        try manager.createSymbolicLink(atPath: link, withDestinationPath: version)
        guard rename(link, directory + "/..data") == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: directory + "/..data"])
        }
    }
}
