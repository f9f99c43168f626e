import PushWorkerFuzzing

/// libFuzzer entry point: arbitrary bytes read as a whole Kafka message (timestamp of either
/// type, key, headers, offset, value; ``MessageInvariants/message(fromInput:)``) through intake,
/// the stop guard, the claim plan and its results. Built and run by `scripts/fuzz`; a trap or a
/// violated invariant stops the run with the input saved.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let problems = MessageInvariants.violations(ofInput: Array(UnsafeBufferPointer(start: data, count: size)))
    if !problems.isEmpty { fatalError("invariant violated: \(problems.joined(separator: "; "))") }
    return 0
}
