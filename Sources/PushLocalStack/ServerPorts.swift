import Foundation
import NIOCore

/// Ports for the servers the local stack starts, taken below the kernel's ephemeral range.
///
/// A server that is stopped and started again on its port (a gateway outage, a Redis restart)
/// needs that port free when it comes back. A port of the ephemeral range is not: every
/// outgoing connection on the machine takes its source port from that range, and a
/// connection that lasts (a broker's, another suite's) can hold it for as long as it stays
/// open. Below the range only explicit binds take ports.
enum ServerPorts {
    /// The lowest port handed out; below it are ports well-known services listen on.
    static let lowest = 10_000

    /// The kernel's ephemeral range (`net.ipv4.ip_local_port_range`), 32768...60999 when it
    /// cannot be read.
    static let ephemeral: ClosedRange<Int> = {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let bounds = text.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        guard bounds.count == 2, bounds[0] <= bounds[1] else { return 32_768...60_999 }
        return bounds[0]...bounds[1]
    }()

    /// Ports to try, in random order: below the ephemeral range when there is room there,
    /// else anywhere above ``lowest``.
    static func candidates(_ count: Int) -> [Int] {
        let range = ephemeral.lowerBound > lowest + 1_000 ? lowest..<ephemeral.lowerBound : lowest..<65_536
        return (0..<count).map { _ in Int.random(in: range) }
    }

    /// Starts a server on one of ``candidates(_:)``, trying the next while one is in use; on the
    /// kernel's choice (port 0) when none was free.
    static func start<Server>(_ start: (_ port: Int) async throws -> Server) async throws -> Server {
        for port in candidates(20) {
            do {
                return try await start(port)
            } catch let error as IOError where error.errnoCode == EADDRINUSE {
                continue
            }
        }
        return try await start(0)
    }
}
