import APNSCore
import Foundation
import NIOCore
import NIOHPACK

/// The HPACK encoder (RFC 7541) of one client connection, written for APNs requests.
///
/// A request's header block is written straight into the outgoing buffer, without building a
/// header list first. The headers that stay the same from request to request (`:authority`,
/// `authorization`, `apns-topic`, `apns-push-type`, `apns-priority`, `apns-expiration: 0`)
/// go into the dynamic table the first time and are sent as one-byte or two-byte indexes
/// after that (§3.2 HPACK advice). `:path`, `apns-id`, a non-zero `apns-expiration` and
/// `apns-collapse-id` change per request and are literals that are not indexed. No Huffman
/// coding: the values that change per request are what most of a block is, and coding them
/// costs more CPU than the bytes it saves on a connection to one server.
///
/// The table is kept the way the server's decoder keeps it: entries are added at the front
/// and the oldest are evicted when the size (name + value + 32 per entry, RFC 7541 §4.1) would
/// pass the limit the server announced with `SETTINGS_HEADER_TABLE_SIZE` (at most 4,096 here).
/// A change of that limit is signalled at the start of the next block (RFC 7541 §4.2, §6.3).
struct HPACKRequestEncoder {
    /// The headers that are indexed, each with its slot of remembered values.
    enum Slot: Int, CaseIterable {
        case authority, authorization, topic, pushType, priority, expiration

        var name: String {
            switch self {
            case .authority: ":authority"
            case .authorization: "authorization"
            case .topic: "apns-topic"
            case .pushType: "apns-push-type"
            case .priority: "apns-priority"
            case .expiration: "apns-expiration"
            }
        }

        /// The name's index in the static table (Appendix A), 0 if it has none.
        var staticNameIndex: Int {
            switch self {
            case .authority: 1
            case .authorization: 23
            default: 0
            }
        }

        init?(name: String) {
            switch name {
            case ":authority": self = .authority
            case "authorization": self = .authorization
            case "apns-topic": self = .topic
            case "apns-push-type": self = .pushType
            case "apns-priority": self = .priority
            case "apns-expiration": self = .expiration
            default: return nil
            }
        }
    }

    static let defaultTableSize = 4096
    /// Values remembered per slot (a connection sending to a few topics keeps them all).
    static let valuesPerSlot = 8

    private(set) var maxTableSize = HPACKRequestEncoder.defaultTableSize
    private(set) var tableSize = 0
    /// Sizes of the live entries, oldest first from `oldest`.
    private var entrySizes: [Int] = []
    private var oldest = 0
    /// Entries ever inserted and evicted; entry number `n` is live while `n >= evicted`.
    private var inserted = 0
    private var evicted = 0
    /// Per slot, the most recent values with their entry numbers (newest last).
    private var remembered: [[(value: String, entry: Int)]] = Array(repeating: [], count: Slot.allCases.count)
    /// The smallest and the last limit since the previous block, to signal (RFC 7541 §4.2).
    private var pendingSizeUpdate: (smallest: Int, last: Int)?

    /// The server's `SETTINGS_HEADER_TABLE_SIZE`.
    mutating func setMaxTableSize(_ size: Int) {
        let size = min(size, Self.defaultTableSize)
        guard size != maxTableSize || pendingSizeUpdate != nil else { return }
        pendingSizeUpdate = (min(pendingSizeUpdate?.smallest ?? size, size), size)
        maxTableSize = size
        evict(toFit: 0)
    }

    // MARK: Requests

