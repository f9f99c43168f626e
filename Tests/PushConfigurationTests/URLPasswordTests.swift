import APNSCore
import Foundation
import PushConfiguration
import Testing

/// Passwords in `redis.url` and `proxy` that hold `/`, `?`, `#` or `@`: read whole, and masked
/// whole in the sentence of a URL that is refused, whichever source gave it.
@Suite struct URLPasswordTests {
    typealias Files = AppSettingsTests.Files

    // MARK: URLs

    @Test("A Redis password with /, ?, # and @ is read whole, from the URL as it is written")
    func redisPasswordWithURLCharacters() throws {
        let files = try Files()
        let config = try SecretSettings.load(
            SecretSettings.yaml(files: files, redis: #"  url: "redis://app:Zq9/Secret?x#y@z@redis.internal:6380/2""#)
        )
        #expect(config.redis.username == "app")
        #expect(config.redis.password == "Zq9/Secret?x#y@z")
        #expect(config.redis.host == "redis.internal" && config.redis.port == 6380 && config.redis.database == 2)
        #expect(!"\(config)".contains("Secret"))
    }

    @Test(
        "A refused Redis URL is named with its password masked whole, from the file, a variable or a flag",
        arguments: [
            "redis://app:Zq9/Secret?x#y@redis.internal:notaport/0",
            "redis://app:Zq9/Secret?x#y@redis.internal:6379/0?db=1",
            "redis://:Zq9/Secret?x#y@",
            "ftp://app:Zq9/Secret?x#y@redis.internal",
            "app:Zq9/Secret?x#y@redis.internal:6379",
        ]
    )
    func refusedRedisURLHidesThePassword(url: String) throws {
        let files = try Files()
        let messages = [
            SecretSettings.error(SecretSettings.yaml(files: files, redis: "  url: \"\(url)\"")),
            SecretSettings.error(SecretSettings.yaml(files: files), environment: ["APN_WORKER_REDIS_URL": url]),
            SecretSettings.error(
                SecretSettings.yaml(files: files),
                overrides: ConfigurationOverrides([.redisURL: url])
            ),
        ]
        for message in messages {
            let sentence = try #require(message, "\(url) was accepted")
            #expect(!sentence.contains("Zq9") && !sentence.contains("Secret"), "\(sentence)")
            #expect(sentence.contains(":***@"), "\(sentence)")
        }
    }

    @Test("A proxy password with / is read whole; a refused proxy URL is named with it masked")
    func proxyPasswordWithURLCharacters() throws {
        let files = try Files()
        let config = try SecretSettings.load(
            SecretSettings.yaml(files: files, worker: #"  proxy: "http://alice:Pw/Secret7?#@proxy.internal:3128""#)
        )
        let proxy = try #require(config.apps["a"]?.environments[.production]?.proxy?.proxy)
        #expect(proxy == APNSProxy(host: "proxy.internal", port: 3128, username: "alice", password: "Pw/Secret7?#"))
        let refused = try #require(
            SecretSettings.error(
                SecretSettings.yaml(files: files, worker: #"  proxy: "http://alice:Pw/Secret7@proxy.internal:port""#)
            )
        )
        #expect(!refused.contains("Secret7"), "\(refused)")
        #expect(refused.contains(#""http://alice:***@proxy.internal:port""#), "\(refused)")
        let fromVariable = try #require(
            SecretSettings.error(
                SecretSettings.yaml(files: files),
                environment: ["HTTPS_PROXY": "https://bob:Pw/S3cret#x@proxy:1"]
            )
        )
        #expect(!fromVariable.contains("S3cret"), "\(fromVariable)")
    }
}
