import ArgumentParser
import PushCommandLine
import PushStatus

/// `apn-worker status`: reads a running worker's `GET /status` and prints it as a table.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Print a running worker's status (partitions and lag, pools, Redis, readiness) as a table."
    )

    @Option(help: "The worker's status server, HOST:PORT (its worker.statusAddress).")
    var address = "127.0.0.1:9400"
    @Option(help: "Seconds to wait for the connection and for the answer.")
    var timeout: Double = 5
    @Flag(help: "Print the JSON document as the worker sent it.")
    var json = false

    func run() async throws {
        var target: (host: String, port: Int) = ("", 0)
        try await reportingFailures {
            target = try parseAddress(address, option: "--address")
            guard timeout > 0, timeout <= 3_600 else {
                throw UsageFailure(
                    message: "--timeout must be a number of seconds above 0 and at most 3600, not \(timeout)"
                )
            }
        }
        // An IPv6 address is written in brackets: [::1]:9400.
        let host =
            target.host.hasPrefix("[") && target.host.hasSuffix("]")
            ? String(target.host.dropFirst().dropLast()) : target.host
        let client = StatusClient(host: host, port: target.port, timeout: .milliseconds(Int64(timeout * 1000)))
        do {
            if json {
                let response = try await client.get("/status")
                guard response.status == .ok else {
                    throw StatusError(
                        .badResponse,
                        "\(client.address) answered \(response.status.code) to GET /status; is it a worker's status server?"
                    )
                }
                print(response.text, terminator: response.text.hasSuffix("\n") ? "" : "\n")
            } else {
                print(StatusReport.render(try await client.status()), terminator: "")
            }
        } catch let error as StatusError {
            switch error.code {
            case .unreachable, .timedOut:
                printError("\(error.message); is the worker running with worker.statusAddress set?")
            default:
                printError(error.message)
            }
            throw ExitCode(1)
        }
    }
}