    /// Writes the header block of one request (§3.3); the order puts pseudo-headers first.
    mutating func writeRequest(
        _ request: QueuedRequest,
        authority: String,
        authorization: String?,
        into buffer: inout ByteBuffer
    ) {
        writeSizeUpdates(into: &buffer)
        buffer.writeInteger(UInt8(0x80 | 3))  // :method: POST
        buffer.writeInteger(UInt8(0x80 | 7))  // :scheme: https
        write(.authority, authority, into: &buffer)
        Self.writeLiteral(nameIndex: 4, value: request.path, into: &buffer)  // :path
        if request.isBroadcast {
            // §7.3: the bundle ID is in the path; the request's id is `apns-request-id`.
            Self.writeLiteral(name: "apns-request-id", value: request.apnsID, into: &buffer)
            let channelID = Data(request.token.bytes).base64EncodedString()
            Self.writeLiteral(name: "apns-channel-id", value: channelID, into: &buffer)
            write(.pushType, request.pushType.rawValue, into: &buffer)
        } else {
            Self.writeLiteral(name: "apns-id", value: request.apnsID, into: &buffer)
            write(.pushType, request.pushType.rawValue, into: &buffer)
            write(.topic, request.topic, into: &buffer)
        }
        write(.priority, Self.priorityStrings[Int(request.priority)], into: &buffer)
        if request.expiration == 0 {
            write(.expiration, "0", into: &buffer)
        } else {
            buffer.writeInteger(UInt8(0))
            Self.writeString("apns-expiration", into: &buffer)
            Self.writeDecimal(request.expiration, into: &buffer)
        }
        if let collapseID = request.collapseID {
            Self.writeLiteral(name: "apns-collapse-id", value: collapseID, into: &buffer)
        }
        if let authorization { write(.authorization, authorization, into: &buffer) }
    }

    private static let priorityStrings: [String] = (0...10).map(String.init)

    // MARK: Any header list

    /// Writes any header list: the names of ``Slot`` are indexed as in requests, the static
    /// table's exact entries for `:method` and `:scheme` are used, and everything else is a
    /// literal that is not indexed (never indexed if the list says so).
    mutating func writeHeaders(_ headers: HPACKHeaders, into buffer: inout ByteBuffer) {
        writeSizeUpdates(into: &buffer)
        for (name, value, indexing) in headers {
            if let index = Self.staticEntry(name: name, value: value) {
                buffer.writeInteger(UInt8(0x80 | index))
            } else if indexing == .indexable, let slot = Slot(name: name) {
                write(slot, value, into: &buffer)
            } else {
                let prefix: UInt8 = indexing == .neverIndexed ? 0x10 : 0x00
                if let index = Self.staticName(name) {
                    Self.writeInteger(index, prefixBits: 4, flags: prefix, into: &buffer)
                } else {
                    buffer.writeInteger(prefix)
                    Self.writeString(name, into: &buffer)
                }
                Self.writeString(value, into: &buffer)
            }
        }
    }

    /// The static table's exact entries (Appendix A) for pseudo-headers.
    private static func staticEntry(name: String, value: String) -> Int? {
        guard name.utf8.first == UInt8(ascii: ":") else { return nil }
        switch name {
        case ":method": return value == "GET" ? 2 : value == "POST" ? 3 : nil
        case ":path": return value == "/" ? 4 : nil
        case ":scheme": return value == "http" ? 6 : value == "https" ? 7 : nil
        case ":status":
            switch value {
            case "200": return 8
            case "204": return 9
            case "206": return 10
            case "304": return 11
            case "400": return 12
            case "404": return 13
            case "500": return 14
            default: return nil
            }
        default: return nil
        }
    }

    /// The static table's index for a name (Appendix A), for the names used here.
    private static func staticName(_ name: String) -> Int? {
        switch name {
        case ":authority": 1
        case ":method": 2
        case ":path": 4
        case ":scheme": 6
        case ":status": 8
        case "authorization": 23
        case "content-length": 28
        case "content-type": 31
        case "user-agent": 58
        default: nil
        }
    }

    // MARK: The dynamic table

