import PushWorkerFuzzing

/// libFuzzer entry point: arbitrary bytes as APNs' answers: an HTTP/2 answer settled by the
/// HTTP/2 pool, binary error responses applied by the binary pool, and feedback tuples
/// (``AnswerInvariants``). Built and run by `scripts/fuzz`; a trap or a violated invariant stops
/// the run with the input saved.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let problems = AnswerInvariants.violations(ofInput: Array(UnsafeBufferPointer(start: data, count: size)))
    if !problems.isEmpty { fatalError("invariant violated: \(problems.joined(separator: "; "))") }
    return 0
}
