import Prometheus
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The process's resident memory, CPU time and open file descriptors, read from Linux's
/// `/proc/self` and exported as `process_resident_memory_bytes`, `process_cpu_seconds_total`
/// and `process_open_fds` (the names Prometheus's own clients use), and what its heap holds,
/// from the allocator, as `process_heap_allocated_bytes` (resident memory well above it is the
/// allocator's free pages and fragmentation, not live data).
///
/// Call ``update()`` before each scrape (``StatusServer``'s `beforeScrape`). Where there is no
/// `/proc` (macOS) the metrics stay at 0.
public final class ProcessMetrics: Sendable {
    public static let residentMemoryName = "process_resident_memory_bytes"
    public static let cpuSecondsName = "process_cpu_seconds_total"
    public static let openFileDescriptorsName = "process_open_fds"
    public static let heapAllocatedName = "process_heap_allocated_bytes"

    private let residentMemory: Gauge
    private let cpuSeconds: Counter
    private let openFileDescriptors: Gauge
    private let heapAllocated: Gauge
    /// The CPU seconds already added to the counter.
    private let countedCPUSeconds = Mutex<Double>(0)

    /// Registers the four metrics in `registry`.
    public init(registry: PrometheusCollectorRegistry) {
        residentMemory = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "process",
                metricName: "resident_memory",
                unitName: "bytes",
                helpText: "Resident memory of the process."
            )
        )
        cpuSeconds = registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "process",
                metricName: "cpu_seconds",
                unitName: "total",
                helpText: "User and system CPU time of the process."
            )
        )
        openFileDescriptors = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "process",
                metricName: "open",
                unitName: "fds",
                helpText: "Open file descriptors of the process."
            )
        )
        heapAllocated = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "process",
                metricName: "heap_allocated",
                unitName: "bytes",
                helpText: "Bytes the process has allocated on its heap and not freed."
            )
        )
    }

    /// Reads `/proc/self` and sets the metrics. Safe to call from several threads at once.
    public func update() {
        if let allocated = HeapAllocator.allocatedBytes() {
            heapAllocated.set(Double(allocated))
        }
        guard let sample = ProcessSample.current() else { return }
        residentMemory.set(Double(sample.residentMemoryBytes))
        openFileDescriptors.set(Double(sample.openFileDescriptors))
        // The counter only grows: add what the kernel counted since the last update.
        let increment = countedCPUSeconds.withLock { counted -> Double in
            let increment = sample.cpuSeconds - counted
            guard increment > 0 else { return 0 }
            counted = sample.cpuSeconds
            return increment
        }
        if increment > 0 {
            cpuSeconds.increment(by: increment)
        }
    }
}

/// One reading of the process's resources.
public struct ProcessSample: Sendable, Hashable {
    public var residentMemoryBytes: Int
    /// User plus system CPU time since the process started.
    public var cpuSeconds: Double
    public var openFileDescriptors: Int

    public init(residentMemoryBytes: Int, cpuSeconds: Double, openFileDescriptors: Int) {
        self.residentMemoryBytes = residentMemoryBytes
        self.cpuSeconds = cpuSeconds
        self.openFileDescriptors = openFileDescriptors
    }

    /// Reads `/proc/self/stat`, `/proc/self/statm` and `/proc/self/fd`; nil where they cannot
    /// be read (no `/proc`).
    public static func current() -> ProcessSample? {
        #if os(Linux)
        guard let stat = readProcFile("/proc/self/stat"), let statm = readProcFile("/proc/self/statm"),
            let cpu = cpuSeconds(stat: stat, ticksPerSecond: Int(sysconf(Int32(_SC_CLK_TCK)))),
            let resident = residentBytes(statm: statm, pageSize: Int(sysconf(Int32(_SC_PAGESIZE)))),
            let descriptors = countOpenFileDescriptors()
        else {
            return nil
        }
        return ProcessSample(residentMemoryBytes: resident, cpuSeconds: cpu, openFileDescriptors: descriptors)
        #else
        return nil
        #endif
    }

    /// User plus system time from the text of `/proc/<pid>/stat` (proc(5)): fields 14 `utime`
    /// and 15 `stime`, in clock ticks. The second field, the command name in parentheses, may
    /// itself hold spaces and parentheses, so fields are counted after its last `)`.
    public static func cpuSeconds(stat: String, ticksPerSecond: Int) -> Double? {
        guard ticksPerSecond > 0, let close = stat.lastIndex(of: ")") else { return nil }
        // After ")": field 3 (state) is the first.
        let fields = stat[stat.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return Double(user + system) / Double(ticksPerSecond)
    }

    /// Resident memory from the text of `/proc/<pid>/statm` (proc(5)): the second field, in pages.
    public static func residentBytes(statm: String, pageSize: Int) -> Int? {
        let fields = statm.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * pageSize
    }

    #if os(Linux)
    /// The content of a small `/proc` file (their size is reported as 0, so read to the end),
    /// at most 4 KiB.
    private static func readProcFile(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        var length = 0
        while length < bytes.count {
            let count = bytes.withUnsafeMutableBytes { buffer in
                read(descriptor, buffer.baseAddress! + length, buffer.count - length)
            }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            length += count
        }
        return String(decoding: bytes[..<length], as: UTF8.self)
    }

    /// The entries of `/proc/self/fd`, less the one this count opens to read the directory.
    private static func countOpenFileDescriptors() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let isDot = withUnsafeBytes(of: entry.pointee.d_name) { name in
                name.first == UInt8(ascii: ".")
            }
            if !isDot {
                count += 1
            }
        }
        return max(count - 1, 0)
    }
    #endif
}
