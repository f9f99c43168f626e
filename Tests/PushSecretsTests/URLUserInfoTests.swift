import PushSecrets
import Testing

/// The masking of a URL's password (``URLUserInfo/redacted(_:)``) and the reading it rests on:
/// the user information ends at the last `@`, whatever the password holds.
@Suite struct URLUserInfoTests {
    @Test(
        "A password with /, ?, #, : or @ is masked whole, up to the last @; the user and what follows stay",
        arguments: [
            ("redis://app:Zq9/Secret?x#y@redis.internal:6379/0", "redis://app:***@redis.internal:6379/0", "Zq9"),
            ("http://alice:Pw/Secret7@proxy.internal:3128", "http://alice:***@proxy.internal:3128", "Pw/Secret7"),
            ("rediss://:p@ss:w#rd@[::1]:6380", "rediss://:***@[::1]:6380", "p@ss"),
            ("http://bob:a?b/c@d@proxy:1", "http://bob:***@proxy:1", "a?b/c@d"),
            ("redis://u:%2Fenc%40ded@h", "redis://u:***@h", "enc"),
            ("alice:Pw/Secret7@proxy:3128", "alice:***@proxy:3128", "Secret7"),
            ("user:pa://ss@host:1", "user:***@host:1", "pa://ss"),
        ]
    )
    func passwordsAreMaskedWhole(url: String, redacted: String, secret: String) {
        #expect(URLUserInfo.redacted(url) == redacted)
        #expect(!URLUserInfo.redacted(url).contains(secret))
    }

    @Test("User information without a colon is masked whole: it may be a password written without its colon")
    func credentialsWithoutAColon() {
        #expect(URLUserInfo.redacted("redis://Zq9/Secret@h:1") == "redis://:***@h:1")
        #expect(URLUserInfo.redacted("http://s3cret@proxy") == "http://:***@proxy")
    }

    @Test("A URL without an @ is shown as it is")
    func withoutCredentials() {
        for url in ["redis://h:6379/2", "http://proxy:3128/", "127.0.0.1:6379", "", "redis://h/a?b#c"] {
            #expect(URLUserInfo.redacted(url) == url)
        }
    }

    @Test("A scheme is letters, digits, + - and . before ://, starting with a letter")
    func schemes() {
        func scheme(_ url: String) -> String? {
            let text = Substring(url)
            return URLUserInfo.schemeEnd(of: text).map { String(text[..<$0]) }
        }
        #expect(scheme("redis://h") == "redis://")
        #expect(scheme("svn+ssh.x-y://h") == "svn+ssh.x-y://")
        #expect(scheme("user:pa://ss@h") == nil)
        #expect(scheme("1http://h") == nil)
        #expect(scheme("://h") == nil)
        #expect(scheme("h:6379") == nil)
    }

    @Test("split and credentials read user information up to the last @, the password after the first :")
    func reading() {
        let (userInfo, remainder) = URLUserInfo.split("app:Zq9/Secret?x#y@host:1/0")
        #expect(userInfo == "app:Zq9/Secret?x#y")
        #expect(remainder == "host:1/0")
        let (user, password) = URLUserInfo.credentials("app:Zq9:/@x")
        #expect(user == "app" && password == "Zq9:/@x")
        #expect(URLUserInfo.credentials("app").password == nil)
        #expect(URLUserInfo.split("host:1/a").userInfo == nil)
    }
}
