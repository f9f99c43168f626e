import PushRedis
import PushTestSupport
import Testing

@Suite("SHA-1 of script sources", .timeLimit(.minutes(2)))
struct SHA1Tests {
    @Test(
        "Known vectors (FIPS 180 and common test strings)",
        arguments: [
            ("", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
            ("abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
            ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "84983e441c3bd26ebaae4aa1f95129e5e54670f1"),
            ("The quick brown fox jumps over the lazy dog", "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"),
            ("return 1", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"),
        ]
    )
    func vectors(input: String, expected: String) {
        #expect(RedisScript(input).sha1 == expected)
    }

    @Test("Padding boundaries: 55, 56, 63, 64, 65 and 119 bytes")
    func boundaries() {
        // Computed with Python's hashlib.sha1 over repeated "a".
        let expected: [Int: String] = [
            55: "c1c8bbdc22796e28c0e15163d20899b65621d65a",
            56: "c2db330f6083854c99d4b5bfb6e8f29f201be699",
            63: "03f09f5b158a7a8cdad920bddc29b81c18a551f5",
            64: "0098ba824b5c16427bd7a1122a5a442a25ec644d",
            65: "11655326c708d70319be2610e8a57d9a5b959d3b",
            119: "ee971065aaa017e0632a8ca6c77bb3bf8b1dfc56",
        ]
        for (length, sha) in expected {
            #expect(RedisScript(String(repeating: "a", count: length)).sha1 == sha, "length \(length)")
        }
    }

    @Test("One million 'a'")
    func million() {
        #expect(
            RedisScript(String(repeating: "a", count: 1_000_000)).sha1 == "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
        )
    }
}
