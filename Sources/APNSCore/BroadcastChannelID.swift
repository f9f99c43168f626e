import Foundation

/// A broadcast channel's ID (§7.2, §7.3): the text APNs returns in `apns-channel-id` when a channel
/// is created, standard base64 with its padding, sent back as it was given.
///
/// Apple asks providers not to assume its size ("don't make assumptions on the channel ID size"):
/// APNs hands out 16-byte IDs today, so the bound here, ``maximumEncodedLength`` characters, is a
/// guard against a job that is not a channel at all, not a guess at Apple's format. Unlike a
/// ``DeviceToken``, whose 100 bytes are the binary API's limit, a channel ID has no limit of its own.
public struct BroadcastChannelID: Sendable, Hashable, CustomStringConvertible {
    /// The longest ID accepted, in base64 characters (768 bytes): far beyond the 24 characters
    /// APNs uses, short enough to keep an `apns-channel-id` header and a result's `channel` small.
    public static let maximumEncodedLength = 1024

    /// The ID as APNs gave it (base64).
    public let text: String
    /// The ID's bytes, decoded from ``text``.
    public let bytes: [UInt8]

    /// Checks `text` against Apple's rules: non-empty standard base64 (`A–Z a–z 0–9 + /`) with
    /// its `=` padding, in the canonical form APNs writes, of at most ``maximumEncodedLength``
    /// characters.
    public init(base64 text: String) throws(APNSError) {
        let form = "channel IDs are base64, as APNs returns them from a create request (such as \"c29tZUNoYW5uZWw=\")"
        guard text.utf8.count <= Self.maximumEncodedLength else {
            throw APNSError(
                .invalidDeviceToken,
                "channel \"\(Self.abbreviate(text))\" has \(text.utf8.count) characters; \(form), of at most \(Self.maximumEncodedLength)"
            )
        }
        guard !text.isEmpty, let data = Data(base64Encoded: text), !data.isEmpty, data.base64EncodedString() == text
        else {
            throw APNSError(.invalidDeviceToken, "channel \"\(Self.abbreviate(text))\" is not base64; \(form)")
        }
        self.text = text
        self.bytes = Array(data)
    }

    /// The ID's bytes as the pipeline carries a recipient: a ``DeviceToken`` that only the
    /// broadcast path reads (it becomes `apns-channel-id` again, §7.3), so it is not held to a
    /// device token's length.
    public var recipient: DeviceToken { DeviceToken(uncheckedBytes: bytes) }

    public var description: String { text }

    private static func abbreviate(_ text: String) -> String {
        text.count <= 40 ? text : "\(text.prefix(32))…"
    }
}
