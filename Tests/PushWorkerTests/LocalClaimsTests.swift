import PushKafka
import PushTestSupport
import Testing

@testable import PushWorker

@Suite struct LocalClaimsTests {
    /// A result id as the worker makes them: 32 lower-case hex digits.
    static func id(_ n: UInt64, salt: UInt64 = 0) -> String {
        var generator = SeededGenerator(seed: n &* 31 &+ salt)
        return (0..<32).map { _ in String(Int(generator.next() % 16), radix: 16) }.joined()
    }

    static func ref(_ offset: Int64) -> MessageRef {
        MessageRef(partition: TopicPartition(topic: "apn.requests", partition: Int32(offset % 12)), offset: offset)
    }

    @Test(
        "The key table agrees with a dictionary through random inserts, replacements and removals, growing from 16 slots"
    )
    func keyTableAgreesWithADictionary() throws {
        var table = LocalClaims.KeyTable()
        var model: [String: MessageRef] = [:]
        var generator = SeededGenerator(seed: 7)
        // Few distinct ids, so that many operations hit ids already held: replacements, removals
        // of held ids, and probe runs that wrap around the slots' end.
        let ids = (0..<600).map { Self.id($0) }
        for step in 0..<20_000 {
            let id = ids[Int(generator.next() % UInt64(step < 10_000 ? 150 : ids.count))]
            let key = try #require(LocalClaims.Key(id))
            if generator.next() % 3 == 0 {
                table[key] = nil
                model[id] = nil
            } else {
                let ref = Self.ref(Int64(step))
                table[key] = ref
                model[id] = ref
            }
            #expect(table.count == model.count)
            if step % 500 == 0 {
                for other in ids { #expect(table[LocalClaims.Key(other)!] == model[other], "step \(step): \(other)") }
            }
        }
        for other in ids { #expect(table[LocalClaims.Key(other)!] == model[other]) }
        // Emptied one by one, each removal keeps the rest findable.
        for (id, ref) in model {
            #expect(table[LocalClaims.Key(id)!] == ref)
            table[LocalClaims.Key(id)!] = nil
            #expect(table[LocalClaims.Key(id)!] == nil)
        }
        #expect(table.count == 0)
    }

    @Test("Keys whose probes start at the same slot are all found, and removing the first keeps the others")
    func collidingKeysStayFindable() throws {
        var table = LocalClaims.KeyTable()
        // Ids that differ only after their first 16 bytes hash alike: one probe run.
        let prefix = String(repeating: "a", count: 16)
        let ids = (0..<10).map { prefix + String(repeating: String($0), count: 16) }
        for (n, id) in ids.enumerated() { table[try #require(LocalClaims.Key(id))] = Self.ref(Int64(n)) }
        #expect(table.count == 10)
        table[LocalClaims.Key(ids[0])!] = nil
        table[LocalClaims.Key(ids[4])!] = nil
        for (n, id) in ids.enumerated() {
            #expect(table[LocalClaims.Key(id)!] == ([0, 4].contains(n) ? nil : Self.ref(Int64(n))), "\(id)")
        }
        #expect(table.count == 8)
    }
}
