import APNSCore
import Foundation
import PushTestSupport
import PushWorkerFuzzing
import Testing

@testable import PushWorker

/// The job parser and payload builder on bad, oversized and random input: seeded, so that a
/// failure names an input that can be replayed. `scripts/fuzz` runs the same invariants under
/// libFuzzer, starting from the corpus in `Tests/Corpus/jobs`.
@Suite struct HostileInputTests {
    static let corpus = Paths.root + "/Tests/Corpus/jobs"

    /// How many messages of each kind the corpus holds (the large kinds once or a few times).
    static let corpusCounts: [HostileJobs.Kind: Int] = [
        .wrongType: 32, .deepNesting: 1, .bigAlert: 2, .tooManyTokens: 1, .hugeStrings: 3, .oneMiB: 1, .overLimit: 1,
    ]

    static func corpusFiles() -> [(name: String, kind: HostileJobs.Kind, index: Int)] {
        HostileJobs.Kind.allCases.flatMap { kind in
            (0..<(corpusCounts[kind] ?? 8)).map { ("\(kind.rawValue)-\($0)", kind, $0) }
        }
    }

    /// The job parser reads a message's top level as a list of members; on every corpus message
    /// that list agrees with the generic parser's dictionary, or both refuse it with one error.
    @Test func topLevelMembersAgreeWithTheGenericParserOnTheCorpus() throws {
        for file in Self.corpusFiles() {
            let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: "\(Self.corpus)/\(file.name)")))
            let whole = Result { () throws(JSONParseError) -> JSONValue in try JSONValue.parse(bytes) }
            let members = Result { () throws(JSONParseError) -> [(key: String, value: JSONValue)]? in
                try JSONValue.parseObjectMembers(bytes)
            }
            switch (whole, members) {
            case (.success(.object(let dictionary)), .success(let list?)):
                #expect(
                    Dictionary(list, uniquingKeysWith: { a, _ in a }) == dictionary && list.count == dictionary.count,
                    "\(file.name)"
                )
            case (.success(let value), .success(nil)):
                if case .object = value { Issue.record("\(file.name): an object gave nil") }
            case (.failure(let a), .failure(let b)):
                #expect(a == b, "\(file.name)")
            default:
                Issue.record("\(file.name): the parsers disagree")
            }
        }
    }

    @Test("The corpus in Tests/Corpus/jobs is the generator's output (APN_WORKER_WRITE_CORPUS=1 rewrites it)")
    func corpusMatchesTheGenerator() throws {
        let write = ProcessInfo.processInfo.environment["APN_WORKER_WRITE_CORPUS"] != nil
        if write { try FileManager.default.createDirectory(atPath: Self.corpus, withIntermediateDirectories: true) }
        for file in Self.corpusFiles() {
            let bytes = HostileJobs.make(file.kind, index: file.index)
            let path = "\(Self.corpus)/\(file.name)"
            if write { _ = FileManager.default.createFile(atPath: path, contents: Data(bytes)) }
            let stored = FileManager.default.contents(atPath: path).map(Array.init)
            #expect(stored == bytes, "\(path) differs from HostileJobs.make(.\(file.kind), index: \(file.index))")
        }
    }

    @Test("Every message of the corpus meets the invariants and gets the outcome its kind calls for")
    func corpusOutcomes() throws {
        let parser = JobParser()
        for file in Self.corpusFiles() {
            let bytes = try #require(
                FileManager.default.contents(atPath: "\(Self.corpus)/\(file.name)").map(Array.init)
            )
            let problems = JobInvariants.violations(ofInput: bytes)
            #expect(problems.isEmpty, "\(file.name): \(problems)")
            let outcome = parser.parse(bytes)
            switch file.kind {
            case .valid, .bigAlert:
                guard case .job(let job) = outcome, job.payloadError == nil else {
                    Issue.record("\(file.name): \(outcome)")
                    continue
                }
                if file.kind == .bigAlert {
                    #expect(job.payload.count <= parser.payloadLimit && job.payload.count > parser.payloadLimit - 32)
                }
            case .flippedBytes:
                break  // A flipped byte may land where it changes nothing.
            case .nonHexToken:
                guard case .job(let job) = outcome, case .malformed = job.tokens[0] else {
                    Issue.record("\(file.name): \(outcome)")
                    continue
                }
            case .oneMiB:
                guard case .job(let job) = outcome, job.payloadError != nil else {
                    Issue.record("\(file.name): \(outcome)")
                    continue
                }
            case .tooManyTokens:
                guard case .unreadable(let jobId, _, let reason, _) = outcome else {
                    Issue.record("\(file.name): \(outcome)")
                    continue
                }
                #expect(jobId == HostileJobs.jobId(.tooManyTokens, file.index))
                #expect(reason.contains("10001 entries, over the limit of 10000"))
            case .deepNesting:
                guard case .unreadable(_, _, let reason, _) = outcome else {
                    Issue.record("\(file.name): \(outcome)")
                    continue
                }
                #expect(reason.contains("nested more than 64 levels deep"))
            case .overLimit:
                guard case .unreadable(_, _, let reason, _) = outcome else {
                    Issue.record("\(file.name): \(outcome)")
                    continue
                }
                #expect(reason.contains("over the 1048576-byte limit"))
            default:
                if case .job(let job) = outcome, job.payloadError == nil,
                    job.tokens.contains(where: { if case .valid = $0 { true } else { false } }),
                    file.kind != .hugeStrings
                {
                    Issue.record("\(file.name) was accepted: \(job)")
                }
            }
        }
    }

    @Test("Thousands of seeded mutations of valid jobs meet the invariants")
    func seededMutations() {
        var rng = SeededGenerator(seed: 16)
        let alphabet =
            Array(#"{}[]":,\ 0123456789-+.eEtrufalsn"#.utf8) + [
                0x00, 0x1F, 0x7F, 0x80, 0xBF, 0xC3, 0xE2, 0xED, 0xF0, 0xF4, 0xFF,
            ]
        var checked = 0
        for index in 0..<3000 {
            var bytes = HostileJobs.valid(index: index, alert: index % 3 == 0 ? "Grüße 👍🏽 \\n tab\\t" : nil)
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                let at = Int.random(in: 0...bytes.count, using: &rng)
                let byte =
                    Bool.random(using: &rng)
                    ? alphabet.randomElement(using: &rng)! : UInt8.random(in: 0...255, using: &rng)
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: bytes.insert(byte, at: at)
                case 1: if at < bytes.count { bytes[at] = byte }
                case 2: if at < bytes.count { bytes.remove(at: at) }
                default:  // Repeat a slice: duplicate keys, deeper nesting, longer strings.
                    let end = min(bytes.count, at + Int.random(in: 1...40, using: &rng))
                    bytes.insert(contentsOf: bytes[at..<end], at: at)
                }
            }
            let problems = JobInvariants.violations(ofInput: bytes)
            #expect(
                problems.isEmpty,
                "input \(index) (\(String(decoding: bytes.prefix(200), as: UTF8.self))): \(problems)"
            )
            checked += 1
        }
        #expect(checked == 3000)
    }

    @Test("Seeded alert bodies of every script are trimmed to the limit, as late as possible, never inside a character")
    func seededTrimming() {
        var rng = SeededGenerator(seed: 1616)
        let pieces = [
            "a", "word ", " ", "\t", "\n", "\"", "\\", "\u{1}", "é", "e\u{301}", "日本", "👍🏽", "👨‍👩‍👧", "🇩🇪", "\r\n",
            "\u{2028}", "   ",
            "x\u{300}\u{301}\u{302}",
        ]
        for round in 0..<400 {
            var body = ""
            let parts = Int.random(in: 0...(round % 10 == 0 ? 3000 : 300), using: &rng)
            for _ in 0..<parts { body += pieces.randomElement(using: &rng)! }
            let limit = Int.random(in: 20...2100, using: &rng)
            let title: String? = Bool.random(using: &rng) ? "Title" : nil
            let problems = JobInvariants.violations(
                trimming: body,
                title: title,
                limit: limit,
                atWordEnd: Bool.random(using: &rng)
            )
            #expect(problems.isEmpty, "round \(round), limit \(limit): \(problems)")
        }
        // One character of a million combining marks: nothing of it fits, and the cut is clean.
        let oneCharacter = "x" + String(repeating: "\u{301}", count: 500_000)
        #expect(JobInvariants.violations(trimming: oneCharacter, title: nil, limit: 2048, atWordEnd: false).isEmpty)
    }

    @Test("A result made from a job's text stays small, however long the text")
    func resultsAreBounded() throws {
        let long = String(repeating: "z", count: 600_000)
        let result = WorkerResult(
            kind: .transmissionError,
            resultId: "r",
            jobId: String(repeating: "j", count: 256),
            app: long,
            environment: long,
            token: long,
            status: .invalidJob,
            reason: "app \"\(long)\" is not configured",
            attempts: 0,
            possibleDuplicate: false,
            worker: "w1",
            at: 1
        )
        let value = result.serialized()
        #expect(value.count < 3000)
        #expect(try #require(result.key).count <= WorkerResult.maxEchoBytes + 20)
        let parsed = try JSONValue.parse(value)
        #expect(parsed["token"]?.stringValue == String(repeating: "z", count: 256) + "… (600000 bytes)")
        #expect(parsed["reason"]?.stringValue?.hasSuffix("bytes)") == true)
        // Text within the limits is kept as it is.
        let token = String(repeating: "ab", count: 100)
        let plain = WorkerResult(
            kind: .transmissionError,
            resultId: "r",
            jobId: "j",
            app: "a",
            token: token,
            status: .malformedToken,
            reason: "r",
            attempts: 0,
            possibleDuplicate: false,
            worker: "w1",
            at: 1
        )
        #expect(try JSONValue.parse(plain.serialized())["token"]?.stringValue == token)
    }

    @Test("A job over the token limit is one invalidJob naming the count, before any token is decoded")
    func tooManyTokensIsOneUnreadableMessage() {
        // Not one of these tokens is hex: decoding them would have named a token, not the count.
        let tokens = (0...10_000).map { "\"not-hex-\($0)\"" }.joined(separator: ",")
        let outcome = JobParser().parse(Array(#"{"id":"many","app":"a","tokens":[\#(tokens)],"alert":"x"}"#.utf8))
        guard case .unreadable(let jobId, let app, let reason, _) = outcome else {
            Issue.record("\(outcome)")
            return
        }
        #expect(jobId == "many" && app == "a")
        #expect(reason == "\"tokens\" has 10001 entries, over the limit of 10000 per job; split the job")
    }

    @Test("Nesting is limited to 64 levels: 64 is accepted, 65 is rejected with a sentence")
    func nestingLimit() throws {
        func job(depth: Int) -> [UInt8] {
            // `payload` itself is level 2 (the job is level 1).
            let inner = String(repeating: "[", count: depth - 2) + String(repeating: "]", count: depth - 2)
            return Array(
                #"{"id":"d","app":"a","token":"\#(HostileJobs.token(1))","alert":"x","payload":{"k":\#(inner)}}"#.utf8
            )
        }
        guard case .job = JobParser().parse(job(depth: 64)) else {
            Issue.record("64 levels were not accepted")
            return
        }
        guard case .unreadable(_, _, let reason, _) = JobParser().parse(job(depth: 65)) else {
            Issue.record("65 levels were accepted")
            return
        }
        #expect(reason.contains("arrays and objects are nested more than 64 levels deep"))
    }

    @Test("Names quoted in sentences are cut to 64 bytes with their length")
    func longNamesAreAbbreviatedInReasons() {
        let long = String(repeating: "k", count: 100_000)
        guard
            case .rejected(_, _, _, let reason, _, _) = JobParser().parse(
                Array(#"{"id":"u","app":"a","token":"\#(HostileJobs.token(1))","\#(long)":1}"#.utf8)
            )
        else {
            Issue.record("not rejected")
            return
        }
        #expect(reason.contains(String(repeating: "k", count: 64) + "… (100000 bytes)"))
        #expect(reason.utf8.count < 300)
        guard case .unreadable(_, _, let duplicate, _) = JobParser().parse(Array(#"{"\#(long)":1,"\#(long)":2}"#.utf8))
        else {
            Issue.record("not unreadable")
            return
        }
        #expect(duplicate.utf8.count < 300)
    }
}
