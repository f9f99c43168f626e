import CJemalloc

/// The process's allocator: jemalloc, linked into every program of the package in place of
/// glibc's `malloc`, so that the Swift runtime, SwiftNIO, librdkafka and hiredis all allocate
/// through it. The worker allocates on one thread and frees on another for most of what a
/// notification passes through, which glibc's per-thread arenas handle poorly (see
/// `docs/architecture.md#the-allocator` for the measurement). Its settings can be changed with
/// the `MALLOC_CONF` environment variable (jemalloc(3)).
///
/// The only code that talks to jemalloc: its `mallctl` interface, read-only.
public enum HeapAllocator {
    /// jemalloc's version, e.g. `5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c`; `nil` if the
    /// process's allocator is not jemalloc.
    public static var version: String? {
        var text: UnsafePointer<CChar>?
        var size = MemoryLayout<UnsafePointer<CChar>?>.size
        guard mallctl("version", &text, &size, nil, 0) == 0, let text else { return nil }
        return String(cString: text)
    }

    /// The bytes the program has allocated and not freed (jemalloc's `stats.allocated`: what
    /// the heap holds, without the allocator's own overhead and free pages), read now; `nil` if
    /// the allocator cannot say.
    public static func allocatedBytes() -> Int? {
        // The statistics are a snapshot taken when "epoch" is written.
        var epoch: UInt64 = 1
        guard mallctl("epoch", nil, nil, &epoch, MemoryLayout<UInt64>.size) == 0 else { return nil }
        var allocated = 0
        var size = MemoryLayout<Int>.size
        guard mallctl("stats.allocated", &allocated, &size, nil, 0) == 0 else { return nil }
        return allocated
    }
}
