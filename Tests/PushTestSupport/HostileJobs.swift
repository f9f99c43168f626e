/// Bad, oversized and hostile job messages for `apn.requests`, made from a seed so that a failure
/// can be replayed: the fuzz tests, the corpus in `Tests/Corpus/jobs` and the end-to-end test
/// all draw from it.
public enum HostileJobs {
    /// One kind of input. Every kind but ``valid`` and ``bigAlert`` is bad input that must be
    /// answered with an error result; ``bigAlert`` is valid and must be shortened to fit.
    public enum Kind: String, CaseIterable, Sendable {
        /// A valid job with one token and a short alert (the control group).
        case valid
        /// A valid job cut short at a random byte.
        case truncated
        /// A valid job with 1–4 bytes replaced by random ones.
        case flippedBytes
        /// A valid job with one field of the wrong JSON type.
        case wrongType
        /// A valid job with a top-level field the schema does not name.
        case unknownKey
        /// The same member name twice in one object.
        case duplicateKey
        /// Arrays nested 5,000 deep inside `payload`.
        case deepNesting
        /// A valid job whose alert is 200 KB (over any payload limit, so it is trimmed).
        case bigAlert
        /// 10,001 tokens, one over the limit.
        case tooManyTokens
        /// A byte sequence that is not UTF-8 inside a string.
        case invalidUTF8
        /// A UTF-8 byte order mark before the object.
        case byteOrderMark
        /// Bytes after the object.
        case trailingGarbage
        /// `NaN` (not JSON) as a number.
        case notANumber
        /// A token with letters that are not hex digits.
        case nonHexToken
        /// `{}`.
        case emptyObject
        /// Long strings echoed in results: a 600 KB non-hex token, app name or unknown key.
        case hugeStrings
        /// A valid job padded with custom data to exactly 1 MiB (its payload cannot fit).
        case oneMiB
        /// 1 MiB and one byte: over the message limit.
        case overLimit
    }

    /// The largest message a job may be (1 MiB).
    public static let messageLimit = 1 << 20

    /// The app ``make(_:index:seed:app:)`` writes into jobs unless told otherwise.
    public static let defaultApp = "com.example.app"

    /// The device token of valid job number `index`: 32 bytes, distinct per index and salt.
    public static func token(_ index: Int, salt: UInt64 = 0xF00D) -> String {
        hex(salt, digits: 16) + hex(UInt64(index), digits: 48)
    }

    /// The job id of job number `index` of `kind`.
    public static func jobId(_ kind: Kind, _ index: Int) -> String { "hostile-\(kind.rawValue)-\(index)" }

    /// A valid job: one token, a short alert.
    public static func valid(index: Int, app: String = defaultApp, alert: String? = nil) -> [UInt8] {
        Array(
            #"{"id":"\#(jobId(.valid, index))","app":"\#(app)","token":"\#(token(index))","alert":"\#(alert ?? "Hello \(index)")","badge":1}"#
                .utf8
        )
    }