    /// An indexable header: its index if the table has it, else a literal that adds it.
    private mutating func write(_ slot: Slot, _ value: String, into buffer: inout ByteBuffer) {
        let values = remembered[slot.rawValue]
        for candidate in values.reversed() where candidate.entry >= evicted && candidate.value == value {
            // The newest entry is index 62 (RFC 7541 §2.3.3).
            Self.writeInteger(62 + (inserted - 1 - candidate.entry), prefixBits: 7, flags: 0x80, into: &buffer)
            return
        }
        let name = slot.name
        let size = name.utf8.count + value.utf8.count + 32
        guard size <= maxTableSize else {
            // Larger than the whole table: sent as a literal that is not indexed.
            if slot.staticNameIndex > 0 {
                Self.writeLiteral(nameIndex: slot.staticNameIndex, value: value, into: &buffer)
            } else {
                Self.writeLiteral(name: name, value: value, into: &buffer)
            }
            return
        }
        // Literal with incremental indexing (RFC 7541 §6.2.1).
        if slot.staticNameIndex > 0 {
            Self.writeInteger(slot.staticNameIndex, prefixBits: 6, flags: 0x40, into: &buffer)
        } else {
            buffer.writeInteger(UInt8(0x40))
            Self.writeString(name, into: &buffer)
        }
        Self.writeString(value, into: &buffer)
        evict(toFit: size)
        entrySizes.append(size)
        tableSize += size
        var updated = values.filter { $0.entry >= evicted && $0.value != value }
        if updated.count >= Self.valuesPerSlot { updated.removeFirst(updated.count - Self.valuesPerSlot + 1) }
        updated.append((value, inserted))
        remembered[slot.rawValue] = updated
        inserted += 1
    }

    /// Evicts the oldest entries until `size` more bytes fit (RFC 7541 §4.4).
    private mutating func evict(toFit size: Int) {
        while tableSize + size > maxTableSize && oldest < entrySizes.count {
            tableSize -= entrySizes[oldest]
            oldest += 1
            evicted += 1
        }
        if oldest > 64 && oldest * 2 > entrySizes.count {
            entrySizes.removeFirst(oldest)
            oldest = 0
        }
    }

    private mutating func writeSizeUpdates(into buffer: inout ByteBuffer) {
        guard let update = pendingSizeUpdate else { return }
        pendingSizeUpdate = nil
        if update.smallest < update.last {
            Self.writeInteger(update.smallest, prefixBits: 5, flags: 0x20, into: &buffer)
        }
        Self.writeInteger(update.last, prefixBits: 5, flags: 0x20, into: &buffer)
    }

    // MARK: Primitives (RFC 7541 §5)

    /// Literal without indexing, name from the static table (RFC 7541 §6.2.2).
    private static func writeLiteral(nameIndex: Int, value: String, into buffer: inout ByteBuffer) {
        writeInteger(nameIndex, prefixBits: 4, flags: 0, into: &buffer)
        writeString(value, into: &buffer)
    }

    /// Literal without indexing, new name (RFC 7541 §6.2.2).
    private static func writeLiteral(name: String, value: String, into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(0))
        writeString(name, into: &buffer)
        writeString(value, into: &buffer)
    }

    /// An integer with an N-bit prefix (RFC 7541 §5.1).
    static func writeInteger(_ value: Int, prefixBits: Int, flags: UInt8, into buffer: inout ByteBuffer) {
        let limit = (1 << prefixBits) - 1
        if value < limit {
            buffer.writeInteger(flags | UInt8(value))
            return
        }
        buffer.writeInteger(flags | UInt8(limit))
        var rest = value - limit
        while rest >= 128 {
            buffer.writeInteger(UInt8(rest & 0x7F | 0x80))
            rest >>= 7
        }
        buffer.writeInteger(UInt8(rest))
    }

    /// A string literal without Huffman coding (RFC 7541 §5.2).
    static func writeString(_ string: String, into buffer: inout ByteBuffer) {
        writeInteger(string.utf8.count, prefixBits: 7, flags: 0, into: &buffer)
        buffer.writeString(string)
    }

    /// A decimal number as a string literal (its length fits the 7-bit prefix: at most 10 digits).
    private static func writeDecimal(_ value: UInt32, into buffer: inout ByteBuffer) {
        DecimalText.withDigits(of: Int64(value)) { digits in
            buffer.writeInteger(UInt8(digits.count))
            buffer.writeBytes(digits)
        }
    }
}
