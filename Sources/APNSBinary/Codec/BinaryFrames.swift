import APNSCore
import NIOCore

/// The commands of the legacy binary API (§1.2, §1.4).
public enum BinaryCommand: UInt8, Sendable {
    case simple = 0
    case enhanced = 1
    case framed = 2
    case errorResponse = 8
}

/// The item IDs of a command-2 frame (§1.2).
public enum FrameItem: UInt8, Sendable, CaseIterable {
    case deviceToken = 1
    case payload = 2
    case identifier = 3
    case expiration = 4
    case priority = 5
}

/// A notification as it travels on the binary gateway connection, in any of the three formats.
///
/// Fields a format does not carry are `nil` (command 0 has no identifier or expiry; only
/// command 2 has a priority, and in command 2 every item is optional on the wire, so a frame
/// can arrive without a token or payload and must then be answered with status 2 or 4).
public struct BinaryNotificationFrame: Sendable, Hashable {
    public var command: BinaryCommand
    public var token: [UInt8]?
    public var payload: ByteBuffer?
    public var identifier: UInt32?
    public var expiry: UInt32?
    public var priority: UInt8?

    public init(
        command: BinaryCommand,
        token: [UInt8]?,
        payload: ByteBuffer?,
        identifier: UInt32? = nil,
        expiry: UInt32? = nil,
        priority: UInt8? = nil
    ) {
        self.command = command
        self.token = token
        self.payload = payload
        self.identifier = identifier
        self.expiry = expiry
        self.priority = priority
    }

    /// Bytes this frame occupies on the wire in its format.
    public var encodedSize: Int {
        let t = token?.count ?? 0
        let p = payload?.readableBytes ?? 0
        switch command {
        case .simple: return 1 + 2 + t + 2 + p
        case .enhanced: return 1 + 4 + 4 + 2 + t + 2 + p
        case .framed, .errorResponse:
            var items = 0
            if token != nil { items += 3 + t }
            if payload != nil { items += 3 + p }
            if identifier != nil { items += 3 + 4 }
            if expiry != nil { items += 3 + 4 }
            if priority != nil { items += 3 + 1 }
            return 5 + items
        }
    }
}

extension ByteBuffer {
    /// Writes a notification in command 2 format with all five items (§1.2: L = 56 + n for a
    /// 32-byte token). Returns the number of bytes written.
    @discardableResult
    public mutating func writeFramedNotification(
        token: [UInt8],
        payload: some Collection<UInt8>,
        identifier: UInt32,
        expiry: UInt32,
        priority: UInt8
    ) -> Int {
        let frameLength = (3 + token.count) + (3 + payload.count) + (3 + 4) + (3 + 4) + (3 + 1)
        // One write of the whole frame: seventeen `writeInteger`/`writeBytes` calls, each
        // checking the buffer's capacity and uniqueness, were 3% of a loaded worker's CPU.
        return self.writeWithUnsafeMutableBytes(minimumWritableBytes: 5 + frameLength) { out in
            var frame = FrameWriter(out: out)
            frame.put(BinaryCommand.framed.rawValue)
            frame.put(UInt32(frameLength))
            frame.put(FrameItem.deviceToken.rawValue)
            frame.put(UInt16(token.count))
            token.withUnsafeBytes { frame.put($0) }
            frame.put(FrameItem.payload.rawValue)
            frame.put(UInt16(payload.count))
            if payload.withContiguousStorageIfAvailable({ frame.put(UnsafeRawBufferPointer($0)) }) == nil {
                for byte in payload { frame.put(byte) }
            }
            frame.put(FrameItem.identifier.rawValue)
            frame.put(UInt16(4))
            frame.put(identifier)
            frame.put(FrameItem.expiration.rawValue)
            frame.put(UInt16(4))
            frame.put(expiry)
            frame.put(FrameItem.priority.rawValue)
            frame.put(UInt16(1))
            frame.put(priority)
            return frame.at
        }
    }

    /// Writes a notification in command 1 ("enhanced") format (§1.2).
    @discardableResult
    public mutating func writeEnhancedNotification(
        token: [UInt8],
        payload: some Collection<UInt8>,
        identifier: UInt32,
        expiry: UInt32
    ) -> Int {
        var written = self.writeInteger(BinaryCommand.enhanced.rawValue)
        written += self.writeInteger(identifier)
        written += self.writeInteger(expiry)
        written += self.writeInteger(UInt16(token.count))
        written += self.writeBytes(token)
        written += self.writeInteger(UInt16(payload.count))
        written += self.writeBytes(payload)
        return written
    }

