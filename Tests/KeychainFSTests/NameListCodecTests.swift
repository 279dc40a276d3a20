import Foundation
@testable import KeychainFS
import PropertyBased
import Testing

@testable import Keychain

// The name list codec (Sources/Keychain/NameList.swift): a directory's entries (id and the
// attributes its file name is spelled from) cut into chunks and read back byte for byte, with
// the path codec's random names (NUL, combining marks, NFC/NFD twins, astral scalars, long
// names); and a name spelled from an entry is the name spelled from the item's attributes.

@Suite("Name list codec")
struct NameListCodecTests {
    static let classes: [ItemClass] = [.genericPassword, .internetPassword]

    /// A directory's worth of random items of one class, with distinct increasing ids.
    static let directory = Generator { rng -> (ItemClass, [NameListEntry]) in
        let itemClass = classes.randomElement(using: &rng)!
        var id = Int64.random(in: -3...600, using: &rng)
        var entries: [NameListEntry] = []
        for _ in 0..<Int.random(in: 0...60, using: &rng) {
            id += Int64.random(in: 1...100_000, using: &rng)
            entries.append(NameListEntry(id: id, itemClass, attributes: PathItem.random(itemClass, &rng).attributes))
        }
        return (itemClass, entries)
    }

    @Test("round trip: chunks decode to the same entries, byte-exact, in id order (thousands of random entries)")
    func roundTrip() async {
        await propertyCheck(count: 200, input: Self.directory) { (itemClass, entries) in
            let chunkBytes = [64, 512, NameListCodec.chunkBytes].randomElement()!
            let chunks = NameListCodec.chunks(entries.shuffled(), chunkBytes: chunkBytes)
            var decoded: [NameListEntry] = []
            for (firstID, chunk) in chunks {
                let one = try? NameListCodec.decode(chunk, itemClass: itemClass, accessGroup: "g")
                #expect(one != nil, "a chunk does not decode")
                #expect(one?.first?.id == firstID)
                // A chunk over the budget holds one entry that alone exceeds it.
                #expect(chunk.count <= chunkBytes || one?.count == 1)
                decoded += one ?? []
            }
            #expect(decoded.map(\.id) == entries.map(\.id))
            #expect(decoded.map { Array($0.fields) } == entries.map { Array($0.fields) })
            for (entry, original) in zip(decoded, entries) {
                var expected = original.nameAttributes
                expected[Schema.accessGroup] = .string("g")
                expected[Schema.groupingAttribute(of: itemClass)] = nil
                #expect(entry.nameAttributes == expected, "\(entry)")
            }
            #expect(entries.isEmpty == chunks.isEmpty)
        }
    }

