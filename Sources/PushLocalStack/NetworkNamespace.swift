import CNetNamespace
import Foundation
import Synchronization

/// A network namespace of its own (`ip netns add`), with only its loopback interface, up: a
/// worker started in it (``command(_:)``) reaches nothing outside except through the listeners
/// that ``listen(port:)`` makes inside it (docs/architecture.md, "The partition harness").
///
/// Named `apnw-<pid>-<n>`, `pid` being the process that made it, so that ``sweepStale()`` can
/// remove what a process killed before its cleanup left behind. Creating one needs root.
public final class NetworkNamespace: Sendable {
    static let prefix = "apnw-"
    private static let counter = Counter()

    public let name: String
    /// The file that names it, which `setns` opens.
    public var path: String { "/run/netns/\(name)" }

    /// Once per process, before its first namespace: what killed runs left behind goes.
    private static let swept: Void = sweepStale()

    /// Makes a namespace with its loopback up.
    public init() throws {
        Self.swept
        name = "\(Self.prefix)\(getpid())-\(Self.counter.next())"
        try Self.ip(["netns", "add", name])
        do {
            try Self.ip(["-n", name, "link", "set", "lo", "up"])
        } catch {
            delete()
            throw error
        }
    }

    /// The command line that runs `executable` with `arguments` inside this namespace (the
    /// process keeps its pid: `ip netns exec` replaces itself with it).
    public func command(_ executable: String, _ arguments: [String]) -> (String, [String]) {
        (Self.ipExecutable, ["netns", "exec", name, executable] + arguments)
    }

    /// A socket listening on 127.0.0.1:`port` inside this namespace; its descriptor.
    func listen(port: Int, backlog: Int32 = 64) throws -> CInt {
        let fd = apn_netns_listen(path, UInt16(port), backlog)
        guard fd >= 0 else {
            throw ServerError(
                "cannot listen on 127.0.0.1:\(port) in network namespace \(name): \(String(cString: strerror(-fd)))"
            )
        }
        return fd
    }

    /// Kills what still runs inside it and removes it.
    public func delete() {
        Self.deleteNamespace(name)
    }

    /// Removes the namespaces of this harness whose process has ended (killed before its
    /// cleanup ran).
    public static func sweepStale() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/run/netns") else { return }
        for name in names where name.hasPrefix(prefix) {
            guard let pid = Int32(name.dropFirst(prefix.count).prefix { $0 != "-" }) else { continue }
            if kill(pid, 0) != 0, errno == ESRCH { deleteNamespace(name) }
        }
    }

    private static func deleteNamespace(_ name: String) {
        if let pids = try? ip(["netns", "pids", name]) {
            for pid in pids.split(whereSeparator: \.isWhitespace).compactMap({ Int32($0) }) { kill(pid, SIGKILL) }
        }
        _ = try? ip(["netns", "delete", name])
    }

    /// `ip`, wherever Debian's iproute2 put it.
    static let ipExecutable =
        ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        ?? "ip"

    /// Runs `ip` with `arguments`; its standard output, or an error with what it printed.
    @discardableResult
    static func ip(_ arguments: [String]) throws -> String {
        let (status, text): (Int32, String)
        do {
            (status, text) = try ChildProcess.runToEnd(ipExecutable, arguments)
        } catch {
            throw ServerError(
                "cannot run \(ipExecutable) (iproute2): \(error); the partition harness needs iproute2's `ip netns`"
            )
        }
        guard status == 0 else {
            throw ServerError(
                "ip \(arguments.joined(separator: " ")) failed (status \(status)): "
                    + "\(text.trimmingCharacters(in: .whitespacesAndNewlines)); network namespaces need root"
            )
        }
        return text
    }

    private final class Counter: Sendable {
        private let value = Mutex(0)
        func next() -> Int {
            value.withLock {
                $0 += 1
                return $0
            }
        }
    }
}
