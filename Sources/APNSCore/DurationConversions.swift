import Foundation
import NIOCore

extension Duration {
    /// The same span as a NIO `TimeAmount` (clamped to `Int64.max` nanoseconds): one conversion
    /// for every transport and the simulator.
    public var timeAmount: TimeAmount { TimeAmount(self) }

    /// The span in seconds, as Foundation's dates and Dispatch count them.
    public var timeInterval: TimeInterval {
        TimeInterval(components.seconds) + TimeInterval(components.attoseconds) / 1e18
    }

    /// The span in whole milliseconds (rounded toward zero), as configuration files and
    /// servers' settings count them.
    public var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
