import APNSCore

extension WorkerConfiguration {
    /// How an app environment reaches Apple's servers (gateway, feedback service, channel
    /// management): through an HTTP proxy's `CONNECT` tunnel, or directly.
    ///
    /// The proxy comes from the environment's `proxy`, else `worker.proxy`, else the
    /// `https_proxy` / `HTTPS_PROXY` variables; `none` in either setting means directly,
    /// whatever the variables say. With a proxy from the variables, `no_proxy` / `NO_PROXY`
    /// names the hosts reached directly.
    public struct ProxyRoute: Sendable, Hashable, CustomStringConvertible {
        /// The proxy.
        public var proxy: APNSProxy
        /// Where it was set: the setting's dotted path or the variable's name.
        public var source: String
        /// The hosts reached directly (only for a proxy from the variables).
        public var bypass: NoProxyList

        public init(proxy: APNSProxy, source: String, bypass: NoProxyList = NoProxyList()) {
            self.proxy = proxy
            self.source = source
            self.bypass = bypass
        }

        /// The proxy for a connection to `host`: `nil` when `host` is to be reached directly.
        public func proxy(for host: String) -> APNSProxy? {
            bypass.matches(host) ? nil : proxy
        }

        /// The proxy with its password masked, and where it was set.
        public var description: String {
            let except = bypass.entries.isEmpty ? "" : " except \(bypass.entries.joined(separator: ","))"
            return "\(proxy) (\(source))\(except)"
        }
    }

    /// A `no_proxy` list, matched as curl matches it: comma-separated host names, each matching
    /// itself and every name that ends in `.` and it (a leading `.` is ignored), case aside;
    /// IP addresses match themselves only; `*` matches every host.
    public struct NoProxyList: Sendable, Hashable {
        /// The entries, normalised: lowercase, without leading or trailing dots or brackets.
        public private(set) var entries: [String] = []
        /// Whether the list is `*`.
        public private(set) var matchesAll = false

        public init() {}

        public init(parsing text: String) {
            for raw in text.split(whereSeparator: { $0 == "," || $0 == " " || $0 == "\t" }) {
                var entry = Substring(raw.lowercased())
                if entry == "*" {
                    matchesAll = true
                    entries.append("*")
                    continue
                }
                if entry.hasPrefix("["), let close = entry.firstIndex(of: "]") {
                    entry = entry[entry.index(after: entry.startIndex)..<close]
                }
                while entry.hasPrefix(".") { entry = entry.dropFirst() }
                while entry.hasSuffix(".") { entry = entry.dropLast() }
                if !entry.isEmpty { entries.append(String(entry)) }
            }
        }

        /// Whether `host` is reached directly.
        public func matches(_ host: String) -> Bool {
            if matchesAll { return true }
            var name = Substring(host.lowercased())
            if name.hasPrefix("["), name.hasSuffix("]") { name = name.dropFirst().dropLast() }
            while name.hasSuffix(".") { name = name.dropLast() }
            return entries.contains { entry in name == entry || name.hasSuffix("." + entry) }
        }
    }
}
