/// The user information of a URL (`scheme://user:password@host…`): where it ends, and the URL
/// with its password masked.
///
/// The one reading shared by the Redis URL parser, the proxy URL parser and every message that
/// shows such a URL. The user information ends at the **last** `@` after the scheme, so a
/// password may hold `/`, `?`, `#`, `:` or `@` without being percent-encoded and still be read
/// (and masked) whole: a path, query or fragment is only looked for after that `@`. None of the
/// URLs this project reads has an `@` in its path; one that did would be masked up to it, more
/// than needed rather than less.
public enum URLUserInfo {
    /// The index just after `scheme://`, when `url` starts with a scheme (a letter, then
    /// letters, digits, `+`, `-` or `.`, RFC 3986 §3.1) followed by `://`; `nil` otherwise.
    /// Text before a `://` that is not a scheme (`user:pa://ss@host`) is not taken for one.
    public static func schemeEnd(of url: Substring) -> Substring.Index? {
        guard let separator = url.firstRange(of: "://") else { return nil }
        let scheme = url[..<separator.lowerBound].unicodeScalars
        guard let first = scheme.first, first.isASCIILetter,
            scheme.allSatisfy({ $0.isASCIILetter || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0) })
        else { return nil }
        return separator.upperBound
    }

    /// `rest` (a URL after its `scheme://`, or a URL written without one) split at its last
    /// `@`: the user information before it, `nil` without an `@`, and what follows it (host,
    /// port, path…).
    public static func split(_ rest: Substring) -> (userInfo: Substring?, remainder: Substring) {
        guard let at = rest.lastIndex(of: "@") else { return (nil, rest) }
        return (rest[..<at], rest[rest.index(after: at)...])
    }

    /// The user and password of user information: the user is what stands before the first
    /// `:`, the password everything after it (`nil` without a `:`). Neither is percent-decoded.
    public static func credentials(_ userInfo: Substring) -> (user: Substring, password: Substring?) {
        guard let colon = userInfo.firstIndex(of: ":") else { return (userInfo, nil) }
        return (userInfo[..<colon], userInfo[userInfo.index(after: colon)...])
    }

    /// `url` with everything between its scheme (or its start, without one) and its last `@`
    /// replaced by the user and `:***`, for messages and logs. User information without a `:`
    /// is masked whole, in case it is a password written without its `:`. A URL without an `@`
    /// is returned as it is.
    public static func redacted(_ url: String) -> String {
        let text = Substring(url)
        let start = schemeEnd(of: text) ?? text.startIndex
        guard let userInfo = split(text[start...]).userInfo else { return url }
        let (user, password) = credentials(userInfo)
        return String(text[..<start]) + (password == nil ? "" : String(user)) + ":***"
            + String(text[userInfo.endIndex...])
    }
}

extension Unicode.Scalar {
    fileprivate var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
}
