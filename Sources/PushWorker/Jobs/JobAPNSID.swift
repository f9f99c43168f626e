import Crypto
import Foundation

/// The `apns-id` of a job's notifications when the job gives `apnsId` (HTTP/2 apps).
public enum JobAPNSID {
    /// `text` as a canonical lower-case UUID (8-4-4-4-12 hex digits), or `nil` if it is not one.
    public static func canonical(_ text: String) -> String? {
        guard text.utf8.count == 36, let uuid = UUID(uuidString: text) else { return nil }
        return uuid.uuidString.lowercased()
    }

    /// The id for `token` (lower-case hex) in a job of several tokens: the name-based UUID of
    /// RFC 9562 §5.5 (version 5, SHA-1) with the job's `apnsId` as namespace and the token's
    /// hex digits as name — Python's `uuid.uuid5(uuid.UUID(apnsId), token)`.
    public static func derived(from apnsId: String, token: String) -> String {
        guard let namespace = UUID(uuidString: apnsId) else { return apnsId }
        var hasher = Insecure.SHA1()
        withUnsafeBytes(of: namespace.uuid) { hasher.update(bufferPointer: $0) }
        hasher.update(data: Array(token.utf8))
        var bytes = Array(hasher.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let uuid = UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                bytes[10],
                bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            )
        )
        return uuid.uuidString.lowercased()
    }
}
