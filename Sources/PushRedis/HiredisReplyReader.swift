import CHiredis

/// hiredis' RESP reply parser (`redisReader`), fed with bytes read by SwiftNIO.
///
/// The NIO transport's only contact with hiredis: bytes go in with ``feed(_:)``, complete
/// replies come out of ``next()`` as ``RedisValue``s, copied out of hiredis' memory and freed
/// at once. Not thread-safe; it belongs to one channel handler on one event loop.
final class HiredisReplyReader {
    private let reader: UnsafeMutablePointer<redisReader>

    /// Allocates the parser; `nil` only when hiredis is out of memory.
    init?() {
        guard let reader = redisReaderCreate() else { return nil }
        self.reader = reader
    }

    deinit {
        redisReaderFree(reader)
    }

    /// Appends bytes read from the server to the parser's buffer.
    func feed(_ bytes: UnsafeRawBufferPointer) throws(RedisError) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        if redisReaderFeed(reader, base.assumingMemoryBound(to: CChar.self), bytes.count) != REDIS_OK {
            throw failure()
        }
    }

    /// The next complete reply, or `nil` when the buffer holds only part of one.
    func next() throws(RedisError) -> RedisValue? {
        var raw: UnsafeMutableRawPointer?
        if redisReaderGetReply(reader, &raw) != REDIS_OK { throw failure() }
        guard let raw else { return nil }
        defer { freeReplyObject(raw) }
        return try RedisValue(hiredisReply: raw.assumingMemoryBound(to: redisReply.self))
    }

    /// The reader's error, read right after the failing call.
    private func failure() -> RedisError {
        let text = withUnsafeBytes(of: reader.pointee.errstr) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        if reader.pointee.err == REDIS_ERR_OOM {
            return RedisError(
                .connection,
                "hiredis ran out of memory while parsing a reply",
                detail: "hiredis REDIS_ERR_OOM: \(text)"
            )
        }
        return RedisError(
            .protocol,
            "the server sent a reply that hiredis cannot parse: \(text)",
            detail: "hiredis: \(text)"
        )
    }
}

extension RedisValue {
    /// Copies a hiredis reply tree into a RedisValue (the caller frees the reply).
    init(hiredisReply reply: UnsafePointer<redisReply>) throws(RedisError) {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_STATUS:
            self = .simpleString(String(decoding: Self.bytes(r), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            self = .error(String(decoding: Self.bytes(r), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            self = .integer(Int64(r.integer))
        case REDIS_REPLY_NIL:
            self = .bulk(nil)
        case REDIS_REPLY_STRING:
            self = .bulk(Self.bytes(r))
        case REDIS_REPLY_ARRAY:
            var elements: [RedisValue] = []
            elements.reserveCapacity(r.elements)
            for index in 0..<r.elements {
                guard let element = r.element[index] else {
                    throw RedisError(.protocol, "hiredis returned an array with a missing element \(index)")
                }
                elements.append(try RedisValue(hiredisReply: element))
            }
            self = .array(elements)
        default:
            throw RedisError(.protocol, "hiredis returned a reply of unknown type \(r.type)")
        }
    }

    private static func bytes(_ reply: redisReply) -> [UInt8] {
        guard let str = reply.str, reply.len > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: str, count: reply.len))
    }
}
