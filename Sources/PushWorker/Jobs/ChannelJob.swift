import APNSCore
import APNSHTTP2

/// What a channel job asks of Apple's channel management API (§7.2).
public enum ChannelAction: Sendable, Hashable {
    /// Create a channel with this message storage policy; the result carries its new ID.
    case create(APNSChannelStoragePolicy)
    /// Delete the channel the job names.
    case delete

    /// `create` or `delete`, as jobs and results spell it.
    public var name: String {
        switch self {
        case .create: "create"
        case .delete: "delete"
        }
    }
}

// Channel jobs (`docs/jobs.md`, "Channel jobs"): `{"id", "app", "channelAction": "create",
// "storagePolicy": "none"}` or `{"id", "app", "channelAction": "delete", "channel": "<id>"}`.

extension JobParser {
    /// The fields a channel job may have.
    private static let channelJobFields: Set<Fields.Name> = [
        .id, .app, .env, .channelAction, .storagePolicy, .channel, .metadata,
    ]

    /// Parses a job with `channelAction`. A channel job that cannot be carried out is answered
    /// with one `invalidJob` result for the message, as it has no notifications.
    func channelJob(
        _ fields: Fields,
        id: String,
        app: String?,
        metadata: [UInt8]?,
        metadataError: String?
    ) -> JobParseResult {
        func refuse(_ reason: String) -> JobParseResult {
            .unreadable(jobId: id, app: app, reason: reason, metadata: metadata)
        }
        guard let app else {
            return refuse("the job has no \"app\"; name the HTTP/2 app whose channel it creates or deletes")
        }
        if let unknown = fields.unknown.min() {
            return refuse(
                "the job has an unknown field \"\(unknown.abbreviated())\"; see docs/jobs.md for the fields a job may have"
            )
        }
        if let other = Fields.Name.allCases.first(where: { fields[$0] != nil && !Self.channelJobFields.contains($0) }) {
            return refuse(
                "a channel job has only id, app, env, channelAction, storagePolicy, channel and metadata, not \"\(Fields.Name.spellings[other.rawValue])\"; send notifications in jobs of their own"
            )
        }
        if let metadataError { return refuse(metadataError) }
        let action: ChannelAction
        let target: JobToken
        switch fields[.channelAction]?.stringValue {
        case "create":
            var policy = APNSChannelStoragePolicy.none
            if let value = fields[.storagePolicy] {
                guard let text = value.stringValue, let named = APNSChannelStoragePolicy(name: text) else {
                    return refuse(
                        "\"storagePolicy\" must be \"none\" (No Message Stored) or \"most-recent\" (Most Recent Message Stored)"
                    )
                }
                policy = named
            }
            if fields[.channel] != nil {
                return refuse(
                    "a create names no \"channel\": APNs chooses the new channel's ID and the result carries it"
                )
            }
            action = .create(policy)
            target = .valid(Self.createTarget, hex: "")
        case "delete":
            if fields[.storagePolicy] != nil {
                return refuse("\"storagePolicy\" is for a create; a delete names only its \"channel\"")
            }
            guard let text = fields[.channel]?.stringValue else {
                return refuse("a delete needs \"channel\": the base64 ID of the channel to delete")
            }
            target = Self.channel(text)
            if case .malformed(_, let reason) = target { return refuse(reason) }
            action = .delete
        default:
            return refuse("\"channelAction\" must be \"create\" or \"delete\"")
        }
        var job = Job(id: id, app: app, environment: nil, tokens: [target], notification: APNSNotification())
        job.metadata = metadata
        job.channelAction = action
        if let value = fields[.env] {
            guard let env = value.stringValue, env == "production" || env == "sandbox" else {
                return refuse("\"env\" must be \"production\" or \"sandbox\"")
            }
            job.environment = env
        }
        return .job(job)
    }

    /// What a create carries through the pipeline in place of a channel: it has none yet.
    static let createTarget = try! DeviceToken(bytes: [0])
}
