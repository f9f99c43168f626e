import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import PushStatus
import Synchronization
import Testing

/// The liveness probe under clients that hold every general slot: 200 keep-alive clients poll
/// `/metrics` every 5 ms while 20 probes, each on a fresh connection as the kubelet makes them,
/// ask `/health/live`.
///
/// The bound is about admission, not about how busy the machine is. Every probe must be answered
/// 200: a connection refused, reset or closed without an answer fails the test whatever the
/// timing. Each probe is timed on its own, on an event loop of its own, from its connect to the
/// end of its answer, so that the test's tasks waiting for a thread are not counted; less the
/// time the event loops on its path ran late meanwhile (``LoopStallWatch``: the server's loops,
/// busy with the scrapers, and the probe's, when the machine leaves them waiting for a CPU). A
/// probe queued behind the scrapers until a slot frees, or answered only by a task that waits
/// its turn behind theirs, shows up in what is left; a machine running the whole suite on two
/// cores does not.
@Suite("StatusServer: probes are answered while 200 keep-alive clients hammer /metrics")
struct StatusServerStarvationTests {
    static let clients = 200
    static let probes = 20
    static let bound = TimeAmount.milliseconds(100)

    @Test func everyLivenessProbeIsAnsweredWithin100msWhileScrapersHoldEveryGeneralSlot() async throws {
        // The defaults, but every client comes from 127.0.0.1: the per-peer cap (tested on its
        // own) is raised so that the clients can fill the general slots, and the connections live
        // longer than the test, so that the slots stay held throughout.
        var configuration = StatusServer.Configuration(host: "127.0.0.1", port: 0)
        configuration.maximumConnectionsPerPeer = 1_000
        configuration.maximumConnectionAge = .seconds(600)
        let general = configuration.maximumConnections
        let probeGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { probeGroup.shutdownGracefully { _ in } }
        let (samples, counts, servedDuringProbes) = try await withStatusServer(
            configuration: configuration,
            registry: Self.registry()
        ) { _, client in
            try await Self.probe(port: client.port, general: general, probeLoop: probeGroup.next())
        }

        print(ProbeSample.summary(samples, counts: counts))
        #expect(counts.turnedAway + counts.refused >= Self.clients - general, "the server was not at its limit")
        #expect(servedDuringProbes >= general * 2, "the scrapers stopped polling during the probes")
        for (index, sample) in samples.enumerated() {
            #expect(sample.status == .ok, "probe \(index) was not answered: \(sample)")
            #expect(sample.holding == general, "probe \(index): the general slots were not all held: \(sample)")
            #expect(
                sample.latency - sample.heldBack <= Self.bound,
                "probe \(index) took longer than \(Self.bound.milliseconds) ms beyond the loops' stalls: \(sample)"
            )
        }
    }

    /// Starts the clients, waits until they hold every general slot, takes the probes, and stops
    /// the clients: the probes, what the clients saw, and the scrapes served during the probes.
    static func probe(
        port: Int,
        general: Int,
        probeLoop: any EventLoop
    ) async throws -> ([ProbeSample], HammerCounts, Int) {
        let counts = HammerCounts()
        let watch = LoopStallWatch(loops: Array(MultiThreadedEventLoopGroup.singleton.makeIterator()) + [probeLoop])
        watch.start()
        defer { watch.stop() }
        return try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<clients {
                group.addTask { await Hammer.run(port: port, counts: counts) }
            }
            defer { group.cancelAll() }
            // Every client has had its first answer (or its first refusal), and the general
            // slots are all held by clients that poll.
            try await withDeadline(seconds: 60, "\(general) clients holding the general slots") {
                while counts.holding < general || counts.started < clients {
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            let servedBefore = counts.served
            var samples: [ProbeSample] = []
            for _ in 0..<probes {
                var sample = try await ProbeSample.take(port: port, on: probeLoop, counts: counts)
                // Probes spaced as a kubelet spaces them, more densely; the pause is the prober's
                // behaviour, not a synchronisation. It also lets the watch record a stall that
                // outlasted the probe; one it has not recorded yet only makes the bound stricter.
                try await Task.sleep(for: .milliseconds(50))
                sample.heldBack = watch.heldBack(during: sample.window)
                samples.append(sample)
            }
            return (samples, counts, counts.served - servedBefore)
        }
    }

    /// A registry with a counter and a histogram, for `/metrics` answers of a realistic shape.
    static func registry() -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "apn_worker",
                metricName: "messages_consumed",
                unitName: "total",
                helpText: "Kafka messages consumed."
            )
        ).increment(by: Int64(42))
        registry.makeDurationHistogram(
            descriptor: MetricNameDescriptor(
                namespace: "apn_worker",
                metricName: "redis_latency",
                unitName: "seconds",
                helpText: "Time of one pipelined Redis round trip."
            ),
            buckets: [.milliseconds(1), .milliseconds(5), .milliseconds(25), .milliseconds(100), .seconds(1)]
        ).recordNanoseconds(3_000_000)
        return registry
    }
}

