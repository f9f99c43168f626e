// Compares PushRedis' two transports without TLS against one redis-server: hiredis' blocking
// socket on a dedicated thread, and SwiftNIO with hiredis' reply parser. Prints the client
// process's CPU time and the wall time per command for pipelines of 64 commands and for
// single commands. Run through scripts/bench-redis-transport (a release build).
import Foundation
@_spi(Benchmark) import PushRedis

#if canImport(Glibc)
import Glibc
#endif

func cpuMicroseconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6
        + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
}

func measure(_ body: () async throws -> Void) async throws -> (cpu: Double, wall: Double) {
    let cpuStart = cpuMicroseconds()
    let start = ContinuousClock.now
    try await body()
    let (seconds, attoseconds) = (ContinuousClock.now - start).components
    return (cpuMicroseconds() - cpuStart, Double(seconds) * 1e6 + Double(attoseconds) / 1e12)
}

let port = Int(CommandLine.arguments.dropFirst().first ?? "") ?? 6379
let configuration = RedisConfiguration(host: "127.0.0.1", port: port)
let value = [UInt8](repeating: 0x61, count: 64)
let batch = (0..<32).flatMap { index in
    [[Array("SET".utf8), Array("k\(index)".utf8), value], [Array("GET".utf8), Array("k\(index)".utf8)]]
}
print("| transport | pipeline of 64: CPU µs/command | wall µs/command | single PING: CPU µs | wall µs |")
print("|---|---|---|---|---|")
for transport in [RedisConnection.Transport.socket, .nio, .socket, .nio] {
    let redis = try await RedisConnection.connect(configuration, transport: transport)
    for _ in 0..<500 { _ = try await redis.pipeline(batch) }
    let pipelines = 10_000
    let pipelined = try await measure {
        for _ in 0..<pipelines {
            let replies = try await redis.pipeline(batch)
            precondition(replies[1] == .bulk(value))
        }
    }
    let singles = 50_000
    let single = try await measure {
        for _ in 0..<singles { _ = try await redis.send(["PING"]) }
    }
    let commands = Double(pipelines * batch.count)
    func f(_ x: Double) -> String { String(format: "%.2f", x) }
    print(
        "| \(transport) | \(f(pipelined.cpu / commands)) | \(f(pipelined.wall / commands)) | "
            + "\(f(single.cpu / Double(singles))) | \(f(single.wall / Double(singles))) |"
    )
    await redis.close()
}
