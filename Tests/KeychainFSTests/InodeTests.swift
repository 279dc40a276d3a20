import Keychain
@testable import KeychainFS
import PropertyBased
import Testing

// Inode numbers are item ids tagged with their class (docs/architecture.md): an item keeps its
// inode across renames and the daemon keeps no path table. These properties hold without a mount.

@Suite("Inode numbers")
struct InodeTests {
    static let maxID: Int64 = (1 << 40) - 1

    @Test("item(class, id) → decodeItem gives the class and id back, for every class and ids up to 2^40-1")
    func itemRoundTrip() async {
        for itemClass in Inode.classes {
            for id in [Int64(1), 2, 255, 256, 65_535, 1 << 32, Self.maxID - 1, Self.maxID] {
                let ino = Inode.item(itemClass, id: id)
                #expect(
                    Inode.decodeItem(ino).map { $0.0 == itemClass && $0.1 == id } == true,
                    "\(itemClass) #\(id) → \(ino)")
            }
        }
        let input = Generator { rng in
            (Inode.classes.randomElement(using: &rng)!, Int64.random(in: 1...Self.maxID, using: &rng))
        }
        await propertyCheck(count: 5000, input: input) { pair in
            let (itemClass, id) = pair
            let ino = Inode.item(itemClass, id: id)
            let decoded = Inode.decodeItem(ino)
            #expect(
                decoded?.0 == itemClass && decoded?.1 == id,
                "\(itemClass) #\(id) → \(ino) → \(String(describing: decoded))")
            #expect(!Inode.isScratch(ino), "item inode \(ino) reads as scratch")
            #expect(Inode.classOf(directory: ino) == nil, "item inode \(ino) reads as a class directory")
            #expect(ino != Inode.root && ino > UInt64(Inode.classes.count) + 1)
            #expect(ino >= UInt64(1) << Inode.itemShift, "item inode \(ino) is in the directory range")
        }
    }

    @Test("items of different classes or ids never share an inode")
    func itemsAreDistinct() {
        var seen: [UInt64: String] = [:]
        for itemClass in Inode.classes {
            for id in [Int64(1), 2, 3, 1000, 1 << 20, Self.maxID] {
                let ino = Inode.item(itemClass, id: id)
                #expect(seen[ino] == nil, "\(itemClass) #\(id) and \(seen[ino] ?? "") share inode \(ino)")
                seen[ino] = "\(itemClass) #\(id)"
            }
        }
    }

    @Test("class directories: one inode per class, right after the root, never an item")
    func classDirectories() {
        var inodes: Set<UInt64> = []
        for itemClass in ItemClass.allCases {
            let ino = Inode.classDirectory(itemClass)
            #expect(Inode.classOf(directory: ino) == itemClass)
            #expect(Inode.decodeItem(ino) == nil, "class directory \(itemClass) decodes as an item")
            #expect(!Inode.isScratch(ino))
            #expect(ino != Inode.root && ino < Inode.firstDirectory)
            inodes.insert(ino)
        }
        #expect(inodes.count == ItemClass.allCases.count)
        for ino: UInt64 in [
            Inode.root, 0, UInt64(ItemClass.allCases.count) + 2, Inode.firstDirectory, Inode.firstDirectory + 12_345,
        ] {
            #expect(Inode.classOf(directory: ino) == nil, "\(ino) reads as a class directory")
            #expect(Inode.decodeItem(ino) == nil, "\(ino) reads as an item")
        }
    }

    @Test("scratch inodes never decode as items")
    func scratchInodes() async {
        for n: UInt64 in [0, 1, 2, (1 << 40) - 1] {
            let ino = Inode.scratch(n)
            #expect(
                Inode.isScratch(ino) && Inode.decodeItem(ino) == nil && Inode.classOf(directory: ino) == nil,
                "scratch \(n)")
        }
        await propertyCheck(count: 5000, input: Gen.uint64(in: 0...((1 << 40) - 1))) { n in
            let ino = Inode.scratch(n)
            #expect(Inode.isScratch(ino), "scratch \(n) → \(ino)")
            #expect(Inode.decodeItem(ino) == nil, "scratch \(n) → \(ino) decodes as an item")
            #expect(Inode.classOf(directory: ino) == nil)
        }
    }
}
