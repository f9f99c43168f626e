import APNSCore

extension DeliveryStage {
    /// Counts the Live Activity pushes among a pool's outcomes: accepted, by the priority they
    /// were sent with, and superseded in the pool by a newer update of their activity.
    func countLiveActivities(_ outcomes: [APNSDeliveryOutcome], _ contexts: [SentContext?]) {
        guard control.metrics.isEnabled else { return }
        for (outcome, context) in zip(outcomes, contexts) {
            guard let c = context?.candidate, c.job.activity != nil else { continue }
            if outcome.isTransmitted {
                let priority = Int(c.activity?.priority ?? UInt8(c.job.content.notification.priority.rawValue))
                control.metrics.increment(MetricCatalogue.liveActivityUpdates, [c.job.app, "\(priority)"], by: 1)
            } else if outcome.status == .superseded {
                control.metrics.increment(MetricCatalogue.liveActivitySuperseded, [c.job.app], by: 1)
            }
        }
    }
}
