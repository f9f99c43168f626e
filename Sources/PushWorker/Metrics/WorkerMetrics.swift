import APNSCore
import CoreMetrics
import Synchronization

/// The worker's metrics (``MetricCatalogue``), reported through swift-metrics to whatever
/// factory the process bootstrapped (swift-prometheus in `apn-worker run`).
///
/// Stages report in batches (one call per written batch of results, per claim round trip), so
/// the cost per notification is a few dictionary updates. Counts the worker already keeps
/// (messages consumed, Redis round trips, Kafka commits, the pools' counters) are read when
/// metrics are scraped, through ``advance(_:_:to:)``, which turns a running total into counter
/// increments.
public final class WorkerMetrics: Sendable {
    private enum Handle {
        case counter(Counter)
        case timer(CoreMetrics.Timer)
        case meter(Meter)
    }

    private struct Key: Hashable {
        var name: String
        var labels: [String]
    }

    private struct State {
        var handles: [Key: Handle] = [:]
        /// The last running total seen by ``advance(_:_:to:)``.
        var totals: [Key: Int] = [:]
    }

    private let factory: any MetricsFactory
    private let state = Mutex(State())
    /// False for swift-metrics' no-op factory: the stages then skip counting altogether.
    let isEnabled: Bool

    /// Metrics made by `factory`; by default the one `MetricsSystem.bootstrap` installed.
    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        self.isEnabled = !(factory is NOOPMetricsHandler)
    }

    /// Adds `amount` to a counter.
    func increment(_ metric: MetricDescription, _ labels: [String] = [], by amount: Int = 1) {
        guard amount > 0, case .counter(let counter) = handle(metric, labels) else { return }
        counter.increment(by: amount)
    }

    /// Raises a counter to a running total kept elsewhere; a total lower than the last one
    /// seen (a pool made anew) starts counting from there.
    func advance(_ metric: MetricDescription, _ labels: [String] = [], to total: Int) {
        let key = Key(name: metric.name, labels: labels)
        let delta = state.withLock { s in
            let last = s.totals[key] ?? 0
            s.totals[key] = total
            return total >= last ? total - last : total
        }
        increment(metric, labels, by: delta)
    }

    /// Records one observation of a histogram, in seconds.
    func observe(_ metric: MetricDescription, _ labels: [String] = [], _ duration: Duration) {
        guard case .timer(let timer) = handle(metric, labels) else { return }
        let (seconds, attoseconds) = duration.components
        timer.recordNanoseconds(max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
    }

    /// Records several observations of one histogram, looking its series up once.
    func observe(_ metric: MetricDescription, _ labels: [String] = [], milliseconds values: [Int64]) {
        guard !values.isEmpty, case .timer(let timer) = handle(metric, labels) else { return }
        for value in values { timer.recordNanoseconds(max(0, value) * 1_000_000) }
    }

    /// Records several observations of one histogram, in nanoseconds, looking its series up once.
    func observe(_ metric: MetricDescription, _ labels: [String] = [], nanoseconds values: [Int64]) {
        guard !values.isEmpty, case .timer(let timer) = handle(metric, labels) else { return }
        for value in values { timer.recordNanoseconds(max(0, value)) }
    }

    /// Sets a gauge.
    func set(_ metric: MetricDescription, _ labels: [String] = [], to value: Int) {
        guard case .meter(let meter) = handle(metric, labels) else { return }
        meter.set(value)
    }

    /// Removes a gauge's series (a partition no longer assigned, a pool gone).
    func remove(_ metric: MetricDescription, _ labels: [String]) {
        let key = Key(name: metric.name, labels: labels)
        guard case .meter(let meter)? = state.withLock({ $0.handles.removeValue(forKey: key) }) else { return }
        meter.destroy()
    }

    private func handle(_ metric: MetricDescription, _ labels: [String]) -> Handle {
        let key = Key(name: metric.name, labels: labels)
        return state.withLock { s in
            if let handle = s.handles[key] { return handle }
            let dimensions = Array(zip(metric.labels, labels))
            let handle: Handle
            switch metric.kind {
            case .counter: handle = .counter(Counter(label: metric.name, dimensions: dimensions, factory: factory))
            case .histogram:
                handle = .timer(
                    CoreMetrics.Timer(
                        label: metric.name,
                        dimensions: dimensions,
                        preferredDisplayUnit: .seconds,
                        factory: factory
                    )
                )
            case .gauge: handle = .meter(Meter(label: metric.name, dimensions: dimensions, factory: factory))
            }
            s.handles[key] = handle
            return handle
        }
    }
}

// MARK: What the stages report

