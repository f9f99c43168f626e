import Prometheus
import PushStatus
import PushWorker
import Testing

@Suite("ProcessMetrics")
struct ProcessMetricsTests {
    @Test func cpuSecondsAreUtimePlusStimeCountedAfterTheCommandName() {
        // A command name with spaces and parentheses must not shift the fields.
        let stat =
            "4242 (apn (worker) 1) S 1 4242 4242 0 -1 4194560 5000 0 12 0 250 130 0 0 20 0 9 0 1234 987654321 3000 "
            + "18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n"
        #expect(ProcessSample.cpuSeconds(stat: stat, ticksPerSecond: 100) == 3.8)
        #expect(ProcessSample.cpuSeconds(stat: "garbage", ticksPerSecond: 100) == nil)
        #expect(ProcessSample.cpuSeconds(stat: "1 (x) S 1 2", ticksPerSecond: 100) == nil)
    }

    @Test func residentMemoryIsTheSecondFieldOfStatmInPages() {
        #expect(ProcessSample.residentBytes(statm: "241130 5023 2301 1 0 60000 0\n", pageSize: 4096) == 5023 * 4096)
        #expect(ProcessSample.residentBytes(statm: "", pageSize: 4096) == nil)
    }

    @Test func theNamesAreTheCataloguesAndUpdateFillsThemFromProc() throws {
        #expect(ProcessMetrics.residentMemoryName == MetricCatalogue.processResidentMemory.name)
        #expect(ProcessMetrics.cpuSecondsName == MetricCatalogue.processCPU.name)
        #expect(ProcessMetrics.openFileDescriptorsName == MetricCatalogue.processOpenFiles.name)
        #expect(ProcessMetrics.heapAllocatedName == MetricCatalogue.processHeapAllocated.name)

        let registry = PrometheusCollectorRegistry()
        let metrics = ProcessMetrics(registry: registry)
        let before = registry.emitToString()
        for description in [
            MetricCatalogue.processResidentMemory, MetricCatalogue.processCPU, MetricCatalogue.processOpenFiles,
            MetricCatalogue.processHeapAllocated,
        ] {
            #expect(before.contains("# HELP \(description.name) \(description.help)\n"))
            #expect(before.contains("# TYPE \(description.name) \(description.kind.rawValue)\n"))
        }
        #if os(Linux)
        // Spend a little CPU so the counter has something to count.
        var sum = 0
        for value in 0..<5_000_000 { sum &+= value &* value }
        #expect(sum != 0)
        metrics.update()
        let sample = try #require(ProcessSample.current())
        #expect(sample.residentMemoryBytes > 1 << 20)
        #expect(sample.openFileDescriptors >= 3)
        let text = registry.emitToString()
        let values = Dictionary(
            text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { line -> (String, Double)? in
                let parts = line.split(separator: " ")
                guard parts.count == 2, let value = Double(parts[1]) else { return nil }
                return (String(parts[0]), value)
            },
            uniquingKeysWith: { $1 }
        )
        #expect((values["process_resident_memory_bytes"] ?? 0) > Double(1 << 20))
        #expect((values["process_open_fds"] ?? 0) >= 3)
        #expect((values["process_heap_allocated_bytes"] ?? 0) > Double(1 << 16))
        let cpu = try #require(values["process_cpu_seconds_total"])
        #expect(cpu > 0)
        // The counter follows the kernel's total and never goes back.
        metrics.update()
        let again = registry.emitToString()
        let cpuAgain = again.split(separator: "\n").first { $0.hasPrefix("process_cpu_seconds_total ") }
            .flatMap { Double($0.split(separator: " ")[1]) }
        #expect((cpuAgain ?? 0) >= cpu)
        #endif
    }

    @Test func swiftAllocationsAreServedByJemalloc() throws {
        let version = try #require(HeapAllocator.version, "the process's allocator is not jemalloc")
        #expect(version.hasPrefix("5."))
        // 512 MiB allocated by the Swift runtime must show in jemalloc's count: it would not if
        // glibc's malloc still served the process. The count is the process's: tests running
        // beside this one free memory meanwhile (tens of MiB), which the margin allows for.
        let before = try #require(HeapAllocator.allocatedBytes())
        let block = [UInt8](repeating: 7, count: 512 << 20)
        let during = try #require(HeapAllocator.allocatedBytes())
        #expect(during - before >= 384 << 20, "allocated \(before) → \(during)")
        withExtendedLifetime(block) {}
    }
}
