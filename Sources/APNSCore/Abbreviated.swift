extension String {
    /// The string for quoting in a sentence or a result: itself when it is at most `maxBytes`
    /// bytes of UTF-8, otherwise its first `maxBytes` bytes (cut between characters' scalars)
    /// followed by `…` and its length, e.g. `zzzz… (600000 bytes)`. Costs O(`maxBytes`), so input
    /// of any size can be named in an error without echoing all of it.
    public func abbreviated(toBytes maxBytes: Int = 64) -> String {
        let count = utf8.count
        guard count > maxBytes else { return self }
        var cut = utf8.index(utf8.startIndex, offsetBy: max(0, maxBytes))
        while cut > utf8.startIndex, UTF8.isContinuation(utf8[cut]) { cut = utf8.index(before: cut) }
        return String(self[..<cut]) + "… (\(count) bytes)"
    }
}
