import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHTTP2
import Testing

@testable import APNSHTTP2

/// The frame writer both codecs share, on its own: which promises it keeps for the flush and
/// which it hands back, and what it answers to the connection frames it handles.
@Suite struct FrameWriterTests {
    typealias Frame = FrameCodecTests.Frame

    static func unflushed(
        _ writer: inout HTTP2FrameWriter,
        on loop: EmbeddedEventLoop
    ) -> ([Frame], EventLoopPromise<Void>?) {
        guard case let (bytes, promise)? = writer.takeUnflushed(eventLoop: loop) else { return ([], nil) }
        return (FrameCodecTests.frames(in: bytes), promise)
    }

    @Test func promisesCompleteWithTheFlushThatCarriesTheirFrames() throws {
        let loop = EmbeddedEventLoop()
        var writer = HTTP2FrameWriter()
        let first = loop.makePromise(of: Void.self)
        let second = loop.makePromise(of: Void.self)
        let kept = writer.write(HTTP2Frame(streamID: 1, payload: .rstStream(.cancel)), promise: first) == nil
        let ping = HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 9), ack: true))
        let alsoKept = writer.write(ping, promise: second) == nil
        #expect(kept && alsoKept)
        let done = NIOLockedValueBox(0)
        first.futureResult.whenSuccess { done.withLockedValue { $0 += 1 } }
        second.futureResult.whenSuccess { done.withLockedValue { $0 += 1 } }
        let (frames, flushPromise) = Self.unflushed(&writer, on: loop)
        #expect(frames.map(\.type) == [0x3, 0x6] && frames[1].flags == 0x1)
        #expect(done.withLockedValue { $0 } == 0, "nothing completes before the bytes are written")
        try #require(flushPromise).succeed()
        #expect(done.withLockedValue { $0 } == 2)
        let after = Self.unflushed(&writer, on: loop).0
        #expect(after.isEmpty)
    }

    @Test func dataBeyondTheWindowWaitsAndItsPromiseIsHandedBack() throws {
        let loop = EmbeddedEventLoop()
        var writer = HTTP2FrameWriter()
        let body = ByteBuffer(repeating: 1, count: HTTP2Protocol.defaultWindow + 10)
        let result = writer.write(
            HTTP2Frame(streamID: 1, payload: .data(.init(data: .byteBuffer(body), endStream: true))),
            promise: nil
        )
        guard case .success? = result else {
            Issue.record(
                "the frame layer sends it, so the caller completes the promise now; got \(String(describing: result))"
            )
            return
        }
        let (sent, _) = Self.unflushed(&writer, on: loop)
        #expect(
            sent.map(\.payload.count).reduce(0, +) == HTTP2Protocol.defaultWindow && sent.allSatisfy { $0.flags == 0 }
        )
        _ = writer.sendWaitingData()
        let more = Self.unflushed(&writer, on: loop).0
        #expect(more.isEmpty, "no window open, nothing more")
        _ = try writer.receive(.windowUpdate(streamID: 0, increment: 10))
        _ = try writer.receive(.windowUpdate(streamID: 1, increment: 10))
        let waited = writer.sendWaitingData()
        #expect(waited)
        let rest = Self.unflushed(&writer, on: loop).0
        #expect(rest.map(\.payload.count) == [10] && rest.first?.flags == 0x1)
    }

    @Test func framesItDoesNotSendFailAtOnce() {
        var writer = HTTP2FrameWriter()
        let priority = HTTP2Frame(streamID: 1, payload: .priority(.init(exclusive: false, dependency: 0, weight: 1)))
        let result = writer.write(priority, promise: nil)
        guard case .failure(let error)? = result else {
            Issue.record("got \(String(describing: result))")
            return
        }
        #expect(error.code == .internalError)
    }

    @Test func connectionFramesAreAnsweredAndPassedOn() throws {
        let loop = EmbeddedEventLoop()
        var writer = HTTP2FrameWriter()
        let ping = try writer.receive(.ping(7, ack: false))
        #expect(ping.passOn == nil && !ping.sendWaitingData)
        let settings = try writer.receive(.settings(ByteBuffer(bytes: [0, 3, 0, 0, 0, 5])))
        #expect(settings.sendWaitingData)
        guard case .settings(.settings(let values))? = settings.passOn?.payload else {
            Issue.record("got \(settings)")
            return
        }
        #expect(values.first?.parameter == .maxConcurrentStreams && values.first?.value == 5)
        let queued = writer.queueReplies()
        #expect(queued)
        let replies = Self.unflushed(&writer, on: loop).0
        #expect(
            replies == [
                Frame(type: 0x6, flags: 0x1, streamID: 0, payload: [0, 0, 0, 0, 0, 0, 0, 7]),
                Frame(type: 0x4, flags: 0x1, streamID: 0, payload: []),
            ]
        )
        let queuedAgain = writer.queueReplies()
        #expect(!queuedAgain)
        // "Values outside this range MUST be treated as a connection error" (RFC 9113 §6.5.2).
        let error = #expect(throws: HTTP2ProtocolError.self) {
            try writer.receive(.settings(ByteBuffer(bytes: [0, 5, 0, 0, 0, 1])))
        }
        #expect(error?.code == .protocolError)
    }
}
