import PushWorkerFuzzing

/// libFuzzer entry point: the job parser and the payload builder on arbitrary bytes. Built and run
/// by `scripts/fuzz` (`swift build --sanitize fuzzer`); a violated invariant stops the run with
/// the input saved, as a crash does.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let problems = JobInvariants.violations(ofInput: Array(UnsafeBufferPointer(start: data, count: size)))
    if !problems.isEmpty { fatalError("invariant violated: \(problems.joined(separator: "; "))") }
    return 0
}