    /// Message number `index` of `kind`. The same (kind, index, seed) always gives the same bytes.
    public static func make(_ kind: Kind, index: Int, seed: UInt64 = 1, app: String = defaultApp) -> [UInt8] {
        var rng = SeededGenerator(seed: seed &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(index) &+ UInt64(kind.hashSeed))
        let id = jobId(kind, index)
        let token = token(index)
        func text(_ s: String) -> [UInt8] { Array(s.utf8) }
        switch kind {
        case .valid:
            return valid(index: index, app: app)
        case .truncated:
            let job = valid(index: index, app: app)
            return Array(job.prefix(Int.random(in: 0..<job.count, using: &rng)))
        case .flippedBytes:
            var job = valid(index: index, app: app)
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                job[Int.random(in: 0..<job.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            }
            return job
        case .wrongType:
            let fields: [(String, String)] = [
                ("id", "17"), ("app", "[\"\(app)\"]"), ("token", "{\"hex\":\"\(token)\"}"), ("alert", "5"),
                ("badge", "\"1\""), ("badge", "-3"), ("sound", "2"), ("contentAvailable", "\"yes\""),
                ("mutableContent", "1"), ("category", "false"), ("threadId", "[]"), ("urlArgs", "\"a\""),
                ("mdm", "7"), ("payload", "[1,2]"), ("expiry", "true"), ("expiry", "\"soon\""), ("priority", "\"10\""),
                ("priority", "7"), ("env", "3"), ("env", "\"staging\""), ("registeredAt", "\"yesterday\""),
                ("retryLimit", "-1"), ("pushType", "9"), ("collapseId", "{}"), ("truncateAtWordEnd", "\"no\""),
                ("aps", "\"alert\""), ("aps", "{\"badge\":\"x\"}"), ("aps", "{\"alert\":[1]}"),
                ("tokens", "\"\(token)\""),
                ("alert", "{\"title\":1}"), ("alert", "{\"colour\":\"red\"}"),
                ("sound", "{\"name\":\"a\",\"volume\":3}"),
            ]
            let (name, value) = fields[index % fields.count]
            var members = [("id", "\"\(id)\""), ("app", "\"\(app)\""), ("alert", "\"Hello\"")]
            members.append(name == "tokens" ? ("tokens", value) : ("token", "\"\(token)\""))
            if let at = members.firstIndex(where: { $0.0 == name }) {
                members[at].1 = value
            } else {
                members.append((name, value))
            }
            return text("{" + members.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}")
        case .unknownKey:
            return text(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Hi","colour":"red"}"#)
        case .duplicateKey:
            return index % 2 == 0
                ? text(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"a","alert":"b"}"#)
                : text(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","payload":{"k":1,"k":2},"alert":"a"}"#)
        case .deepNesting:
            let depth = 5000
            return text(
                #"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Hi","payload":{"deep":"#
                    + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}}"
            )
        case .bigAlert:
            // Words of mixed scripts, so the cut lands among multi-byte characters and spaces.
            let words = ["push", "notification", "größe", "übermäßig", "日本語", "emoji👍🏽", "flag🇩🇪", "tab\\t"]
            var alert = ""
            while alert.utf8.count < 200_000 { alert += words[Int.random(in: 0..<words.count, using: &rng)] + " " }
            return text(
                #"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":{"title":"Big","body":"\#(alert)"},"truncateAtWordEnd":\#(index % 2 == 0)}"#
            )
        case .tooManyTokens:
            let tokens = (0...10_000).map { "\"" + Self.token($0, salt: UInt64(index)) + "\"" }.joined(separator: ",")
            return text(#"{"id":"\#(id)","app":"\#(app)","tokens":[\#(tokens)],"alert":"Hi"}"#)
        case .invalidUTF8:
            let bad: [[UInt8]] = [
                [0xFF], [0xC3, 0x28], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0x80],
            ]
            return text(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"bad "#)
                + bad[index % bad.count] + text(#" byte"}"#)
        case .byteOrderMark:
            return [0xEF, 0xBB, 0xBF] + valid(index: index, app: app)
        case .trailingGarbage:
            return valid(index: index, app: app) + text(["x", "}", " {}", ",", "\u{0}", "]"][index % 6])
        case .notANumber:
            return text(
                #"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Hi","badge":\#(["NaN", "Infinity", "-Infinity", "1e999"][index % 4])}"#
            )
        case .nonHexToken:
            return text(
                #"{"id":"\#(id)","app":"\#(app)","token":"\#(["zz" + token.dropFirst(2), "abc", "", "0x" + token][index % 4])","alert":"Hi"}"#
            )
        case .emptyObject:
            return text("{}")
        case .hugeStrings:
            let long = String(repeating: "z", count: 600_000)
            switch index % 3 {
            case 0: return text(#"{"id":"\#(id)","app":"\#(app)","token":"\#(long)","alert":"Hi"}"#)
            case 1: return text(#"{"id":"\#(id)","app":"\#(long)","token":"\#(token)","alert":"Hi"}"#)
            default: return text(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Hi","\#(long)":1}"#)
            }
        case .oneMiB, .overLimit:
            let head = text(#"{"id":"\#(id)","app":"\#(app)","token":"\#(token)","alert":"Hi","payload":{"pad":""#)
            let tail = text(#""}}"#)
            let size = kind == .oneMiB ? messageLimit : messageLimit + 1
            return head + [UInt8](repeating: UInt8(ascii: "p"), count: size - head.count - tail.count) + tail
        }
    }

    /// `count` messages cycling through `kinds` (kind i % kinds.count), each with its kind.
    public static func mixed(
        count: Int,
        kinds: [Kind] = Kind.allCases,
        seed: UInt64 = 1,
        app: String = defaultApp
    )
        -> [(kind: Kind, index: Int, bytes: [UInt8])]
    {
        (0..<count).map { i in
            let kind = kinds[i % kinds.count]
            return (kind, i, make(kind, index: i, seed: seed, app: app))
        }
    }

    private static func hex(_ value: UInt64, digits: Int) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}

extension HostileJobs.Kind {
    /// A stable per-kind number (Swift's hash values change from run to run).
    fileprivate var hashSeed: Int { Self.allCases.firstIndex(of: self)! &* 7919 }
}

/// SplitMix64: a small, fast, seedable generator, so that generated input can be replayed.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
