import APNSCore
import APNSHTTP2Core
import Foundation
import NIOHPACK

/// The outcome of a check: a value, or the reason to reject the request with (§3.4).
enum HTTP2SimulatorCheck<Value> {
    case ok(Value)
    case reject(APNSReason)
}

/// The header fields of one HTTP/2 request that the simulator reads (§3.3), collected in one
/// pass over the header block.
struct HTTP2SimulatorRequestHead {
    var method: String?
    var path: String?
    var authorization: String?
    var apnsID: String?
    var pushType: String?
    var topic: String?
    var priority: String?
    var expiration: String?
    var collapseID: String?
    /// `apns-channel-id` (§7.2, §7.3).
    var channelID: String?
    /// `apns-request-id` (§7.2, §7.3).
    var requestID: String?
    /// `:path` starts with `/1/` or `/4/`: a channel or broadcast request (§7).
    var isChannelAPI = false
    /// A header the simulator reads appeared more than once (§3.4 `DuplicateHeaders`).
    var duplicate = false

    init(headers: HPACKHeaders) {
        var seen: UInt16 = 0
        func once(_ bit: UInt16) -> Bool {
            if seen & bit != 0 { duplicate = true }
            seen |= bit
            return true
        }
        for (name, value, _) in headers {
            // The length first, so each name is compared with at most two candidates.
            switch name.utf8.count {
            case 5:
                if name == ":path", once(1 << 1) {
                    path = value
                    isChannelAPI = Self.isChannelPath(value)
                }
            case 7:
                if name == ":method" {
                    if once(1 << 0) { method = value }
                } else if name == ":scheme" {
                    _ = once(1 << 2)
                } else if name == "apns-id", once(1 << 5) {
                    apnsID = value
                }
            case 10:
                if name == ":authority" {
                    _ = once(1 << 3)
                } else if name == "apns-topic", once(1 << 7) {
                    topic = value
                }
            case 13:
                if name == "authorization" {
                    if once(1 << 4) { authorization = value }
                } else if name == "apns-priority", once(1 << 8) {
                    priority = value
                }
            case 14: if name == "apns-push-type", once(1 << 6) { pushType = value }
            case 15:
                if name == "apns-expiration" {
                    if once(1 << 9) { expiration = value }
                } else if name == "apns-channel-id" {
                    if once(1 << 11) { channelID = value }
                } else if name == "apns-request-id", once(1 << 12) {
                    requestID = value
                }
            case 16: if name == "apns-collapse-id", once(1 << 10) { collapseID = value }
            // Archived docs: APNs ignores any other header (§3.3).
            default: break
            }
        }
    }

    /// The checks that need neither the connection's authentication nor the body: repeated
    /// headers, the method, and the device token in `:path` (§3.3, §3.4).
    func checkTarget() -> HTTP2SimulatorCheck<DeviceToken> {
        if duplicate { return .reject(.duplicateHeaders) }
        guard method == "POST" else { return .reject(.methodNotAllowed) }
        guard let path else { return .reject(.badPath) }
        var path8 = path
        return path8.withUTF8 { Self.token(inPath: $0) }
    }

    /// `/1/…` (channel management, §7.2) or `/4/…` (broadcasts, §7.3).
    static func isChannelPath(_ path: String) -> Bool {
        var bytes = path.utf8.makeIterator()
        guard bytes.next() == UInt8(ascii: "/"), let version = bytes.next() else { return false }
        return (version == UInt8(ascii: "1") || version == UInt8(ascii: "4")) && bytes.next() == UInt8(ascii: "/")
    }

    /// `/3/device/<hex token>`, an optional query string ignored (§3.3).
    static func token(inPath bytes: UnsafeBufferPointer<UInt8>) -> HTTP2SimulatorCheck<DeviceToken> {
        let prefix: StaticString = "/3/device"
        let prefixLength = prefix.utf8CodeUnitCount
        guard bytes.count >= prefixLength,
            memcmp(bytes.baseAddress!, prefix.utf8Start, prefixLength) == 0
        else { return .reject(.badPath) }
        if bytes.count == prefixLength { return .reject(.missingDeviceToken) }
        guard bytes[prefixLength] == UInt8(ascii: "/") else { return .reject(.badPath) }
        var end = bytes.count
        for index in (prefixLength + 1)..<bytes.count where bytes[index] == UInt8(ascii: "?") {
            end = index
            break
        }
        let digits = UnsafeBufferPointer(rebasing: bytes[(prefixLength + 1)..<end])
        if digits.isEmpty { return .reject(.missingDeviceToken) }
        // §5 check 2: the token is hex; no length is assumed beyond the binary limit of 100 bytes.
        guard let token = hexToken(digits) else { return .reject(.badDeviceToken) }
        return .ok(token)
    }