    /// Writes a notification in command 0 ("simple") format (§1.2). It carries no identifier,
    /// so a failure shows only as a closed connection (§1.5.5).
    @discardableResult
    public mutating func writeSimpleNotification(token: [UInt8], payload: some Collection<UInt8>) -> Int {
        var written = self.writeInteger(BinaryCommand.simple.rawValue)
        written += self.writeInteger(UInt16(token.count))
        written += self.writeBytes(token)
        written += self.writeInteger(UInt16(payload.count))
        written += self.writeBytes(payload)
        return written
    }

    /// Writes any frame exactly as described, including command-2 frames with missing items
    /// (used by the simulator's tests and the shutdown probe).
    @discardableResult
    public mutating func writeNotificationFrame(_ frame: BinaryNotificationFrame) -> Int {
        let token = frame.token ?? []
        let payload = frame.payload ?? ByteBuffer()
        switch frame.command {
        case .simple:
            return writeSimpleNotification(token: token, payload: payload.readableBytesView)
        case .enhanced:
            return writeEnhancedNotification(
                token: token,
                payload: payload.readableBytesView,
                identifier: frame.identifier ?? 0,
                expiry: frame.expiry ?? 0
            )
        case .framed, .errorResponse:
            var written = self.writeInteger(BinaryCommand.framed.rawValue)
            written += self.writeInteger(UInt32(frame.encodedSize - 5))
            if let t = frame.token {
                written += self.writeInteger(FrameItem.deviceToken.rawValue)
                written += self.writeInteger(UInt16(t.count))
                written += self.writeBytes(t)
            }
            if var p = frame.payload {
                written += self.writeInteger(FrameItem.payload.rawValue)
                written += self.writeInteger(UInt16(p.readableBytes))
                written += self.writeBuffer(&p)
            }
            if let i = frame.identifier {
                written += self.writeInteger(FrameItem.identifier.rawValue)
                written += self.writeInteger(UInt16(4))
                written += self.writeInteger(i)
            }
            if let e = frame.expiry {
                written += self.writeInteger(FrameItem.expiration.rawValue)
                written += self.writeInteger(UInt16(4))
                written += self.writeInteger(e)
            }
            if let p = frame.priority {
                written += self.writeInteger(FrameItem.priority.rawValue)
                written += self.writeInteger(UInt16(1))
                written += self.writeInteger(p)
            }
            return written
        }
    }
}

/// The 6-byte error response (§1.4): command 8, a status, and the identifier of the offending
/// notification — or, for status 10, of the last one processed successfully (§1.5.3).
public struct ErrorResponse: Sendable, Hashable {
    public static let size = 6
    public var status: APNSStatus
    public var identifier: UInt32

    public init(status: APNSStatus, identifier: UInt32) {
        self.status = status
        self.identifier = identifier
    }
}

extension ByteBuffer {
    @discardableResult
    public mutating func writeErrorResponse(_ response: ErrorResponse) -> Int {
        writeInteger(BinaryCommand.errorResponse.rawValue)
            + writeInteger(UInt8(truncatingIfNeeded: response.status.rawValue))
            + writeInteger(response.identifier)
    }
}

/// One entry of the feedback service's list (§2).
public struct FeedbackTuple: Sendable, Hashable {
    /// When APNs decided the app was gone from the device (seconds since the epoch, UTC).
    public var timestamp: UInt32
    public var token: DeviceToken

    public init(timestamp: UInt32, token: DeviceToken) {
        self.timestamp = timestamp
        self.token = token
    }
}

extension ByteBuffer {
    @discardableResult
    public mutating func writeFeedbackTuple(_ tuple: FeedbackTuple) -> Int {
        writeInteger(tuple.timestamp) + writeInteger(UInt16(tuple.token.bytes.count)) + writeBytes(tuple.token.bytes)
    }
}

/// Stores big-endian integers and bytes one after another into memory with room for them.
private struct FrameWriter {
    let out: UnsafeMutableRawBufferPointer
    var at = 0

    mutating func put<T: FixedWidthInteger>(_ value: T) {
        out.storeBytes(of: value.bigEndian, toByteOffset: at, as: T.self)
        at += MemoryLayout<T>.size
    }

    mutating func put(_ bytes: UnsafeRawBufferPointer) {
        UnsafeMutableRawBufferPointer(rebasing: out[at..<at + bytes.count]).copyMemory(from: bytes)
        at += bytes.count
    }
}
