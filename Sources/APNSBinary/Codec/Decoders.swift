import APNSCore
import NIOCore

/// What the gateway reads: a notification frame, or a frame it cannot make sense of.
public enum InboundNotification: Sendable, Hashable {
    case notification(BinaryNotificationFrame)
    /// A frame that breaks the format. `identifier` is set when the frame got far enough to
    /// carry one, so the error response can name it (§1.4 status 128).
    case malformed(reason: String, identifier: UInt32?)
}

/// Decodes notification frames of commands 0, 1 and 2 (§1.2), as the gateway sees them.
///
/// Never consumes part of a frame. After a frame whose boundaries cannot be known (an unknown
/// command byte or an absurd length) it reports one `.malformed` and discards all further input,
/// because the stream can no longer be split into frames.
public struct NotificationFrameDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = InboundNotification

    /// Largest command-2 frame length accepted before the stream is declared malformed.
    public var maximumFrameLength: Int
    private var lostFraming = false

    public init(maximumFrameLength: Int = 70_000) {
        self.maximumFrameLength = maximumFrameLength
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> InboundNotification? {
        if lostFraming {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return nil
        }
        let start = buffer.readerIndex
        guard let command = buffer.getInteger(at: start, as: UInt8.self) else { return nil }
        switch command {
        case BinaryCommand.simple.rawValue:
            guard let tokenLength = buffer.getInteger(at: start + 1, as: UInt16.self),
                let payloadLength = buffer.getInteger(at: start + 3 + Int(tokenLength), as: UInt16.self),
                buffer.readableBytes >= 5 + Int(tokenLength) + Int(payloadLength)
            else { return nil }
            buffer.moveReaderIndex(forwardBy: 3)
            let token = buffer.readBytes(length: Int(tokenLength))!
            buffer.moveReaderIndex(forwardBy: 2)
            let payload = buffer.readSlice(length: Int(payloadLength))!
            return .notification(BinaryNotificationFrame(command: .simple, token: token, payload: payload))

        case BinaryCommand.enhanced.rawValue:
            guard let tokenLength = buffer.getInteger(at: start + 9, as: UInt16.self),
                let payloadLength = buffer.getInteger(at: start + 11 + Int(tokenLength), as: UInt16.self),
                buffer.readableBytes >= 13 + Int(tokenLength) + Int(payloadLength)
            else { return nil }
            buffer.moveReaderIndex(forwardBy: 1)
            let identifier = buffer.readInteger(as: UInt32.self)!
            let expiry = buffer.readInteger(as: UInt32.self)!
            buffer.moveReaderIndex(forwardBy: 2)
            let token = buffer.readBytes(length: Int(tokenLength))!
            buffer.moveReaderIndex(forwardBy: 2)
            let payload = buffer.readSlice(length: Int(payloadLength))!
            return .notification(
                BinaryNotificationFrame(
                    command: .enhanced,
                    token: token,
                    payload: payload,
                    identifier: identifier,
                    expiry: expiry,
                    priority: nil
                )
            )

        case BinaryCommand.framed.rawValue:
            guard let length = buffer.getInteger(at: start + 1, as: UInt32.self) else { return nil }
            guard length <= maximumFrameLength else {
                lostFraming = true
                buffer.moveReaderIndex(to: buffer.writerIndex)
                return .malformed(reason: "frame length \(length) exceeds \(maximumFrameLength)", identifier: nil)
            }
            guard buffer.readableBytes >= 5 + Int(length) else { return nil }
            buffer.moveReaderIndex(forwardBy: 5)
            var items = buffer.readSlice(length: Int(length))!
            return Self.parseItems(&items)

        default:
            lostFraming = true
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return .malformed(reason: "unknown command \(command)", identifier: nil)
        }
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> InboundNotification? {
        // A partial frame at the end of the stream is dropped: the sender closed mid-frame.
        try decode(buffer: &buffer)
    }

    private static func parseItems(_ items: inout ByteBuffer) -> InboundNotification {
        var frame = BinaryNotificationFrame(command: .framed, token: nil, payload: nil)
        var seen: UInt8 = 0
        while items.readableBytes > 0 {
            guard let id = items.readInteger(as: UInt8.self),
                let length = items.readInteger(as: UInt16.self),
                let data = items.readSlice(length: Int(length))
            else {
                return .malformed(reason: "an item overruns the frame", identifier: frame.identifier)
            }
            guard let item = FrameItem(rawValue: id) else {
                return .malformed(reason: "unknown item id \(id)", identifier: frame.identifier)
            }
            let bit: UInt8 = 1 << id
            guard seen & bit == 0 else {
                return .malformed(reason: "item \(id) appears twice", identifier: frame.identifier)
            }
            seen |= bit
            switch item {
            case .deviceToken:
                frame.token = Array(data.readableBytesView)
            case .payload:
                frame.payload = data
            case .identifier:
                guard length == 4 else {
                    return .malformed(reason: "identifier item is \(length) bytes, not 4", identifier: nil)
                }
                frame.identifier = data.getInteger(at: data.readerIndex, as: UInt32.self)
            case .expiration:
                guard length == 4 else {
                    return .malformed(reason: "expiration item is \(length) bytes, not 4", identifier: frame.identifier)
                }
                frame.expiry = data.getInteger(at: data.readerIndex, as: UInt32.self)
            case .priority:
                guard length == 1 else {
                    return .malformed(reason: "priority item is \(length) bytes, not 1", identifier: frame.identifier)
                }
                frame.priority = data.getInteger(at: data.readerIndex, as: UInt8.self)
            }
        }
        return .notification(frame)
    }
}

/// Decodes the gateway's 6-byte error responses (§1.4) on the provider side.
/// Any other command byte is a protocol violation and fails the connection.
public struct ErrorResponseDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = ErrorResponse

    public init() {}

    public mutating func decode(buffer: inout ByteBuffer) throws -> ErrorResponse? {
        guard buffer.readableBytes >= ErrorResponse.size else { return nil }
        let command = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self)!
        guard command == BinaryCommand.errorResponse.rawValue else {
            throw APNSError(
                .malformedFrame,
                "the gateway sent command \(command) where only error responses (command 8) are defined"
            )
        }
        buffer.moveReaderIndex(forwardBy: 1)
        let status = buffer.readInteger(as: UInt8.self)!
        let identifier = buffer.readInteger(as: UInt32.self)!
        return ErrorResponse(status: APNSStatus(rawValue: Int(status)), identifier: identifier)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> ErrorResponse? {
        try decode(buffer: &buffer)
    }
}

/// Decodes the feedback service's tuples (§2), which may straddle reads arbitrarily.
public struct FeedbackTupleDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = FeedbackTuple

    public init() {}

    public mutating func decode(buffer: inout ByteBuffer) throws -> FeedbackTuple? {
        let start = buffer.readerIndex
        guard let tokenLength = buffer.getInteger(at: start + 4, as: UInt16.self),
            buffer.readableBytes >= 6 + Int(tokenLength)
        else { return nil }
        let timestamp = buffer.readInteger(as: UInt32.self)!
        buffer.moveReaderIndex(forwardBy: 2)
        let bytes = buffer.readBytes(length: Int(tokenLength))!
        do {
            return FeedbackTuple(timestamp: timestamp, token: try DeviceToken(bytes: bytes))
        } catch {
            throw APNSError(.malformedFrame, "the feedback service sent an unusable token: \(error.message)")
        }
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> FeedbackTuple? {
        try decode(buffer: &buffer)
    }
}