extension WorkerMetrics {
    /// Counts results written to the results topic: by outcome, possible duplicates, invalid
    /// jobs, and the end-to-end latency of those that came from a claimed notification.
    /// `transports` maps each configured app to its transport; any other app name (a job's
    /// unknown app) is counted under an empty `app`, so that labels stay bounded.
    func produced(_ results: [ResultMetric], transports: [String: String], now: Int64) {
        guard isEnabled else { return }
        // Counted by the values as they are, labelled once per distinct value.
        struct Outcome: Hashable {
            var app: String?
            var environment: APNSEnvironment?
            var kind: WorkerResult.Kind
            var status: APNSStatus?
        }
        struct Pool: Hashable {
            var app: String?
            var environment: APNSEnvironment?
        }
        var outcomes: [Outcome: Int] = [:]
        var duplicates: [Pool: Int] = [:]
        var latencies: [Pool: [Int64]] = [:]
        var invalid = 0
        // Results of one batch mostly share their outcome: runs are counted, and hashed once.
        var run: (outcome: Outcome, count: Int)?
        var runLatencies: [Int64] = []
        func endRun() {
            guard let (outcome, count) = run else { return }
            outcomes[outcome, default: 0] += count
            if !runLatencies.isEmpty {
                latencies[Pool(app: outcome.app, environment: outcome.environment), default: []].append(
                    contentsOf: runLatencies
                )
                runLatencies.removeAll(keepingCapacity: true)
            }
        }
        for result in results {
            let outcome = Outcome(
                app: result.app,
                environment: result.environment,
                kind: result.kind,
                status: result.status
            )
            if run?.outcome == outcome {
                run!.count += 1
            } else {
                endRun()
                run = (outcome, 1)
            }
            if result.kind == .invalidJob { invalid += 1 }
            if result.possibleDuplicate {
                duplicates[Pool(app: result.app, environment: result.environment), default: 0] += 1
            }
            if result.since > 0 { runLatencies.append(now - result.since) }
        }
        endRun()
        func labels(_ app: String?, _ environment: APNSEnvironment?) -> [String] {
            let app = app.flatMap { transports[$0] == nil ? nil : $0 } ?? ""
            return [app, environment?.rawValue ?? "", transports[app] ?? ""]
        }
        for (o, count) in outcomes {
            increment(
                MetricCatalogue.notifications,
                labels(o.app, o.environment) + [o.kind.rawValue, o.status?.name ?? ""],
                by: count
            )
        }
        for (p, count) in duplicates {
            increment(MetricCatalogue.possibleDuplicates, labels(p.app, p.environment), by: count)
        }
        for (p, values) in latencies {
            observe(MetricCatalogue.endToEndLatency, labels(p.app, p.environment), milliseconds: values)
        }
        increment(MetricCatalogue.invalidJobs, by: invalid)
        increment(MetricCatalogue.resultsProduced, by: results.count)
    }

    /// Counts what one claim round trip decided for notifications it did not send.
    func claimed(_ decisions: ClaimStage.Decisions) {
        guard isEnabled else { return }
        for (app, count) in decisions.duplicates { increment(MetricCatalogue.duplicatesSuppressed, [app], by: count) }
        for (app, count) in decisions.throttled { increment(MetricCatalogue.rateLimited, [app, "app"], by: count) }
        for (app, count) in decisions.deviceLimited {
            increment(MetricCatalogue.rateLimited, [app, "device"], by: count)
        }
        for (app, count) in decisions.unregistered { increment(MetricCatalogue.unregisteredSkipped, [app], by: count) }
        for (app, count) in decisions.stale { increment(MetricCatalogue.staleSkipped, [app], by: count) }
        for (app, count) in decisions.superseded {
            increment(MetricCatalogue.liveActivitySuperseded, [app], by: count)
        }
    }
}

extension ResultMetric {
    /// What a stored result counts as, read from its JSON (`type`, `status`, `app`, `env`,
    /// `possibleDuplicate`); `nil` when it is not a result.
    init?(parsing value: [UInt8]) {
        guard let json = try? JSONValue.parse(value),
            let kind = json["type"]?.stringValue.flatMap(WorkerResult.Kind.init)
        else { return nil }
        var status: APNSStatus?
        if case .int(let code)? = json["status"] { status = APNSStatus(rawValue: Int(code)) }
        self.init(
            kind: kind,
            possibleDuplicate: json["possibleDuplicate"] == .bool(true),
            environment: json["env"]?.stringValue.flatMap(APNSEnvironment.init),
            status: status,
            app: json["app"]?.stringValue
        )
    }
}
