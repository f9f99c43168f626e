import APNSCore
import ArgumentParser
import CoreMetrics
import Foundation
import Logging
import Prometheus
import PushCommandLine
import PushConfiguration
import PushKafka
import PushStatus
import PushWorker
import ServiceLifecycle
import UnixSignals

/// `apn-worker run`: one member of the worker group.
struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Consume jobs from Kafka, deliver them to APNs and write one result per notification.",
        discussion: """
            Configuration comes from a YAML or JSON file (--config or APN_WORKER_CONFIG), APN_WORKER_* \
            environment variables and these flags; flags win. See docs/configuration.md. Prints \
            {"event":"ready",...} on standard output once its services have started (and its status \
            server listens), before it has joined the group; logs go to standard \
            error. SIGTERM or SIGINT stops it gracefully: consumption stops, notifications in flight are \
            finished, their results written and offsets committed. SIGHUP reloads the credentials \
            (they are also reloaded when their files change; see docs/operations.md).
            """
    )

    @OptionGroup var flags: ConfigurationFlags

    func run() async throws {
        let configuration: WorkerConfiguration
        do {
            configuration = try WorkerConfiguration.load(
                overrides: flags.overrides,
                environment: ProcessInfo.processInfo.environment
            )
        } catch {
            printError(error.message)
            throw ExitCode(2)
        }

        let level = Logger.Level(rawValue: configuration.worker.logLevel.rawValue) ?? .info
        let json = configuration.worker.logFormat == .json
        LoggingSystem.bootstrap { label in
            if json { return JSONLogHandler(label: label, level: level) }
            // Text lines escape control characters (a job id's line break cannot forge a line).
            return TextLogHandler(label: label, level: level)
        }
        let logger = Logger(label: "apn-worker")
        // Metrics go to the status server's registry; without a status server, nowhere.
        let registry = PrometheusCollectorRegistry()
        let metrics =
            configuration.worker.statusAddress == nil
            ? WorkerMetrics(factory: NOOPMetricsHandler.instance)
            : WorkerMetrics(factory: PrometheusMetricsFactory(registry: registry))
        let worker: Worker
        do {
            // A credential reload loads the config file again as it was loaded now.
            let overrides = flags.overrides
            worker = try Worker(configuration: configuration, metrics: metrics, logger: logger) {
                () throws(ConfigurationError) -> WorkerConfiguration in
                try WorkerConfiguration.load(overrides: overrides, environment: ProcessInfo.processInfo.environment)
            }
        } catch {
            printError(error.message)
            throw ExitCode(2)
        }
        for warning in configuration.warnings { logger.warning("\(warning)") }

        // The status server, the worker and its Kafka clients and Redis connections are services
        // of one group that SIGTERM or SIGINT shuts down gracefully in reverse order: the worker
        // first, the status server last (readiness answers 503 while the worker drains).
        var services: [any Service]
        do {
            services = try worker.services()
        } catch {
            printError("\(error)")
            throw ExitCode(1)
        }
        // Trapped before the worker announces that it is ready: from then on, SIGHUP asks for a
        // credential reload instead of ending the process.
        services.append(ReloadOnHangup(signals: await UnixSignalsSequence(trapping: .sighup), worker: worker))
        var server: StatusServer?
        if let address = configuration.worker.statusAddress {
            let process = ProcessMetrics(registry: registry)
            let made = StatusServer(
                configuration: .init(host: address.host, port: address.port),
                registry: registry,
                provider: WorkerStatusProvider(worker: worker),
                beforeScrape: {
                    process.update()
                    worker.updateMetrics()
                },
                logger: logger
            )
            services.insert(made, at: 0)
            server = made
        }
        let fields: [(String, JSONValue)] = [
            ("event", "ready"), ("worker", .string(configuration.worker.id)),
            ("group", .string(configuration.kafka.groupId)),
        ]
        do {
            // The drain takes up to shutdownTimeoutSeconds; leaving the group, closing the
            // producer and the Redis connections a few seconds more, each bounded. Past that, what
            // is still running is cancelled: a stop ends within shutdownTimeoutSeconds + 10 s.
            try await runUntilTerminated(
                services,
                logger: logger,
                stopWithin: configuration.worker.shutdownTimeout + .seconds(8)
            ) {
                [fields, server] in
                var fields = fields
                if let server {
                    // Announced once it listens; a server that cannot bind stops the group instead.
                    guard let address = try? await server.listeningAddress() else { return }
                    let host = address.ipAddress ?? "?"
                    fields.append(
                        (
                            "status",
                            .string(
                                host.contains(":") ? "[\(host)]:\(address.port ?? 0)" : "\(host):\(address.port ?? 0)"
                            )
                        )
                    )
                }
                print(jsonLine(fields))
                fflush(nil)
            }
        } catch {
            printError("\(error)")
            throw ExitCode(1)
        }
        let statistics = worker.statistics
        print(
            jsonLine([
                ("event", "stopped"), ("worker", .string(configuration.worker.id)),
                ("messages", .int(Int64(statistics.messages))),
                ("notifications", .int(Int64(statistics.notifications))),
                ("results", .int(Int64(statistics.results))),
                ("skipped", .int(Int64(statistics.skipped))),
                ("redisRoundTrips", .int(Int64(statistics.redisRoundTrips))),
                ("redisRedirects", .int(Int64(statistics.redisRedirects))),
            ])
        )
    }
}

/// Asks the worker to check its credentials again at each SIGHUP (`docs/operations.md`,
/// "Rotating credentials"), until the group shuts down.
private struct ReloadOnHangup: Service {
    var signals: UnixSignalsSequence
    var worker: Worker

    func run() async {
        await cancelWhenGracefulShutdown {
            for await _ in signals { worker.reloadCredentials() }
        }
    }
}