/// One liveness probe, as the kubelet makes it: a fresh connection, `GET /health/live` with
/// `Connection: close`. It runs on an event loop of its own and is timed there, from the moment it
/// connects to the end of the answer.
struct ProbeSample: CustomStringConvertible {
    var status: HTTPResponseStatus?
    var window: Range<NIODeadline>
    /// How long the event loops on the probe's path were held back during it (``LoopStallWatch``).
    var heldBack = TimeAmount.zero
    /// Clients holding general slots when the probe began.
    var holding: Int

    var latency: TimeAmount { window.upperBound - window.lowerBound }

    static func take(port: Int, on loop: any EventLoop, counts: HammerCounts) async throws -> ProbeSample {
        let answered = loop.makePromise(of: ProbeHandler.Outcome.self)
        let holding = counts.holding
        let start = NIODeadline.now()
        ClientBootstrap(group: loop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(ProbeHandler(answered: answered))
                }
            }
            .connect(host: "127.0.0.1", port: port)
            .whenFailure { answered.fail($0) }
        let outcome = try await withDeadline(seconds: 30, "a liveness probe's answer") {
            try await answered.futureResult.get()
        }
        return ProbeSample(status: outcome.status, window: start..<outcome.end, holding: holding)
    }

    var description: String {
        "status \(status.map { "\($0.code)" } ?? "none (closed)"), \(latency.milliseconds) ms, "
            + "event loops held back \(heldBack.milliseconds) ms, \(holding) slots held"
    }

    static func summary(_ samples: [ProbeSample], counts: HammerCounts) -> String {
        let latencies = samples.map(\.latency).sorted()
        let adjusted = samples.map { $0.latency - $0.heldBack }.sorted()
        func figures(_ list: [TimeAmount]) -> String {
            guard let first = list.first, let last = list.last else { return "none" }
            return "min \(first.milliseconds) ms, median \(list[list.count / 2].milliseconds) ms, "
                + "max \(last.milliseconds) ms"
        }
        return "liveness probes under \(StatusServerStarvationTests.clients) keep-alive clients: "
            + "\(samples.filter { $0.status == .ok }.count)/\(samples.count) answered 200; "
            + "time \(figures(latencies)); less the event loops' stalls \(figures(adjusted)); "
            + "scrapes served \(counts.served), turned away \(counts.turnedAway), refused \(counts.refused)"
    }
}

/// Sends the probe's request once connected, and records when its answer ends (or the connection
/// closes without one), on the event loop.
final class ProbeHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    struct Outcome: Sendable {
        var status: HTTPResponseStatus?
        var end: NIODeadline
    }

    private let answered: EventLoopPromise<Outcome>
    private var status: HTTPResponseStatus?
    private var done = false

    init(answered: EventLoopPromise<Outcome>) {
        self.answered = answered
    }

    func channelActive(context: ChannelHandlerContext) {
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/health/live")
        head.headers.add(name: "Host", value: "127.0.0.1")
        head.headers.add(name: "Connection", value: "close")
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            status = head.status
        case .body:
            break
        case .end:
            finish(status)
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(nil)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func finish(_ status: HTTPResponseStatus?) {
        guard !done else { return }
        done = true
        answered.succeed(Outcome(status: status, end: .now()))
    }
}

extension TimeAmount {
    /// In milliseconds, to one decimal.
    var milliseconds: Double {
        (Double(nanoseconds) / 100_000).rounded() / 10
    }
}

/// What the hammering clients have seen, counted as they go.
final class HammerCounts: Sendable {
    private let holdingCount = Atomic<Int>(0)
    private let startedCount = Atomic<Int>(0)
    private let servedCount = Atomic<Int>(0)
    private let turnedAwayCount = Atomic<Int>(0)
    private let refusedCount = Atomic<Int>(0)

