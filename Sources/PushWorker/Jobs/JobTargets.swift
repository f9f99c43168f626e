import APNSCore
import Foundation

// Who a job is for: device tokens (`token`, `tokens`) or broadcast channels (`channel`,
// `channels`, §7.3). See docs/jobs.md, "Recipients" and "Broadcasts".

extension JobParser {
    /// The most channels in one job.
    static let maxChannels = 1000

    /// The job's recipients in order, once each (by their normalized form), and whether they
    /// are channels. A recipient that cannot be read keeps its text and the reason.
    func targets(_ fields: Fields) -> Result<([JobToken], Bool), JobFieldError> {
        let given = [Fields.Name.token, .tokens, .channel, .channels].filter { fields[$0] != nil }
        guard let field = given.first else {
            return .failure(JobFieldError("the job has neither \"token\" nor \"tokens\""))
        }
        guard given.count == 1 else {
            let names = given.map { "\"\(Fields.Name.spellings[$0.rawValue])\"" }.joined(separator: " and ")
            return .failure(JobFieldError("the job has both \(names); give one of them"))
        }
        let broadcast = field == .channel || field == .channels
        let kind = broadcast ? "base64 channel IDs" : "hex strings"
        let rawTexts: [String]
        switch field {
        case .token, .channel:
            let name = Fields.Name.spellings[field.rawValue]
            guard let text = fields[field]?.stringValue else {
                return .failure(
                    JobFieldError("\"\(name)\" must be \(broadcast ? "a base64 channel ID" : "a hex string")")
                )
            }
            rawTexts = [text]
        default:
            let name = Fields.Name.spellings[field.rawValue]
            let limit = broadcast ? Self.maxChannels : maxTokens
            guard let items = fields[field]?.arrayValue, !items.isEmpty else {
                return .failure(JobFieldError("\"\(name)\" must be a non-empty array of \(kind)"))
            }
            guard items.count <= limit else {
                return .failure(
                    JobFieldError(
                        "\"\(name)\" has \(items.count) entries, over the limit of \(limit) per job; split the job"
                    )
                )
            }
            var texts: [String] = []
            texts.reserveCapacity(items.count)
            for (index, item) in items.enumerated() {
                guard let text = item.stringValue else {
                    return .failure(JobFieldError("\(name)[\(index)] is not a string; \(name) are \(kind)"))
                }
                texts.append(text)
            }
            rawTexts = texts
        }

        var seen = Set<String>()
        var targets: [JobToken] = []
        targets.reserveCapacity(rawTexts.count)
        for text in rawTexts {
            let entry = broadcast ? Self.channel(text) : Self.token(text)
            if rawTexts.count == 1 || seen.insert(entry.text).inserted { targets.append(entry) }
        }
        return .success((targets, broadcast))
    }

    private static func token(_ text: String) -> JobToken {
        do {
            let token = try DeviceToken(hex: text)
            // Most jobs give the token as lowercase hex already: keep that text.
            return .valid(token, hex: isLowercaseHex(text, of: token) ? text : token.hex)
        } catch {
            return .malformed(text: text, reason: error.message)
        }
    }

    /// A channel ID as APNs hands it out (§7.2): standard base64 with padding. Its bytes travel
    /// as a ``DeviceToken`` through the pipeline; its text is what results name.
    static func channel(_ text: String) -> JobToken {
        do {
            return .valid(try BroadcastChannelID(base64: text).recipient, hex: text)
        } catch {
            return .malformed(text: text, reason: error.message)
        }
    }

    /// Why a broadcast job cannot be sent as given, or `nil` (§7.3: a broadcast updates or ends a
    /// Live Activity; it cannot start one).
    static func broadcastProblem(_ job: Job) -> String? {
        guard let liveActivity = job.liveActivity else {
            return
                "a broadcast to a channel updates a Live Activity: give \"liveActivity\" with event \"update\" or \"end\""
        }
        if liveActivity.event == .start {
            return
                "a broadcast cannot start a Live Activity (APNs refuses it); use event \"update\" or \"end\", or send the start to push-to-start tokens"
        }
        if job.notification.collapseId != nil {
            return
                "a broadcast has no collapse ID (Apple's broadcast requests carry no apns-collapse-id); leave \"collapseId\" out"
        }
        return nil
    }
}
