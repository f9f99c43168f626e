import CRdKafka
import PushKafka

/// A Kafka protocol request type (its API key), for the embedded cluster's injected errors.
public enum KafkaRequestType: Int16, CaseIterable, Sendable {
    case produce = 0
    case fetch = 1
    case listOffsets = 2
    case metadata = 3
    case offsetCommit = 8
    case offsetFetch = 9
    case findCoordinator = 10
    case joinGroup = 11
    case heartbeat = 12
    case leaveGroup = 13
    case syncGroup = 14
    case apiVersions = 18
    case initProducerId = 22

    /// Kafka's name of the request type (`OffsetCommit`).
    public var name: String {
        switch self {
        case .produce: "Produce"
        case .fetch: "Fetch"
        case .listOffsets: "ListOffsets"
        case .metadata: "Metadata"
        case .offsetCommit: "OffsetCommit"
        case .offsetFetch: "OffsetFetch"
        case .findCoordinator: "FindCoordinator"
        case .joinGroup: "JoinGroup"
        case .heartbeat: "Heartbeat"
        case .leaveGroup: "LeaveGroup"
        case .syncGroup: "SyncGroup"
        case .apiVersions: "ApiVersions"
        case .initProducerId: "InitProducerId"
        }
    }

    /// The request type of Kafka's name (any case) or API key.
    public init?(name: String) {
        if let key = Int16(name), let type = Self(rawValue: key) {
            self = type
            return
        }
        guard let type = Self.allCases.first(where: { $0.name.lowercased() == name.lowercased() }) else {
            return nil
        }
        self = type
    }
}

/// A librdkafka error code (`rd_kafka_resp_err_t`): positive ones are the Kafka protocol's,
/// negative ones the client's own.
public struct KafkaErrorCode: Sendable, Hashable, CustomStringConvertible {
    public let code: Int32

    public init(code: Int32) { self.code = code }

    /// librdkafka's name of the code (`NOT_LEADER_FOR_PARTITION`, `_TRANSPORT`).
    public var name: String { String(cString: rd_kafka_err2name(rd_kafka_resp_err_t(code))) }

    public var description: String { "\(name) [\(code)]" }

    /// The code of librdkafka's name (any case), or a number.
    public init?(name: String) {
        if let number = Int32(name) {
            self.init(code: number)
            return
        }
        guard let code = Self.codesByName[name.uppercased()] else { return nil }
        self.init(code: code)
    }

    /// Every code librdkafka describes, by name.
    private static let codesByName: [String: Int32] = {
        var descriptions: UnsafePointer<rd_kafka_err_desc>?
        var count = 0
        rd_kafka_get_err_descs(&descriptions, &count)
        guard let descriptions else { return [:] }
        var names: [String: Int32] = [:]
        for description in UnsafeBufferPointer(start: descriptions, count: count) {
            guard let name = description.name else { continue }
            names[String(cString: name)] = description.code.rawValue
        }
        return names
    }()

    /// No error: an answer only delayed (``EmbeddedKafkaCluster/pushRequestErrors(broker:_:_:)``).
    public static let noError = KafkaErrorCode(code: RD_KAFKA_RESP_ERR_NO_ERROR.rawValue)
    /// The broker cuts the connection instead of answering.
    public static let transport = KafkaErrorCode(code: RD_KAFKA_RESP_ERR__TRANSPORT.rawValue)
    public static let requestTimedOut = KafkaErrorCode(code: RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT.rawValue)
    public static let notLeaderForPartition = KafkaErrorCode(
        code: RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION.rawValue
    )
    public static let notEnoughReplicas = KafkaErrorCode(code: RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS.rawValue)
    public static let coordinatorLoadInProgress = KafkaErrorCode(
        code: RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS.rawValue
    )
    public static let coordinatorNotAvailable = KafkaErrorCode(
        code: RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE.rawValue
    )
    public static let notCoordinator = KafkaErrorCode(code: RD_KAFKA_RESP_ERR_NOT_COORDINATOR.rawValue)
    public static let rebalanceInProgress = KafkaErrorCode(code: RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS.rawValue)
}
