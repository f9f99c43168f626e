import PushKafka

// What one batch of results asks of Redis and Kafka.
extension ResultStage {
    /// What one batch asks of Redis and Kafka; no I/O.
    struct WritePlan {
        var records: [RecordedResult] = []
        /// Per record of a notification this worker sent: where its result is in `messages` and
        /// in `metrics` (``markPossibleDuplicates(lapsed:)``).
        var sent: [(record: Int, message: Int, metric: Int?)] = []
        var unregistered: [(app: String, environment: String, token: String, since: Int64, reason: String)] = []
        /// Tokens' environments to remember or forget (`environmentFallback`).
        var environments: [TokenEnvironment] = []
        /// Live Activity updates Apple accepted (latest wins).
        var accepted: [AcceptedActivity] = []
        /// Channels created or deleted by channel jobs.
        var channels: [ChannelRecord] = []
        /// Claims to delete: notifications never written to a gateway.
        var released: [(resultId: String, token: String)] = []
        var messages: [KafkaOutgoingMessage] = []
        /// The result ids whose claims this process holds until the batch is written.
        var settled: [String] = []
        /// Results produced (a released claim produces none).
        var results = 0
        /// What each message counts as in the metrics (a stored result produced again is read
        /// back from its value).
        var metrics: [ResultMetric] = []

        /// Marks `possibleDuplicate` the results of notifications this worker sent whose claim's
        /// liveness mark is `lapsed`: this worker's liveness key may have expired since, and
        /// another worker may have taken the claim over and sent them again (``LivenessWatch``).
        /// Returns how many it marked.
        mutating func markPossibleDuplicates(lapsed: (UInt32) -> Bool) -> Int {
            var marked = 0
            for entry in sent {
                guard let mark = records[entry.record].claimMark, lapsed(mark),
                    let value = WorkerResult.markingPossibleDuplicate(messages[entry.message].value)
                else { continue }
                messages[entry.message].value = value
                if let metric = entry.metric { metrics[metric].possibleDuplicate = true }
                marked += 1
            }
            return marked
        }
    }

    static func plan(_ batch: [ResultItem], topic: String) -> WritePlan {
        var plan = WritePlan()
        plan.messages.reserveCapacity(batch.count)
        plan.metrics.reserveCapacity(batch.count)
        @discardableResult
        func produce(_ message: ResultMessage) -> (message: Int, metric: Int?) {
            plan.messages.append(KafkaOutgoingMessage(topic: topic, key: message.key, value: message.value))
            guard let metric = message.metric ?? ResultMetric(parsing: message.value) else {
                return (plan.messages.count - 1, nil)
            }
            plan.metrics.append(metric)
            return (plan.messages.count - 1, plan.metrics.count - 1)
        }
        for item in batch {
            switch item {
            case .rejected(_, let message):
                produce(message)
            case .reemitted(_, _, let list):
                for message in list { produce(message) }
            case .released(_, let id, let token):
                plan.released.append((id, token))
                plan.settled.append(id)
            case .handedBack(_, let id):
                plan.settled.append(id)
            case .decided(let r), .delivered(let r):
                plan.records.append(r)
                if let u = r.unregister {
                    plan.unregistered.append((u.app, u.environment, u.token, u.verdict.since, u.verdict.reason))
                }
                if let environment = r.environment { plan.environments.append(environment) }
                if let accepted = r.accepted { plan.accepted.append(accepted) }
                if let channel = r.channel { plan.channels.append(channel) }
                let at = produce(r.result)
                if r.claimMark != nil { plan.sent.append((plan.records.count - 1, at.message, at.metric)) }
                if let feedback = r.feedback { produce(feedback) }
                plan.settled.append(r.resultId)
            }
            if !item.isGivenBack { plan.results += 1 }
        }
        return plan
    }
}
