import Testing

@testable import PushWorker

@Suite struct TagTableTests {
    @Test("Tags are handed out in order, and each gives back its value once, in any order")
    func valuesComeBackByTag() {
        var table = TagTable<String>(firstTag: 10)
        let tags = ["a", "b", "c", "d"].map { table.insert($0) }
        #expect(tags == [10, 11, 12, 13])
        #expect(table.remove(12) == "c")
        #expect(table.remove(12) == nil)
        #expect(table.remove(10) == "a")
        #expect(table.count == 2)
        #expect(table.remove(99) == nil)
        #expect(table.remove(9) == nil)
        #expect(table.insert("e") == 14)
        #expect(table.remove(13) == "d")
        #expect(table.remove(11) == "b")
        #expect(table.remove(14) == "e")
        #expect(table.count == 0)
        #expect(table.insert("f") == 15)
    }

    @Test("A value held past the ring's span is kept apart and still found; the ring stays within its span")
    func longHeldValuesOverflow() {
        var table = TagTable<Int>(firstTag: 1, span: 4)
        let held = table.insert(0)
        var seen: [Int] = []
        // A thousand values come and go while the first stays.
        for n in 1...1000 {
            let tag = table.insert(n)
            if n > 2 { seen.append(table.remove(tag - 2)!) }
        }
        #expect(seen == Array(1...998))
        #expect(table.count == 3)
        var values: [Int] = []
        table.forEach { values.append($0) }
        #expect(values.sorted() == [0, 999, 1000])
        #expect(table.remove(held) == 0)
        #expect(table.remove(held) == nil)
        #expect(table.remove(1000) == 999)
        #expect(table.remove(1001) == 1000)
        #expect(table.count == 0)
    }
}
