import CHiredis

/// Facts about the linked hiredis. The Redis layer builds on this module; it is the only
/// module that imports `CHiredis`.
public enum HiredisLibrary {
    /// The hiredis version the headers declare, e.g. `"0.14.1"`.
    public static var version: String {
        "\(HIREDIS_MAJOR).\(HIREDIS_MINOR).\(HIREDIS_PATCH)"
    }

    /// Tries a TCP connection to `host:port` and reports hiredis's error string, or `nil` when
    /// the connection succeeded. Used to prove the library links and runs.
    public static func connectionError(host: String, port: Int32) -> String? {
        guard let context = redisConnect(host, port) else { return "hiredis could not allocate a context" }
        defer { redisFree(context) }
        if context.pointee.err != 0 {
            return withUnsafeBytes(of: context.pointee.errstr) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
        }
        return nil
    }
}
