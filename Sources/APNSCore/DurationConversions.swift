import NIOCore

extension Duration {
    /// The same span as a NIO `TimeAmount` (clamped to `Int64.max` nanoseconds): one conversion
    /// for every transport and the simulator.
    public var timeAmount: TimeAmount { TimeAmount(self) }
}
