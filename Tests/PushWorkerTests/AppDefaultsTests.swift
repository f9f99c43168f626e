import APNSCore
import PushWorker
import Testing

/// What the parser takes from an app's configuration: the expiry of jobs that give none.
@Suite struct AppDefaultsTests {
    static let token = String(repeating: "ab", count: 32)

    func expiry(_ fields: String, app: String = "a") -> APNSExpiry? {
        var parser = JobParser()
        parser.defaultExpiry = ["a": .after(.seconds(86_400))]
        guard
            case .job(let job) = parser.parse(
                Array(#"{"id":"j","app":"\#(app)","token":"\#(Self.token)","alert":"x"\#(fields)}"#.utf8)
            )
        else { return nil }
        return job.notification.expiry
    }

    @Test func aJobWithoutStaleAfterGetsItsAppsDefaultAndItsOwnWins() {
        func staleAfter(_ fields: String, app: String = "a") -> Duration? {
            var parser = JobParser()
            parser.defaultStaleAfter = ["a": .seconds(600)]
            let job = #"{"id":"j","app":"\#(app)","token":"\#(Self.token)","alert":"x"\#(fields)}"#
            guard case .job(let parsed) = parser.parse(Array(job.utf8)) else { return nil }
            return parsed.staleAfter
        }
        #expect(staleAfter("") == .seconds(600))
        #expect(staleAfter(#","staleAfter":"1m""#) == .seconds(60))
        #expect(staleAfter("", app: "b") == nil, "an app without a default sends however late")
    }

    @Test func aJobWithoutExpiryGetsItsAppsDefaultAndItsOwnExpiryWins() {
        #expect(expiry("") == .after(.seconds(86_400)))
        #expect(expiry(#","expiry":0"#) == .immediately)
        #expect(expiry(#","expiry":"30m""#) == .after(.seconds(1_800)))
        #expect(expiry("", app: "b") == .immediately, "an app without a default keeps 0")
    }
}
