import ArgumentParser
import Foundation
import PushStatus

@main
struct APNBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apn-bench",
        abstract: "Benchmarks of apn-worker on the local stack (docs/benchmarks.md).",
        discussion: """
            Each command starts the embedded Kafka, redis-server, the APNs simulator and `apn-worker run` \
            processes (the apn-worker beside this executable), measures, prints JSON lines and stops \
            everything it started.
            """,
        subcommands: [BenchWorker.self, BenchScale.self, BenchFailover.self, BenchHostile.self, BenchLanes.self]
    )
}

/// CPU time (user + system) a process has used, in seconds.
func cpuSeconds(of pid: Int32) -> Double? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return nil }
    return ProcessSample.cpuSeconds(stat: stat, ticksPerSecond: Int(sysconf(Int32(_SC_CLK_TCK))))
}

/// Peak resident memory of a process, in bytes (VmHWM).
func peakRSS(of pid: Int32) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
        let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    else { return nil }
    return kb * 1024
}
