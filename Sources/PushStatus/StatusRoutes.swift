import NIOCore
import NIOHTTP1
import Prometheus
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// One response of the status server, complete in memory (every response is small).
struct StatusResponse: Sendable {
    var status: HTTPResponseStatus
    var contentType: String
    var body: ByteBuffer
    var extraHeaders: [(String, String)] = []

    static let prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"
    static let jsonContentType = "application/json"
    static let textContentType = "text/plain; charset=utf-8"

    static func text(
        _ status: HTTPResponseStatus,
        _ text: String,
        extraHeaders: [(String, String)] = []
    ) -> StatusResponse {
        StatusResponse(
            status: status,
            contentType: textContentType,
            body: ByteBuffer(string: text + "\n"),
            extraHeaders: extraHeaders
        )
    }

    /// The answer to a request other than a probe on a connection in the probe reserve.
    static let reserveRefusal = StatusResponse.text(
        .serviceUnavailable,
        "the status server is serving as many connections as it takes; beyond them it answers only "
            + "/health/live and /health/ready: retry later",
        extraHeaders: [("Retry-After", "1")]
    )

    /// The response head for a request, keeping the connection open only if the request asked
    /// for it and `keepAlive` allows it.
    func head(for request: HTTPRequestHead, keepAlive: Bool) -> HTTPResponseHead {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: contentType)
        headers.add(name: "Content-Length", value: String(body.readableBytes))
        headers.add(name: "Cache-Control", value: "no-store")
        for (name, value) in extraHeaders {
            headers.add(name: name, value: value)
        }
        var head = HTTPResponseHead(version: request.version, status: status, headers: headers)
        if !keepAlive {
            head.headers.replaceOrAdd(name: "Connection", value: "close")
        } else if request.version == .http1_0 {
            head.headers.replaceOrAdd(name: "Connection", value: "keep-alive")
        }
        return head
    }

    /// The parts that answer `request`: the head, the body unless the request is a `HEAD`, the end.
    func parts(for request: HTTPRequestHead, keepAlive: Bool) -> [HTTPServerResponsePart] {
        var parts: [HTTPServerResponsePart] = [.head(head(for: request, keepAlive: keepAlive))]
        if request.method != .HEAD {
            parts.append(.body(.byteBuffer(body)))
        }
        parts.append(.end(nil))
        return parts
    }
}

/// The routes of the status server: `GET` (and `HEAD`) on `/metrics`, `/health/live`,
/// `/health/ready` and `/status`.
struct StatusRoutes: Sendable {
    let registry: PrometheusCollectorRegistry
    let provider: any StatusProvider
    let beforeScrape: (@Sendable () -> Void)?
    /// The size of the last `/metrics` output, the starting capacity of the next.
    private let lastMetricsSize = MetricsSizeHint()

    init(registry: PrometheusCollectorRegistry, provider: any StatusProvider, beforeScrape: (@Sendable () -> Void)?) {
        self.registry = registry
        self.provider = provider
        self.beforeScrape = beforeScrape
    }

    static let paths: Set<Substring> = ["/metrics", "/health/live", "/health/ready", "/status"]
    /// The paths the kubelet's probes ask for: cheap, and answered even beyond the general
    /// connection slots (``StatusAdmission``).
    static let probePaths: Set<Substring> = ["/health/live", "/health/ready"]

    /// The request's path, without its query.
    static func path(of request: HTTPRequestHead) -> Substring {
        request.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
    }

    /// Whether `request` asks for a health probe's path.
    static func isProbe(_ request: HTTPRequestHead) -> Bool {
        probePaths.contains(path(of: request))
    }

    func response(to request: HTTPRequestHead) -> StatusResponse {
        let path = Self.path(of: request)
        guard Self.paths.contains(path) else {
            return .text(
                .notFound,
                "not found: the status server serves /metrics, /health/live, /health/ready and /status"
            )
        }
        guard request.method == .GET || request.method == .HEAD else {
            return .text(.methodNotAllowed, "method not allowed: use GET", extraHeaders: [("Allow", "GET, HEAD")])
        }
        switch path {
        case "/metrics":
            return metrics()
        case "/health/live":
            return health(provider.liveness(), key: "live")
        case "/health/ready":
            return health(provider.readiness(), key: "ready")
        default:
            return status()
        }
    }

    private func metrics() -> StatusResponse {
        beforeScrape?()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(lastMetricsSize.value)
        registry.emit(into: &bytes)
        lastMetricsSize.value = bytes.count
        return StatusResponse(
            status: .ok,
            contentType: StatusResponse.prometheusContentType,
            body: ByteBuffer(bytes: bytes)
        )
    }

    private struct Health: Encodable {
        var key: String
        var healthy: Bool
        var reason: String?

        private struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(healthy, forKey: Key(stringValue: key))
            try container.encodeIfPresent(reason, forKey: Key(stringValue: "reason"))
        }
    }

    private func health(_ check: HealthCheck, key: String) -> StatusResponse {
        let health: Health
        switch check {
        case .ok:
            health = Health(key: key, healthy: true, reason: nil)
        case .failing(let reason):
            health = Health(key: key, healthy: false, reason: reason)
        }
        return json(health, status: check.isOK ? .ok : .serviceUnavailable)
    }

    private func status() -> StatusResponse {
        json(provider.status(), status: .ok)
    }

    private func json(_ value: some Encodable, status: HTTPResponseStatus) -> StatusResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
            var body = ByteBuffer(bytes: try encoder.encode(value))
            body.writeString("\n")
            return StatusResponse(status: status, contentType: StatusResponse.jsonContentType, body: body)
        } catch {
            return .text(.internalServerError, "cannot encode the answer as JSON: \(error)")
        }
    }
}

/// The size of the last `/metrics` output; read and written without ordering (it is a hint).
private final class MetricsSizeHint: Sendable {
    private let size = Atomic<Int>(4096)

    var value: Int {
        get { size.load(ordering: .relaxed) }
        set { size.store(min(newValue, 16 << 20), ordering: .relaxed) }
    }
}
