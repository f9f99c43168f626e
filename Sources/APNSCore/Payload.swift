extension APNSNotification {
    /// Payload limit of the binary API for iOS 8 and later (§1.3).
    public static let binaryPayloadLimit = 2048

    /// Values Apple documents for `aps.interruption-level` (§5).
    public static let interruptionLevels: Set<String> = ["passive", "active", "time-sensitive", "critical"]

    /// Whether any field that is written inside `aps` is set.
    public var hasAPSFields: Bool {
        alert != nil || badge != nil || sound != nil || contentAvailable || mutableContent
            || category != nil || threadId != nil || targetContentId != nil || interruptionLevel != nil
            || relevanceScore != nil || urlArgs != nil || !additionalAPSFields.isEmpty
    }

    /// The compact JSON payload: `{"aps":{...}, custom...}`.
    ///
    /// `aps` keys are written in this order: `alert` (string, or dict with only the set
    /// fields), `badge`, `sound`, `content-available:1`, `mutable-content:1`, `category`,
    /// `thread-id`, `target-content-id`, `interruption-level`, `relevance-score`, `url-args`,
    /// then ``additionalAPSFields`` in sorted order. Flags are the number 1 (§5 check 6).
    /// Custom keys follow `aps` in sorted order. `aps` is always present (possibly empty),
    /// except for MDM, whose payload is exactly `{"mdm":"..."}` (§5).
    ///
    /// Throws `mdmWithAPS` when ``mdm`` is combined with `aps` fields or custom keys, and
    /// `invalidValue` for a custom key `"aps"`, an ``additionalAPSFields`` key that repeats a
    /// key already written, a negative badge, a non-finite relevance score, a critical volume
    /// outside 0–1 or an empty MDM value.
    public func payload() throws(APNSPayloadError) -> [UInt8] {
        if let mdm {
            guard !hasAPSFields else {
                throw APNSPayloadError(
                    .mdmWithAPS,
                    "an MDM notification is exactly {\"mdm\":\"…\"}; clear the aps fields (alert, badge, sound, flags, …) or clear mdm"
                )
            }
            guard custom.isEmpty else {
                throw APNSPayloadError(
                    .mdmWithAPS,
                    "an MDM notification is exactly {\"mdm\":\"…\"}; remove the custom keys \(custom.keys.sorted().joined(separator: ", ").abbreviated(toBytes: 256))"
                )
            }
            guard !mdm.isEmpty else {
                throw APNSPayloadError(
                    .invalidValue,
                    "the MDM PushMagic value is empty; set mdm to the device's PushMagic string"
                )
            }
            var top = ObjectWriter(capacity: 16 + mdm.utf8.count)
            top.add("mdm", .string(mdm))
            return top.finish()
        }

        guard custom["aps"] == nil else {
            throw APNSPayloadError(
                .invalidValue,
                "custom key \"aps\" would replace the aps dictionary; put Apple keys in additionalAPSFields and rename the custom key"
            )
        }
        if let badge, badge < 0 {
            throw APNSPayloadError(.invalidValue, "badge is \(badge); use 0 to remove the badge or a positive number")
        }
        if let relevanceScore, !relevanceScore.isFinite {
            throw APNSPayloadError(
                .invalidValue,
                "relevance score is \(relevanceScore); use a finite number, normally 0 to 1"
            )
        }

        // One buffer: `{"aps":{` …aps members… `}` …custom members… `}`.
        var out = ObjectWriter(capacity: 96 + (alertBody?.utf8.count ?? 0))
        out.open("aps")
        // Each named aps key is written at most once: only additional fields can repeat one.
        switch alert {
        case .text(let text):
            out.add("alert", .string(text))
        case .fields(let fields):
            out.open("alert")
            for (key, value) in fields.members { out.add(key, value) }
            out.close()
        case .liveActivity(let fields):
            // §5.1: the sound is a member of the alert, where ActivityKit plays it.
            out.open("alert")
            out.add("title", fields.title.json)
            out.add("body", fields.body.json)
            if let sound = fields.sound { out.add("sound", .string(sound)) }
            out.close()
        case nil:
            break
        }
        if let badge { out.add("badge", .int(Int64(badge))) }
        switch sound {
        case .named(let name):
            out.add("sound", .string(name))
        case .critical(let name, let volume):
            guard (0.0...1.0).contains(volume) else {
                throw APNSPayloadError(.invalidValue, "critical sound volume is \(volume); use a value from 0.0 to 1.0")
            }
            out.open("sound")
            out.add("critical", .int(1))
            out.add("name", .string(name))
            out.add("volume", .double(volume))
            out.close()
        case nil:
            break
        }
        if contentAvailable { out.add("content-available", .int(1)) }  // §5 check 6
        if mutableContent { out.add("mutable-content", .int(1)) }
        if let category { out.add("category", .string(category)) }
        if let threadId { out.add("thread-id", .string(threadId)) }
        if let targetContentId { out.add("target-content-id", .string(targetContentId)) }
        if let interruptionLevel { out.add("interruption-level", .string(interruptionLevel)) }
        if let relevanceScore { out.add("relevance-score", .double(relevanceScore)) }
        if let urlArgs { out.add("url-args", .array(urlArgs.map(JSONValue.string))) }
        if !additionalAPSFields.isEmpty {
            for key in additionalAPSFields.keys.sorted() {
                guard !writesAPSKey(key) else {
                    throw APNSPayloadError(
                        .invalidValue,
                        "additionalAPSFields key \"\(key.abbreviated())\" repeats an aps key that is already set; set it through its own property instead"
                    )
                }
                out.add(key, additionalAPSFields[key]!)
            }
        }
        out.close()

        // "aps" and the custom keys (one dictionary's keys, "aps" refused above) cannot repeat.
        if !custom.isEmpty {
            for key in custom.keys.sorted() { out.add(key, custom[key]!) }
        }
        return out.finish()
    }

    /// Whether ``payload()`` writes `key` inside `aps` from one of the named properties.
    private func writesAPSKey(_ key: String) -> Bool {
        switch key {
        case "alert": alert != nil
        case "badge": badge != nil
        case "sound": sound != nil
        case "content-available": contentAvailable
        case "mutable-content": mutableContent
        case "category": category != nil
        case "thread-id": threadId != nil
        case "target-content-id": targetContentId != nil
        case "interruption-level": interruptionLevel != nil
        case "relevance-score": relevanceScore != nil
        case "url-args": urlArgs != nil
        default: false
        }
    }

    /// A payload with no `aps` field and no custom key: `{"aps":{}}`.
    private static let emptyPayload = Array(#"{"aps":{}}"#.utf8)

    /// ``payload()`` plus the checks that apply before sending (§1.2, §1.3, §5):
    /// - `emptyPayload`: no `aps` fields and no custom keys (§5 check 1);
    /// - `invalidPriority`: priority 1 unless `allowLowPriority` (1 exists only on HTTP/2; the
    ///   binary API knows 10 and 5, §1.2 item 5);
    /// - `contentAvailableWithImmediatePriority`: priority 10 with `content-available` but no
    ///   alert, sound or badge (§1.2 item 5, §5 check 4);
    /// - `invalidValue`: an interruption level Apple does not document (§5);
    /// - `tooLarge`: more than `limit` bytes (§1.3; ``binaryPayloadLimit`` for the binary API).
    public func validatedPayload(limit: Int, allowLowPriority: Bool = false) throws(APNSPayloadError) -> [UInt8] {
        let bytes = try payload()
        if mdm == nil && bytes == Self.emptyPayload {
            throw APNSPayloadError(
                .emptyPayload,
                "the payload is empty; set an alert, badge, sound, content-available or custom data"
            )
        }
        if priority == .low && !allowLowPriority {
            throw APNSPayloadError(
                .invalidPriority,
                "priority 1 is available only on the HTTP/2 API; use 5 (power-considerate) or 10 (immediate)"
            )
        }
        if priority == .immediate && contentAvailable && alert == nil && sound == nil && badge == nil {
            throw APNSPayloadError(
                .contentAvailableWithImmediatePriority,
                "priority 10 needs an alert, sound or badge; send this content-available-only notification with priority 5"
            )
        }
        if let interruptionLevel, !Self.interruptionLevels.contains(interruptionLevel) {
            throw APNSPayloadError(
                .invalidValue,
                "interruption level \"\(interruptionLevel.abbreviated())\" is not valid; use passive, active, time-sensitive or critical"
            )
        }
        if bytes.count > limit {
            throw APNSPayloadError(
                .tooLarge,
                "payload is \(bytes.count) bytes, over the \(limit)-byte limit; shorten the alert or set truncation"
            )
        }
        return bytes
    }

    /// Shortens the alert body (the string alert, or `alert.body`) so that ``payload()`` is at
    /// most `limit` bytes, and returns how many payload bytes were removed (0 if it already fit).
    ///
    /// The cut falls on a `Character` boundary, so it never splits a UTF-8 sequence, a grapheme
    /// cluster (emoji ZWJ sequences, flags, `\r\n`) or a JSON escape. The escaped size of the
    /// body is measured in one pass over at most `limit` bytes' worth of characters, so long
    /// bodies cost no more than short ones. With ``truncateAtWordEnd`` the cut moves back to
    /// the last whitespace before it and trailing whitespace is dropped; when that would leave
    /// nothing, the cut stays mid-word. No ellipsis is added.
    ///
    /// Throws `cannotTrim` when there is no body, or when the payload is too large even with an
    /// empty body; errors from ``payload()`` are passed on.
    @discardableResult
    public mutating func trim(toFit limit: Int) throws(APNSPayloadError) -> Int {
        let original = try payload()
        if original.count <= limit { return 0 }
        guard let body = alertBody else {
            throw APNSPayloadError(
                .cannotTrim,
                "payload is \(original.count) bytes, over the \(limit)-byte limit, and has no alert body to shorten; remove other fields or custom data"
            )
        }
        var probe = self
        probe.alertBody = ""
        let fixedSize = try probe.payload().count
        guard fixedSize <= limit else {
            throw APNSPayloadError(
                .cannotTrim,
                "payload is \(fixedSize) bytes even with an empty alert body, over the \(limit)-byte limit; remove other fields or custom data"
            )
        }

        // Longest prefix of whole characters whose escaped form fits the remaining budget.
        let budget = limit - fixedSize
        var used = 0
        var cut = body.startIndex
        while cut < body.endIndex {
            let next = body.index(after: cut)
            var size = 0
            for byte in body.utf8[cut..<next] { size += JSONValue.escapedLength(of: byte) }
            if used + size > budget { break }
            used += size
            cut = next
        }

        var kept = body[..<cut]
        if truncateAtWordEnd && cut < body.endIndex && !body[cut].isWhitespace {
            if let space = kept.lastIndex(where: \.isWhitespace) {
                var wordEnd = kept[..<space]
                while let last = wordEnd.last, last.isWhitespace { wordEnd = wordEnd.dropLast() }
                if !wordEnd.isEmpty { kept = wordEnd }
            }
        } else if truncateAtWordEnd {
            while let last = kept.last, last.isWhitespace { kept = kept.dropLast() }
        }

        alertBody = String(kept)
        let trimmed = try payload()
        assert(trimmed.count <= limit)
        return original.count - trimmed.count
    }
}

/// Writes a JSON object member by member into one buffer, keeping insertion order (`aps` keys
/// follow the documented order rather than sorted order); nested objects are written in place.
private struct ObjectWriter {
    private var bytes: [UInt8]
    /// One bit per open object: whether it has a member yet (for the commas).
    private var hasMembers: UInt64 = 0
    private var depth = 0

    init(capacity: Int) {
        bytes = []
        bytes.reserveCapacity(capacity)
        bytes.append(UInt8(ascii: "{"))
        depth = 1
    }

    /// Appends `key: value`.
    mutating func add(_ key: String, _ value: JSONValue) {
        member(key)
        value.write(into: &bytes)
    }

    /// Opens an object as the value of `key`; ``close()`` ends it.
    mutating func open(_ key: String) {
        member(key)
        bytes.append(UInt8(ascii: "{"))
        depth += 1
        hasMembers &= ~(1 << UInt64(depth))
    }

    mutating func close() {
        bytes.append(UInt8(ascii: "}"))
        depth -= 1
    }

    private mutating func member(_ key: String) {
        let bit: UInt64 = 1 << UInt64(depth)
        if hasMembers & bit != 0 { bytes.append(UInt8(ascii: ",")) }
        hasMembers |= bit
        JSONValue.writeString(key, into: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// Closes the object and returns its bytes. `mutating`, not `consuming`: appending to the
    /// array of a consumed writer copied the whole buffer (it was not seen as uniquely held).
    mutating func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }
}
