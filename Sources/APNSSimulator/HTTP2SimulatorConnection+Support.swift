import NIOCore
import NIOHTTP2

/// Notes whether the frame layer (``HTTP2ServerFrameCodec`` or NIOHTTP2Handler) ended the
/// connection with a GOAWAY carrying an error code, which both do for connection errors, and
/// only for them.
final class HTTP2SimulatorGoAwayWatcher: NIOHTTP2FrameDelegate {
    private(set) var sentErrorGoAway = false

    func wroteFrame(_ frame: HTTP2Frame) {
        if case .goAway(_, let code, _) = frame.payload, code != .noError { sentErrorGoAway = true }
    }
}

extension HTTP2SimulatorConnectionHandler {
    /// The `:status` value of an answer.
    static func statusText(_ status: Int) -> String {
        switch status {
        case 400: "400"
        case 403: "403"
        case 404: "404"
        case 405: "405"
        case 410: "410"
        case 413: "413"
        case 429: "429"
        default: String(status)
        }
    }

    /// A fresh lower-case 8-4-4-4-12 identifier: a random per-connection prefix and a counter.
    func generateID() -> String {
        generatedIDs &+= 1
        let digits = Array("0123456789abcdef".utf8)
        var bytes = [UInt8](repeating: UInt8(ascii: "-"), count: 36)
        var high = idPrefix
        var low = generatedIDs
        var position = 35
        for index in 0..<32 {
            if position == 8 || position == 13 || position == 18 || position == 23 { position -= 1 }
            let nibble: UInt64
            if index < 16 {
                nibble = low & 0xf
                low >>= 4
            } else {
                nibble = high & 0xf
                high >>= 4
            }
            bytes[position] = digits[Int(nibble)]
            position -= 1
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
