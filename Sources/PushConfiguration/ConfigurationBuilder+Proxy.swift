import APNSCore
import Foundation

extension ConfigurationBuilder {
    /// The variables a proxy is taken from when no setting names one, in curl's order.
    static let proxyVariables = ["https_proxy", "HTTPS_PROXY"]
    /// The variables listing the hosts reached directly, in curl's order.
    static let noProxyVariables = ["no_proxy", "NO_PROXY"]

    /// The route of an app environment: its own `proxy`, else `worker.proxy`, else the
    /// variables (``WorkerConfiguration/ProxyRoute``); `nil` for a direct connection.
    func proxyRoute(environment section: ConfigSection) throws(ConfigurationError) -> WorkerConfiguration.ProxyRoute? {
        for setting in [section, try root.section("worker")] {
            switch try proxySetting(setting, "proxy") {
            case .direct: return nil
            case .proxy(let route): return route
            case nil: continue
            }
        }
        guard let name = Self.proxyVariables.first(where: { !(environment[$0] ?? "").isBlank }),
            let text = environment[name]
        else { return nil }
        let proxy = try Self.proxy(text, label: name)
        let bypass = Self.noProxyVariables.first { !(environment[$0] ?? "").isBlank }
            .map { WorkerConfiguration.NoProxyList(parsing: environment[$0] ?? "") }
        return WorkerConfiguration.ProxyRoute(proxy: proxy, source: name, bypass: bypass ?? .init())
    }

    private enum ProxySetting {
        /// `none`.
        case direct
        case proxy(WorkerConfiguration.ProxyRoute)
    }

    /// A `proxy` setting; `nil` when it is not set (or null).
    private func proxySetting(_ section: ConfigSection, _ key: String) throws(ConfigurationError) -> ProxySetting? {
        guard !section.isNull(key), let value = section.value(key) else { return nil }
        guard case .scalar = value.node else {
            throw ConfigurationError(
                "\(value.label) must be a proxy URL (http://[user:password@]host:port) or none, not \(value.shown)."
            )
        }
        let text = try SettingParsing.string(value)
        if text.trimmingCharacters(in: .whitespaces).lowercased() == "none" { return .direct }
        let proxy = try Self.proxy(text, label: value.label)
        return .proxy(WorkerConfiguration.ProxyRoute(proxy: proxy, source: value.label))
    }

    private static func proxy(_ text: String, label: String) throws(ConfigurationError) -> APNSProxy {
        do {
            return try APNSProxy(url: text)
        } catch {
            throw ConfigurationError("\(label): \(error.message); write none to connect directly.")
        }
    }
}

extension String {
    fileprivate var isBlank: Bool { allSatisfy(\.isWhitespace) }
}