    @Test(
        "a name spelled from an entry is the name spelled from the item's attributes (every class listed, 3,000 items)")
    func sameSpelling() async {
        await propertyCheck(count: 3000, input: PathItem.generator(Self.classes)) { item in
            let attributes = item.attributes
            let encoded = NameListEntry(id: 1, item.itemClass, attributes: attributes)
            let chunk = NameListCodec.encode([encoded])
            let group: String = if case .string(let g)? = attributes[Schema.accessGroup] { g } else { "" }
            let grouping = attributes[Schema.groupingAttribute(of: item.itemClass)]
            guard
                let entry = try? NameListCodec.decode(
                    chunk, itemClass: item.itemClass, accessGroup: group, groupingValue: grouping
                ).first
            else {
                Issue.record("does not decode: \(item)")
                return
            }
            #expect(
                PathCodec.leaf(of: item.itemClass, entry).utf8.elementsEqual(
                    PathCodec.leaf(of: item.itemClass, attributes).utf8), "\(item)")
            #expect(
                PathCodec.ListedLeaves(item.itemClass).leaf(entry).utf8.elementsEqual(
                    PathCodec.leaf(of: item.itemClass, attributes).utf8), "\(item)")
            #expect(
                PathCodec.directory(of: item.itemClass, entry).map { Array($0.utf8) }
                    == PathCodec.directory(of: item.itemClass, attributes).map { Array($0.utf8) }, "\(item)")
        }
    }

    @Test(
        "a listing's names made from stored bytes are the names leaf(of:) spells, at the edges of that path (5,000 names)"
    )
    func listedLeavesAtTheEdges() {
        // Plain ASCII accounts with the bytes that decide between the two paths put first, last
        // or inside: the ones escaped, the component rules' (`.`, `#`, `4` first, `~` last),
        // lengths around the 255-byte limit, and the empty account.
        var rng = SystemRandomNumberGenerator()
        let edges = Array(".#4~;%/\0 =".utf8) + [0]
        var fast = 0
        for round in 0..<5_000 {
            var bytes = (0..<Int.random(in: 0...12, using: &rng)).map { _ in UInt8.random(in: 0x61...0x7A, using: &rng)
            }
            if round % 50 == 0 { bytes += Array(repeating: UInt8(ascii: "a"), count: 240 + round % 30) }
            if !bytes.isEmpty, Bool.random(using: &rng) {
                bytes[[0, bytes.count - 1, bytes.count / 2].randomElement(using: &rng)!] = edges.randomElement(
                    using: &rng)!
            }
            let account = String(decoding: bytes, as: UTF8.self)
            var attributes: Attributes = [
                Schema.service: .string("svc"), Schema.account: .string(account),
                Schema.accessGroup: .string(round % 7 == 0 ? "team" : Caller.defaultAccessGroup),
                Schema.synchronizable: .bool(round % 11 == 0),
            ]
            if round % 13 == 0 { attributes[Schema.accessGroup] = .string("") }
            let group: String = if case .string(let g)? = attributes[Schema.accessGroup] { g } else { "" }
            let chunk = NameListCodec.encode([NameListEntry(id: 9, .genericPassword, attributes: attributes)])
            guard
                let entry = try? NameListCodec.decode(
                    chunk, itemClass: .genericPassword, accessGroup: group, groupingValue: .string("svc")
                ).first
            else {
                Issue.record("does not decode: \(bytes)")
                continue
            }
            let listed = PathCodec.ListedLeaves(.genericPassword).leaf(entry)
            #expect(
                listed.utf8.elementsEqual(PathCodec.leaf(of: .genericPassword, attributes).utf8),
                "\(bytes) \(attributes)")
            if entry.soleString(Schema.account).map(PathCodec.isPlainLeaf) == true { fast += 1 }
        }
        // Both paths were taken many times.
        #expect(fast > 1_000 && fast < 4_900, "\(fast) names made from stored bytes")
    }

    @Test("an entry keeps only the attributes a name is spelled from: no dates, no size, no label")
    func nameAttributesOnly() {
        let attributes: Attributes = [
            Schema.service: .string("github.com"), Schema.account: .string("alice"),
            Schema.accessGroup: .string("team"), Schema.synchronizable: .bool(true),
            Schema.label: .string("GitHub token"), Schema.modificationDate: .date(Date()),
        ]
        let entry = NameListEntry(id: 7, .genericPassword, attributes: attributes)
        #expect(
            Set(entry.nameAttributes.keys) == [
                Schema.service, Schema.account, Schema.accessGroup, Schema.synchronizable,
            ])
        #expect(entry[Schema.label] == nil && entry[Schema.modificationDate] == nil)
        // Stored: the account and `synchronizable` (true); not the group or the service (the list's).
        #expect(entry.fields.count == 2 + 1 + 5 + 2 + 1 + 1)
    }

    @Test("malformed chunks are errSecDecode: truncated, another version, a stray byte, an id not increasing")
    func malformed() throws {
        let entries = (1...5).map {
            NameListEntry(id: $0, .genericPassword, attributes: [Schema.account: .string("a\($0)")])
        }
        let chunk = try #require(NameListCodec.chunks(entries).first?.bytes)
        let decoded = try NameListCodec.decode(chunk, itemClass: .genericPassword, accessGroup: "default")
        #expect(decoded.map(\.id) == [1, 2, 3, 4, 5])
        #expect(zip(decoded, entries).allSatisfy { $0.sameName(as: $1) })
        var zeroDelta = NameListCodec.encode([entries[0]])
        zeroDelta += [0] + NameListCodec.encode([entries[1]]).dropFirst(9)
        for bad in [Array(chunk.dropLast()), [2] + chunk.dropFirst(), chunk + [0], zeroDelta] {
            #expect(throws: KeychainError.self) {
                try NameListCodec.decode(bad, itemClass: .genericPassword, accessGroup: "default")
            }
        }
        // Handed out one by one: the entries before the bad one are seen, then the chunk throws
        // (a listing that gathered them drops them: the listing fails as a whole).
        var seen: [Int64] = []
        #expect(throws: KeychainError.self) {
            try NameListCodec.forEachEntry(chunk + [0], itemClass: .genericPassword, accessGroup: "default") {
                seen.append($0.id)
            }
        }
        #expect(seen == [1, 2, 3, 4, 5])
    }
}
