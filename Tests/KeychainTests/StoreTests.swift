import Foundation
import KeychainStore
import Testing

// The store behind the ItemStore protocol: transactions are all or nothing, ids are never
// reused, the change stamp moves with every commit (here or elsewhere), and one store is
// safe to share between threads.

private func row(_ n: UInt8, class itemClass: String = "genp") -> StoredItem {
    StoredItem(
        itemClass: itemClass, primaryIndex: [n], secondaryIndex: [0], version: 1, dataGeneration: 1,
        sealedAttributes: [n, n], wrappedItemKey: [n], sealedData: [n, n, n])
}

private struct Abort: Error {}

@Suite("ItemStore: VaultStore transactions")
struct StoreTests {
    @Test("a write whose body throws leaves nothing behind, rows or meta")
    func rollback() throws {
        try withTempDir { dir in
            let store = try VaultStore.create(at: dir + "/s.vault")
            #expect(throws: Abort.self) {
                try store.write { vault in
                    try vault.insert(row(1), id: try vault.nextItemID())
                    try vault.setMeta("m", [1])
                    throw Abort()
                }
            }
            #expect(try store.lookup { try $0.itemCount() } == 0)
            #expect(try store.lookup { try $0.meta("m") } == nil)
            // The store is usable afterwards: the failed transaction was rolled back, not left open.
            try store.write { vault in try vault.insert(row(2), id: try vault.nextItemID()) }
            #expect(try store.lookup { try $0.itemCount() } == 1)
        }
    }

    @Test("a taken primary index is StoreError.duplicate, and the transaction that hit it commits nothing")
    func duplicate() throws {
        try withTempDir { dir in
            let store = try VaultStore.create(at: dir + "/s.vault")
            try store.write { vault in try vault.insert(row(1), id: try vault.nextItemID()) }
            #expect(throws: StoreError.duplicate) {
                try store.write { vault in
                    try vault.insert(row(2), id: try vault.nextItemID())
                    try vault.insert(row(1), id: try vault.nextItemID())
                }
            }
            #expect(try store.lookup { try $0.itemCount() } == 1)
            #expect(try store.lookup { try $0.item(primaryIndex: [2], withData: false) } == nil)
        }
    }

    @Test("ids are never reused, and a metadata read leaves the data out but knows its length")
    func idsAndColumns() throws {
        try withTempDir { dir in
            let store = try VaultStore.create(at: dir + "/s.vault")
            let first = try store.write { vault -> Int64 in
                let id = try vault.nextItemID()
                try vault.insert(row(1), id: id)
                return id
            }
            try store.write { vault in try vault.delete(id: first) }
            let second = try store.write { vault -> Int64 in
                let id = try vault.nextItemID()
                try vault.insert(row(1), id: id)
                return id
            }
            #expect(second > first)
            let full = try #require(try store.item(id: second))
            #expect(full.sealedData == [1, 1, 1])
            let meta = try #require(try store.lookup { try $0.item(id: second, withData: false) })
            #expect(meta.sealedData.isEmpty)
            #expect(meta.sealedDataLength == 3)
            #expect(meta.sealedAttributes == [1, 1])
        }
    }

    @Test("the change stamp moves with a local commit and with another connection's commit, not with reads")
    func changeStamp() throws {
        try withTempDir { dir in
            let path = dir + "/s.vault"
            let store = try VaultStore.create(at: path)
            let other = try VaultStore.open(at: path)
            let start = try store.changeStamp()
            _ = try store.read { try $0.itemCount() }
            #expect(try store.changeStamp() == start)
            try store.write { vault in try vault.setMeta("a", [1]) }
            let afterLocal = try store.changeStamp()
            #expect(afterLocal != start)
            try other.write { vault in try vault.setMeta("b", [2]) }
            #expect(try store.changeStamp() != afterLocal)
            #expect(try store.lookup { try $0.meta("b") } == [2])
        }
    }

    @Test("one store shared by threads: concurrent writes and lookups all land, none lost")
    func threads() throws {
        try withTempDir { dir in
            let store = try VaultStore.create(at: dir + "/s.vault")
            let errors = ErrorBox()
            runOnThreads(
                (0..<4).map { thread in
                    { @Sendable in
                        for i in 0..<50 {
                            do {
                                try store.write { vault in
                                    try vault.insert(row(UInt8(thread * 50 + i)), id: try vault.nextItemID())
                                }
                                _ = try store.lookup { try $0.items(itemClass: "genp", withData: false) }
                            } catch { errors.add(error, "thread \(thread) write \(i)") }
                        }
                    }
                })
            #expect(errors.all.isEmpty, "\(errors.all)")
            #expect(try store.read { try $0.itemCount() } == 200)
            var seen = 0
            try store.read { vault in try vault.forEachItem { _ in seen += 1 } }
            #expect(seen == 200)
        }
    }
}