    /// The header checks after authentication (§3.3, §3.4, §5 checks 3-5). `tokenAuthentication`
    /// makes `apns-topic` required; `allowedTopics` limits the topics (`TopicDisallowed`).
    func checkHeaders(tokenAuthentication: Bool, allowedTopics: Set<String>?) -> HTTP2SimulatorCheck<CheckedHeaders> {
        var checked = CheckedHeaders()
        // §3.3: apns-push-type; an unknown value is InvalidPushType. Absent means alert.
        var type = APNSPushType.alert
        if let pushType {
            guard let known = APNSPushType(rawValue: pushType) else { return .reject(.invalidPushType) }
            type = known
            checked.pushType = known
        }
        // §3.3 table: location works with token authentication only.
        if type.requiresTokenAuthentication && !tokenAuthentication { return .reject(.invalidPushType) }
        if let topic {
            guard Self.isPlainTopic(topic) || (try? APNSHTTP2Request.validate(topic: topic)) != nil else {
                return .reject(.badTopic)
            }
            // §3.3 table: the suffix depends on the push type.
            guard (try? type.validate(topic: topic)) != nil else { return .reject(.badTopic) }
            if let allowedTopics, !allowedTopics.contains(topic) { return .reject(.topicDisallowed) }
        } else if tokenAuthentication {
            // §5 check 5: a topic is present for token authentication.
            return .reject(.missingTopic)
        }
        // §3.3: apns-id is a canonical UUID (8-4-4-4-12).
        if let apnsID, !Self.isUUID(apnsID) { return .reject(.badMessageId) }
        // §3.3: apns-priority is 10, 5 or 1; §5 check 4: background allows 5 only.
        if let priority {
            guard let value = Int(priority), let known = APNSPriority(rawValue: value) else {
                return .reject(.badPriority)
            }
            if let allowed = type.allowedPriorities, !allowed.contains(known) { return .reject(.badPriority) }
            checked.priority = value
        }
        // §3.3: apns-expiration is UNIX seconds, an integer.
        if let expiration {
            let digits = expiration.utf8
            guard !digits.isEmpty, digits.count <= 19,
                digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
            else { return .reject(.badExpirationDate) }
        }
        // §3.3: apns-collapse-id is at most 64 bytes.
        if let collapseID, (try? APNSHTTP2Request.validate(collapseID: collapseID)) == nil {
            return .reject(.badCollapseId)
        }
        checked.payloadLimit = type.payloadLimit
        return .ok(checked)
    }

    struct CheckedHeaders {
        var pushType: APNSPushType?
        var priority: Int?
        var payloadLimit = APNSPushType.regularPayloadLimit
    }

    /// Printable ASCII without spaces: what every bundle ID looks like (fast path before the
    /// full check).
    static func isPlainTopic(_ topic: String) -> Bool {
        !topic.utf8.isEmpty && topic.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f }
    }

    /// 8-4-4-4-12 hex digits in either case.
    static func isUUID(_ text: String) -> Bool {
        guard text.utf8.count == 36 else { return false }
        var text = text
        return text.withUTF8 { bytes in
            for offset in 0..<36 {
                if offset == 8 || offset == 13 || offset == 18 || offset == 23 {
                    guard bytes[offset] == UInt8(ascii: "-") else { return false }
                } else {
                    guard hexValue(bytes[offset]) != nil else { return false }
                }
            }
            return true
        }
    }

    static func hexToken(_ digits: UnsafeBufferPointer<UInt8>) -> DeviceToken? {
        let count = digits.count
        guard count % 2 == 0, count / 2 <= DeviceToken.maximumLength else { return nil }
        var valid = true
        let bytes = [UInt8](unsafeUninitializedCapacity: count / 2) { buffer, initialized in
            for index in 0..<(count / 2) {
                guard let high = hexValue(digits[2 * index]), let low = hexValue(digits[2 * index + 1]) else {
                    valid = false
                    break
                }
                buffer[index] = high << 4 | low
                initialized = index + 1
            }
        }
        guard valid else { return nil }
        return try? DeviceToken(bytes: bytes)
    }

    @inline(__always)
    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
