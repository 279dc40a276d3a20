import Foundation
import Keychain
import KeychainCrypto
import Testing

// Keychain.addBatch (issue 9, item 6): many adds in one write transaction, all or nothing, with
// every rule of add applied to each item.

@Suite("Batch add: one transaction for many items")
struct BatchAddTests {
    private func items(_ range: Range<Int>, service: String = "batch") -> [NewItem] {
        range.map { NewItem(.genericPassword, genp(service, "acct\($0)"), data: bytes("secret-\($0)")) }
    }

    @Test("a batch's items read back byte-exact, and the manifest verifies after a fresh unlock")
    func roundTrip() throws {
        try withVault { v in
            let added = try v.keychain.addBatch(items(0..<250))
            #expect(added.count == 250)
            #expect(Set(added.map(\.id)).count == 250, "every item has its own id")
            let fresh = try v.openUnlocked()
            for i in [0, 1, 137, 249] {
                #expect(try secret(fresh, "batch", "acct\(i)") == bytes("secret-\(i)"))
            }
            let all = try fresh.copyMatching(Query(.genericPassword, genp("batch"), matchLimit: .all))
            #expect(all.count == 250)
            let report = try fresh.verify(passphrase: try secure(testPassphrase))
            #expect(report.failures.isEmpty, "verify after a batch: \(report.failures)")
            #expect(report.itemsByClass["genp"] == 250)
        }
    }

    @Test("a batch with an item add refuses stores nothing, and says which item")
    func badItemStoresNothing() throws {
        try withVault { v in
            var batch = items(0..<10)
            // A data blob over the limit: refused by add's own size rule.
            batch.insert(
                NewItem(
                    .genericPassword, genp("batch", "huge"),
                    data: [UInt8](repeating: 7, count: Keychain.maxDataSize + 1)),
                at: 5)
            expectError(.dataTooLarge, containing: ["item 6 of 11", "none was added"]) {
                try v.keychain.addBatch(batch)
            }
            expectError(.itemNotFound) {
                try v.keychain.copyMatching(Query(.genericPassword, genp("batch"), matchLimit: .all))
            }
            let report = try v.openUnlocked().verify(passphrase: try secure(testPassphrase))
            #expect(report.failures.isEmpty, "\(report.failures)")
        }
    }

    @Test("a duplicate within the batch or against the vault is errSecDuplicateItem and stores nothing")
    func duplicates() throws {
        try withVault { v in
            try v.keychain.add(.genericPassword, genp("batch", "acct3"), data: bytes("already here"))
            expectError(.duplicateItem, containing: ["item 4 of 10"]) { try v.keychain.addBatch(items(0..<10)) }
            #expect(try secret(v.keychain, "batch", "acct3") == bytes("already here"))
            #expect(try v.keychain.copyMatching(Query(.genericPassword, genp("batch"), matchLimit: .all)).count == 1)

            let twice = items(0..<3, service: "other") + items(2..<4, service: "other")
            expectError(.duplicateItem, containing: ["item 4 of 5"]) { try v.keychain.addBatch(twice) }
            expectError(.itemNotFound) { try v.keychain.find(Query(.genericPassword, genp("other", "acct0"))) }
            // The vault is as it was, and still verifies after a fresh unlock.
            let report = try v.openUnlocked().verify(passphrase: try secure(testPassphrase))
            #expect(report.failures.isEmpty, "\(report.failures)")
            #expect(report.itemsByClass["genp"] == 1)
        }
    }

    @Test("a batch on a keychain never unlocked is errSecInteractionNotAllowed")
    func locked() throws {
        try withVault { v in
            let locked = try v.open()
            expectError(.interactionNotAllowed) { try locked.addBatch(items(0..<2)) }
        }
    }

    @Test("storeBatch: add-or-update in one transaction; every refusal named, nothing stored")
    func storeBatchAddOrUpdate() throws {
        try withVault { v in
            try v.keychain.add(.genericPassword, genp("batch", "acct1"), data: bytes("old"))
            var batch = items(0..<4)
            batch.append(
                NewItem(
                    .genericPassword, genp("batch", "huge"),
                    data: [UInt8](repeating: 7, count: Keychain.maxDataSize + 1)))
            // Without updateExisting: the existing item and the huge one are both refused, nothing stored.
            do {
                _ = try v.keychain.storeBatch(batch, updateExisting: false)
                Issue.record("a batch with refusals was stored")
            } catch let refused as BatchRefused {
                #expect(refused.refusals.map(\.index) == [1, 4])
                #expect(refused.refusals.map(\.error.status) == [.duplicateItem, .dataTooLarge])
            }
            #expect(try v.keychain.copyMatching(Query(.genericPassword, genp("batch"), matchLimit: .all)).count == 1)
            // With it, and without the huge item: three added, one updated, in one transaction.
            var counted = 0
            let added = try v.keychain.storeBatch(Array(batch.prefix(4)), updateExisting: true) { counted = $0 }
            #expect(added == [true, false, true, true])
            #expect(counted == 4)
            let fresh = try v.openUnlocked()
            #expect(try secret(fresh, "batch", "acct1") == bytes("secret-1"))
            #expect(try secret(fresh, "batch", "acct3") == bytes("secret-3"))
            let report = try fresh.verify(passphrase: try secure(testPassphrase))
            #expect(report.failures.isEmpty, "\(report.failures)")
            #expect(report.itemsByClass["genp"] == 4)
        }
    }
}