    /// Clients whose connection's last answer was a `/metrics` kept alive: they hold a general slot.
    var holding: Int { holdingCount.load(ordering: .relaxed) }
    /// Clients that have had a first answer or refusal.
    var started: Int { startedCount.load(ordering: .relaxed) }
    /// `/metrics` answered 200.
    var served: Int { servedCount.load(ordering: .relaxed) }
    /// Answers that sent the client away (`503` from the reserve).
    var turnedAway: Int { turnedAwayCount.load(ordering: .relaxed) }
    /// Connections closed without an answer.
    var refused: Int { refusedCount.load(ordering: .relaxed) }

    func hold(_ delta: Int) { holdingCount.add(delta, ordering: .relaxed) }
    func start() { startedCount.add(1, ordering: .relaxed) }
    func serve() { servedCount.add(1, ordering: .relaxed) }
    func turnAway() { turnedAwayCount.add(1, ordering: .relaxed) }
    func refuse() { refusedCount.add(1, ordering: .relaxed) }
}

/// A scraper that wants a keep-alive connection: it polls `/metrics` every 5 ms for as long as
/// the server keeps its connection; sent away (a `503`, or a close without an answer), it waits
/// the `Retry-After` the server asks for (or a second), give or take half, and connects again.
enum Hammer {
    static let pollInterval = Duration.milliseconds(5)

    static func run(port: Int, counts: HammerCounts) async {
        var first = true
        while !Task.isCancelled {
            var pause = pollInterval
            do {
                try await PeerConnection.with(port: port) { connection in
                    var holding = false
                    defer { if holding { counts.hold(-1) } }
                    while !Task.isCancelled {
                        let answer = try await connection.get("/metrics")
                        if first {
                            first = false
                            counts.start()
                        }
                        guard let answer else {
                            counts.refuse()
                            pause = .seconds(1)
                            return
                        }
                        guard answer.status == .ok else {
                            counts.turnAway()
                            pause = .seconds(Int(answer.headers.first(name: "Retry-After") ?? "") ?? 1)
                            return
                        }
                        counts.serve()
                        if answer.closes { return }
                        if !holding {
                            holding = true
                            counts.hold(1)
                        }
                        try await Task.sleep(for: pollInterval)
                    }
                }
            } catch {
                pause = .seconds(1)
            }
            let jittered = pause == pollInterval ? pause : pause * Double.random(in: 0.5...1.5)
            do {
                try await Task.sleep(for: jittered)
            } catch {
                return
            }
        }
    }
}

/// How far behind some event loops run: on each, a task asks to run every 2 ms, and each stretch
/// of time it ran late is recorded. A loop runs late when it is busy, or when its thread waits
/// for a CPU, as all of this process's threads do when the machine is loaded.
final class LoopStallWatch: Sendable {
    private static let period = TimeAmount.milliseconds(2)
    private let loops: [any EventLoop]
    private let late: Mutex<[[Range<NIODeadline>]]>
    private let stopped = Atomic<Bool>(false)

    init(loops: [any EventLoop]) {
        self.loops = loops
        self.late = Mutex(Array(repeating: [], count: loops.count))
    }

    func start() {
        for index in loops.indices {
            schedule(index)
        }
    }

    /// Stops asking; each loop runs the task it has scheduled once more, within 2 ms.
    func stop() {
        stopped.store(true, ordering: .relaxed)
    }

    private func schedule(_ index: Int) {
        guard !stopped.load(ordering: .relaxed) else { return }
        let due = NIODeadline.now() + Self.period
        loops[index].scheduleTask(deadline: due) {
            let ran = NIODeadline.now()
            if ran > due {
                self.late.withLock { $0[index].append(due..<ran) }
            }
            self.schedule(index)
        }
    }

    /// The most time any one of the loops spent running late during `window`.
    func heldBack(during window: Range<NIODeadline>) -> TimeAmount {
        late.withLock { perLoop in
            perLoop.map { stretches in
                stretches.reduce(TimeAmount.zero) { total, stretch in
                    let from = max(stretch.lowerBound, window.lowerBound)
                    let to = min(stretch.upperBound, window.upperBound)
                    return from < to ? total + (to - from) : total
                }
            }.max() ?? .zero
        }
    }
}
