import APNSCore
import APNSHTTP2
import Logging
import Synchronization

/// Carries out claimed channel jobs (`docs/jobs.md`, "Channel jobs") through each HTTP/2 app
/// environment's channel management API (§7.2), one at a time, and hands their results to the
/// result stage like a pool's outcomes. Channel jobs are rare next to notifications, so one
/// request at a time is enough; the queue holds only claimed jobs, which the in-flight limit
/// bounds.
final class ChannelActionStage: Sendable {
    /// Each app environment's settings in force, with its channel management API.
    private let pools: PoolSettingsStore
    private let results: ResultStage
    private let factory: ResultFactory
    private let logger: Logger
    private let queue: AsyncStream<SentContext>
    private let input: AsyncStream<SentContext>.Continuation
    /// Once set, queued jobs are given back instead of carried out.
    private let stopping = Atomic<Bool>(false)

    /// How long one request may take, connection included: short enough that a stop waiting
    /// for one in progress stays within its bound.
    static let requestTimeout: Duration = .seconds(5)

    init(pools: PoolSettingsStore, results: ResultStage, factory: ResultFactory, logger: Logger) {
        self.pools = pools
        self.results = results
        self.factory = factory
        self.logger = logger
        (queue, input) = AsyncStream.makeStream()
    }

    /// Queues claimed channel jobs. Once the stage is stopping they are given back at once:
    /// their claims are released and their messages consumed again by the next owner.
    func enqueue(_ contexts: [SentContext]) {
        for context in contexts {
            if case .terminated = input.yield(context) { giveBack(context) }
        }
    }

    /// Carries out the queued jobs until ``finish()``; the ones still queued then are given back.
    func run() async {
        for await context in queue {
            if stopping.load(ordering: .relaxed) {
                giveBack(context)
                continue
            }
            await perform(context)
        }
    }

    /// Stops taking jobs; ``run()`` ends once the one in progress is answered.
    func finish() {
        stopping.store(true, ordering: .relaxed)
        input.finish()
    }

    private func giveBack(_ context: SentContext) {
        let c = context.candidate
        results.submit([
            context.takeover
                ? .handedBack(c.ref, resultId: c.resultId) : .released(c.ref, resultId: c.resultId, token: c.tokenHex)
        ])
    }

    private func perform(_ context: SentContext) async {
        let candidate = context.candidate
        guard let action = candidate.job.channelAction else { return }
        let outcome: Result<String?, APNSChannelError>
        if var manager = pools[candidate.poolKey]?.channelManager {
            manager.timeout = Self.requestTimeout
            do throws(APNSChannelError) {
                switch action {
                case .create(let policy): outcome = .success(try await manager.create(storagePolicy: policy))
                case .delete:
                    try await manager.delete(channelID: candidate.tokenHex)
                    outcome = .success(nil)
                }
            } catch {
                outcome = .failure(error)
            }
        } else {
            outcome = .failure(
                APNSChannelError(
                    status: 0,
                    reason:
                        "app \"\(candidate.job.app)\" has no HTTP/2 \(candidate.job.environment) environment to manage channels in"
                )
            )
        }
        if case .failure(let error) = outcome {
            logger.warning(
                "Channel job \(candidate.job.jobId) failed: \(error)",
                metadata: [
                    "app": "\(candidate.job.app)", "env": "\(candidate.job.environment)", "action": "\(action.name)",
                ]
            )
        }
        results.submit([factory.channel(context, action: action, outcome: outcome, at: factory.now())])
    }
}
