import Foundation
import Testing

@testable import APNSHTTP2Core

@Suite struct APNSIDGeneratorTests {
    @Test func idsAreCanonicalVersion4UUIDsWithoutRepeats() throws {
        let generator = APNSIDGenerator()
        var seen = Set<String>()
        for _ in 0..<100_000 {
            let id = generator.next()
            #expect(id.utf8.count == 36)
            let parsed = try #require(UUID(uuidString: id), "\(id) is not a UUID")
            #expect(parsed.uuidString.lowercased() == id)
            let bytes = withUnsafeBytes(of: parsed.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4, "version nibble of \(id)")
            #expect(bytes[8] >> 6 == 0b10, "variant bits of \(id)")
            #expect(seen.insert(id).inserted, "\(id) repeated")
        }
    }

    @Test func theCounterWrapsInsideTheLowBitsWithoutTouchingTheVariant() {
        let generator = APNSIDGenerator(high: 0x0123_4567_89AB_CDEF, low: 0x3FFF_FFFF_FFFF_FFFF)
        #expect(generator.next() == "01234567-89ab-4def-bfff-ffffffffffff")
        #expect(generator.next() == "01234567-89ab-4def-8000-000000000000")
    }

    @Test func generatorsStartFromDifferentRandomBases() {
        #expect(APNSIDGenerator().next() != APNSIDGenerator().next())
    }
}
