import ArgumentParser
import Foundation
import PushRedis
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
        subcommands: [
            BenchWorker.self, BenchScale.self, BenchFailover.self, BenchSoak.self, BenchHostile.self, BenchLanes.self,
            BenchIsolation.self, BenchPartitions.self,
        ]
    )
}

/// CPU time (user + system) a process has used, in seconds.
func cpuSeconds(of pid: Int32) -> Double? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return nil }
    return ProcessSample.cpuSeconds(stat: stat, ticksPerSecond: Int(sysconf(Int32(_SC_CLK_TCK))))
}

/// Peak resident memory of a process, in bytes (VmHWM).
func peakRSS(of pid: Int32) -> Int? { processStatusBytes(pid, "VmHWM") }

/// Resident memory of a process now, in bytes (VmRSS).
func residentMemory(of pid: Int32) -> Int? { processStatusBytes(pid, "VmRSS") }

/// A size in kB of `/proc/<pid>/status`, in bytes.
private func processStatusBytes(_ pid: Int32, _ field: String) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("\(field):") }),
        let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    else { return nil }
    return kb * 1024
}

/// The fields of a section of a Redis server's `INFO` (`stats`, `memory`), by name.
func redisInfo(_ url: String, _ section: String) async throws -> [String: String] {
    let connection = try await RedisConnection.connect(try RedisConfiguration(url: url))
    let reply: RedisValue
    do {
        reply = try await connection.send(["INFO", section])
    } catch {
        await connection.close()
        throw error
    }
    await connection.close()
    let info = reply.string ?? ""
    var fields: [String: String] = [:]
    for line in info.split(whereSeparator: \.isNewline) {
        guard let colon = line.firstIndex(of: ":") else { continue }
        fields[String(line[..<colon])] = String(line[line.index(after: colon)...])
    }
    return fields
}
