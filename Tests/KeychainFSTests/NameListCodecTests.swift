import Foundation
import PropertyBased
import Testing

@testable import Keychain

// The name list codec (Sources/Keychain/NameList.swift): a directory's entries (id and the
// attributes its file name is spelled from) cut into chunks and read back byte for byte, with
// the path codec's random names (NUL, combining marks, NFC/NFD twins, astral scalars, long names).

@Suite("Name list codec")
struct NameListCodecTests {
    static let classes: [ItemClass] = [.genericPassword, .internetPassword]

    /// A directory's worth of random items of one class, with distinct increasing ids.
    static let directory = Generator { rng -> (ItemClass, [NameListEntry]) in
        let itemClass = classes.randomElement(using: &rng)!
        var id = Int64.random(in: -3...600, using: &rng)
        var entries: [NameListEntry] = []
        for _ in 0..<Int.random(in: 0...60, using: &rng) {
            id += Int64.random(in: 1...1_000, using: &rng)
            entries.append(
                NameListEntry(id: id, itemClass, attributes: PathItem.random(itemClass, &rng).attributes))
        }
        return (itemClass, entries)
    }

    static func bytes(_ attributes: Attributes) -> [UInt8] { AttributeCodec.encode(attributes) }

    @Test("round trip: chunks decode to the same entries, byte-exact, in id order (thousands of random entries)")
    func roundTrip() async {
        await propertyCheck(count: 200, input: Self.directory) { (itemClass, entries) in
            let chunkBytes = [64, 512, NameListCodec.chunkBytes].randomElement()!
            let chunks = NameListCodec.chunks(entries.shuffled(), chunkBytes: chunkBytes)
            var decoded: [NameListEntry] = []
            for (firstID, chunk) in chunks {
                let one = try? NameListCodec.decode(chunk, itemClass: itemClass)
                #expect(one?.first?.id == firstID)
                #expect(one != nil, "a chunk does not decode")
                // A chunk over the budget holds one entry that alone exceeds it.
                #expect(chunk.count <= chunkBytes || one?.count == 1)
                decoded += one ?? []
            }
            #expect(decoded.map(\.id) == entries.map(\.id))
            #expect(decoded.map { Self.bytes($0.nameAttributes) } == entries.map { Self.bytes($0.nameAttributes) })
            #expect(entries.isEmpty == chunks.isEmpty)
        }
    }

    @Test("an entry keeps only the attributes a name is spelled from: no grouping value, no dates, no size")
    func nameAttributesOnly() {
        let attributes: Attributes = [
            Schema.service: .string("github.com"), Schema.account: .string("alice"),
            Schema.accessGroup: .string("team"), Schema.synchronizable: .bool(true),
            Schema.label: .string("GitHub token"), Schema.modificationDate: .date(Date()),
        ]
        let entry = NameListEntry(id: 7, .genericPassword, attributes: attributes)
        #expect(Set(entry.nameAttributes.keys) == [Schema.account, Schema.accessGroup, Schema.synchronizable])
    }

    @Test("malformed chunks are errSecDecode: truncated, reordered ids, another version, a stray byte")
    func malformed() throws {
        let entries = (1...5).map {
            NameListEntry(id: $0, .genericPassword, attributes: [Schema.account: .string("a\($0)")])
        }
        let chunk = try #require(NameListCodec.chunks(entries).first?.bytes)
        #expect(try NameListCodec.decode(chunk, itemClass: .genericPassword) == entries)
        for bad in [
            Array(chunk.dropLast()), [2] + chunk.dropFirst(), chunk + [0],
            NameListCodec.encode(entries.reversed()), NameListCodec.encode([entries[0], entries[0]]),
        ] {
            #expect(throws: KeychainError.self) { try NameListCodec.decode(bad, itemClass: .genericPassword) }
        }
    }
}
