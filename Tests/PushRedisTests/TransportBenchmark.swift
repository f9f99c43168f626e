import Foundation
import PushTestSupport
import Testing

@testable import PushRedis

#if canImport(Glibc)
import Glibc
#endif

/// Compares the two transports without TLS: hiredis' blocking socket on a dedicated thread and
/// SwiftNIO with hiredis' parser. Runs only with `PUSHREDIS_BENCH=1` and prints its figures
/// (CPU time of this process and wall time per command); it asserts only that the replies are
/// right. Build in release for figures that mean anything.
@Suite("Transport benchmark (PUSHREDIS_BENCH=1)", .enabled(if: ProcessInfo.processInfo.environment["PUSHREDIS_BENCH"] == "1"))
struct TransportBenchmark {
    @Test("Pipelines of 64 commands and single commands, socket against SwiftNIO, plain TCP")
    func pipelines() async throws {
        try await withRedisServer { server in
            for transport in [RedisConnection.Transport.socket, .nio, .socket, .nio] {
                let redis = try await RedisConnection.connect(server.configuration(), transport: transport)
                let value = [UInt8](repeating: 0x61, count: 64)
                let batch = (0..<32).flatMap { index in
                    [[Array("SET".utf8), Array("k\(index)".utf8), value], [Array("GET".utf8), Array("k\(index)".utf8)]]
                }
                for _ in 0..<200 { _ = try await redis.pipeline(batch) }  // warm-up

                let pipelines = 3_000
                let (pipelineCPU, pipelineWall) = try await measure {
                    for _ in 0..<pipelines {
                        let replies = try await redis.pipeline(batch)
                        #expect(replies[1] == .bulk(value))
                    }
                }
                let singles = 20_000
                let (singleCPU, singleWall) = try await measure {
                    for _ in 0..<singles { _ = try await redis.send(["PING"]) }
                }
                let commands = Double(pipelines * batch.count)
                print(
                    "transport \(transport): pipeline of 64: \(format(pipelineCPU / commands)) µs CPU and "
                        + "\(format(pipelineWall / commands)) µs wall per command; single PING: "
                        + "\(format(singleCPU / Double(singles))) µs CPU and \(format(singleWall / Double(singles))) µs wall "
                        + "(client process CPU, redis-server excluded)")
                await redis.close()
            }
        }
    }

    /// CPU (user + system of this process) and wall time of `body`, in microseconds.
    private func measure(_ body: () async throws -> Void) async throws -> (cpu: Double, wall: Double) {
        let cpuStart = cpuMicroseconds()
        let start = ContinuousClock.now
        try await body()
        let wall = ContinuousClock.now - start
        let (seconds, attoseconds) = wall.components
        return (cpuMicroseconds() - cpuStart, Double(seconds) * 1e6 + Double(attoseconds) / 1e12)
    }

    private func cpuMicroseconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6
            + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
    }

    private func format(_ value: Double) -> String {
        String(format: "%.2f", value)
    }
}
